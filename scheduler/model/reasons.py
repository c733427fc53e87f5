"""Why a node was not chosen: named reasons, counted per node, so "why is it pending"
reads like kube-scheduler's ``0/12 nodes available: 7 insufficient cpu, 2 drained``.

Fixed reasons are constants; reasons that name a resource, port or constraint are built
by the small functions below so that the same wording is used everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_DOWN = "node down"
NODE_PAUSED = "node paused"
NODE_DRAINED = "node drained"
NODE_GONE = "node removed"
MAX_PER_NODE = "max_per_node reached"
STALE_LEASE = "lease expired"
NO_NODES = "no nodes registered"
PLATFORM_MISMATCH = "platform mismatch"
NO_AGENT = "node has no agent"  # an assigned task there does not start (scheduler/control/starting.py)


def insufficient(resource: str) -> str:
    return f"insufficient {resource}"


def slots_full(slots: int) -> str:
    """A node whose agent runs no more live tasks (kube's "Too many pods")."""
    return f"node has all {slots} task slots in use" if slots != 1 else "node has its 1 task slot in use"


def over_quota(namespace: str, resource: str) -> str:
    return f"namespace {namespace} over its {resource} quota"


def gang_refused(job: str, task_id: str, reason: str) -> str:
    return f"gang {job} refused: {task_id}: {reason}"


def port_in_use(port: int) -> str:
    return f"host port {port} in use"


def missing_plugin(plugin: str) -> str:
    return f"missing plugin {plugin}"


def constraint_not_met(text: str) -> str:
    return f"constraint {text} not met"


def untolerated_taint(taint: str) -> str:
    return f"untolerated taint {taint}"


def tolerated_for_no_time(taint: str) -> str:
    """A NoExecute taint tolerated with toleration_seconds 0: the task would leave as it lands."""
    return f"taint {taint} tolerated for 0 s"


# Domain rules (their words travel to the commit with each rule, so both say the same).
NODES_CHANGED = "nodes changed since planned"
RULES_CHANGED = "job labels or rules changed since planned"


def spread_missing(attribute: str) -> str:
    return f"no {attribute} for topology_spread"


def spread_skew(attribute: str, max_skew: int) -> str:
    return f"topology_spread {attribute} max_skew {max_skew} exceeded"


def distinct_missing(attribute: str) -> str:
    return f"no {attribute} for distinct_property"


def distinct_reached(attribute: str, limit: int) -> str:
    return f"distinct_property {attribute} {limit} reached"


def job_affinity_not_met(selector: str, attribute: str) -> str:
    return f"job_affinity {selector} on {attribute} not met"


def job_anti_affinity(selector: str, attribute: str) -> str:
    return f"job_anti_affinity {selector} on {attribute}"


def job_anti_affinity_of(job: str, attribute: str) -> str:
    return f"job_anti_affinity of job {job} on {attribute}"


@dataclass(slots=True)
class Explanation:
    """Counts of reasons over the nodes evaluated for one task (or one group of identical tasks)."""

    nodes_evaluated: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    available: int = 0

    def add(self, reason: str, count: int = 1) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + count

    def message(self) -> str:
        if self.nodes_evaluated == 0 and not self.reasons:
            return f"0/0 nodes available: {NO_NODES}."
        parts = sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))
        detail = ", ".join(f"{count} {reason}" for reason, count in parts)
        head = f"{self.available}/{self.nodes_evaluated} nodes available"
        return f"{head}: {detail}." if detail else f"{head}."

    def to_dict(self) -> dict:
        return {"nodes_evaluated": self.nodes_evaluated, "reasons": dict(self.reasons), "message": self.message()}

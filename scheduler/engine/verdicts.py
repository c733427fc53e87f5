"""Node by node, why one more task of a job would or would not go there now, with amounts.

The counts a pending task carries (``0/12 nodes available: 7 insufficient cpu, ...``) say
how many nodes failed for each reason; this says which node failed for which, and for
every resource the task needs, how much the node has free for it: its capacity less what
is allocated and what it holds for preemptors this task must leave alone
(:func:`scheduler.engine.fit.held_room`). So "insufficient memory" reads as "needs
1 GiB, 512 MiB free". The verdict is the filter pipeline's, in the placer's words and
order. Pure: the nodes and the job's task counts per node are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from scheduler.engine.domains import DomainCounts
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.fit import held_room
from scheduler.engine.rules import domain_misfit
from scheduler.model import JobSpec, Node, reasons
from scheduler.model.placement_rules import Rules

HELD_FOR_PREEMPTOR = "held for a preemptor"


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    reason: str | None  # None: one more task fits there now
    free: dict[str, int]  # per resource the task needs: what the node has free for it
    short: frozenset[str]  # the needed resources it has too little of
    ports: dict[int, str]  # the job's host ports taken there -> the task holding each (or HELD_FOR_PREEMPTOR)

    @property
    def fits(self) -> bool:
        return self.reason is None


def needs(spec: JobSpec) -> dict[str, int]:
    """What one task of the job asks for (resources above zero), in stored units."""
    return {resource: amount for resource, amount in spec.resources.items() if amount > 0}


def verdicts(spec: JobSpec, nodes: Iterable[Node], job_counts: Mapping[str, int], rules: Rules | None = None,
             domains: DomainCounts | None = None) -> list[NodeVerdict]:
    """One verdict per node: the nodes it fits on first, then the nearest misses (a node
    short of room, a port, a task slot or ``max_per_node``, by how little it lacks, or refused by a
    domain rule: spread, distinct_property, job affinity or anti-affinity), then nodes
    that cannot take it whatever runs there (down, paused, constraints, platform,
    plugins, taints)."""
    pipeline = filter_pipeline(spec)
    wanted = needs(spec)
    hard = rules is not None and rules.hard
    ruled: set[str] = set()
    full: set[str] = set()  # the slot reasons of the nodes (one per number of slots)
    out = []
    for node in nodes:
        if node.slots:
            full.add(reasons.slots_full(node.slots))
        reason = pipeline.check(node, job_counts.get(node.name, 0))
        if reason is None and hard:
            reason = domain_misfit(node, rules, domains or DomainCounts())
            if reason is not None:
                ruled.add(reason)
        held, held_ports = held_room(node, spec.priority, spec.id) if node.nominations else ({}, set())
        free = {r: node.capacity.get(r, 0) - node.allocated.get(r, 0) - held.get(r, 0) for r in wanted}
        short = frozenset(r for r, amount in wanted.items() if free[r] < amount)
        ports = {port: node.ports.get(port, HELD_FOR_PREEMPTOR) for port in spec.ports
                 if port in node.ports or port in held_ports}
        out.append(NodeVerdict(node.name, reason, free, short, ports))
    # Reasons that come and go with the tasks on a node (the rest hold whatever runs there).
    passing = {reasons.insufficient(r) for r in wanted} | {reasons.port_in_use(p) for p in spec.ports}
    passing.add(reasons.MAX_PER_NODE)
    passing |= ruled
    passing |= full

    def order(verdict: NodeVerdict):
        if verdict.fits:
            return (0, 0.0, verdict.node)
        if verdict.reason in passing:
            return (1, sum((wanted[r] - verdict.free[r]) / wanted[r] for r in verdict.short), verdict.node)
        return (2, 0.0, verdict.node)

    out.sort(key=order)
    return out

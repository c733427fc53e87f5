"""A copy of the cluster to try placements on: nodes, the live tasks on them and the
specs of their jobs, changed only here, and placed on by the same :class:`Placer` the
workers use, with every hard rule it holds (room, host ports, ``max_per_node``,
constraints, taints, topology spread, job affinity, ``distinct_property``).

What ``sched rebalance`` plans its moves on (taking a task off one node, placing it
again), and what a scale-down simulation asks (could every task of this node go
elsewhere?). Pure: the caller reads the copy from Redis (``scheduler/control/cluster_read.py``)
or builds it (tests, traces); nothing here talks to Redis, and the nodes given are the
copy's own (changed in place).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterable, Iterator

from scheduler.engine.domains import DomainCounts
from scheduler.engine.placement import PlacementOptions, Placer
from scheduler.engine.rules import RuleIndex, resolve
from scheduler.model import ACTIVE, BINPACK, PAUSE, READY, JobSpec, Node
from scheduler.model.domains import TOTAL, node_domains
from scheduler.model.placement_rules import Rules
from scheduler.model.states import RUNNING


@dataclass(slots=True)
class Resident:
    """A live task in the copy: what it holds on its node, and whether it may be moved
    (the caller decides: a running task of a service at its current version, say)."""

    id: str
    job: str
    node: str
    resources: dict[str, int]
    ports: tuple[int, ...] = ()
    priority: int = 50
    state: str = RUNNING
    movable: bool = True
    domains: tuple[str, ...] | None = None  # the tally:dom fields it is counted under (None: not counted)
    started_ms: int = 0


class Cluster:
    """Nodes (by name, in a stable order the placer's table follows), residents, the job
    specs by job id, the rule index and the domain counts."""

    def __init__(self, nodes: Iterable[Node], residents: Iterable[Resident] = (), specs: dict[str, JobSpec] | None = None,
                 index: RuleIndex | None = None, epoch: str = "", seed: int = 0):
        self.order: list[Node] = list(nodes)
        self.nodes: dict[str, Node] = {node.name: node for node in self.order}
        self.specs: dict[str, JobSpec] = dict(specs or {})
        self.index = index or RuleIndex()
        self.domains = DomainCounts()  # counted jobs' tasks by domain (tally:dom), from the residents
        self.epoch = epoch
        self.placer = Placer(PlacementOptions(seed=seed))
        self.tasks: dict[str, Resident] = {}
        self.on_node: dict[str, dict[str, Resident]] = {node.name: {} for node in self.order}
        self.counts: dict[str, dict[str, int]] = {}  # job -> node -> its live tasks there (tally:job)
        self._rules: dict[str, Rules | None] = {}
        self._binpack: dict[str, JobSpec] = {}
        self._cordons: set[str] = set()  # nodes paused by cordoned(), active in truth
        for resident in residents:
            self._track(resident)
            if resident.domains is not None:
                self._count(resident, 1)

    # What is where.
    def _track(self, resident: Resident) -> None:
        self.tasks[resident.id] = resident
        self.on_node.setdefault(resident.node, {})[resident.id] = resident
        on = self.counts.setdefault(resident.job, {})
        on[resident.node] = on.get(resident.node, 0) + 1

    def _count(self, resident: Resident, sign: int) -> None:
        """Count a resident under the domains it was counted under (what commit.lua
        recorded on the task, and what its release takes back)."""
        fields = self.domains.counts.setdefault(resident.job, {})
        for name in (*(resident.domains or ()), TOTAL):
            left = fields.get(name, 0) + sign
            if left:
                fields[name] = left
            else:
                fields.pop(name, None)

    def count(self, job: str, node: str) -> int:
        return self.counts.get(job, {}).get(node, 0)

    def residents_of(self, job: str) -> list[Resident]:
        return [t for t in self.tasks.values() if t.job == job]

    def by_job(self) -> dict[str, list[Resident]]:
        out: dict[str, list[Resident]] = {}
        for resident in self.tasks.values():
            out.setdefault(resident.job, []).append(resident)
        return out

    def usable(self, node: Node) -> bool:
        """Whether the node takes work (ready and active; a cordon of a plan's own aside)."""
        return node.status == READY and (node.availability == ACTIVE or node.name in self._cordons)

    def utilisation(self, node: Node) -> dict[str, float]:
        """Each resource's share of the node's capacity in use (0..1), for the resources it has."""
        return {r: node.allocated.get(r, 0) / c for r, c in node.capacity.items() if c > 0}

    # Rules and specs.
    def rules(self, spec: JobSpec) -> Rules | None:
        """The spec's domain rules against this copy (its spreads' eligible domains from
        every node here), resolved once per job."""
        if not spec.rules:
            return None
        if spec.id not in self._rules:
            self._rules[spec.id] = resolve(
                spec, self.index, lambda attribute: self.placer.eligible_domains(self.order, spec, attribute),
                self.epoch)
        return self._rules[spec.id]

    def binpacked(self, spec: JobSpec) -> JobSpec:
        """The spec ranked by binpack (Nomad's fit: the fullest node first), every rule kept."""
        if spec.strategy == BINPACK:
            return spec
        if spec.id not in self._binpack:
            self._binpack[spec.id] = replace(spec, strategy=BINPACK)
        return self._binpack[spec.id]

    # Changing the copy.
    def place(self, spec: JobSpec, task_id: str) -> str | None:
        """Place one more task of ``spec`` where the engine would now; returns its node,
        or None where no node takes it. The task becomes a resident (movable: False)."""
        counts = self.counts.setdefault(spec.id, {})
        # A counted job has rules, so the rule path places it and counts it by domain too.
        result = self.placer.place(self.order, spec, [task_id], job_counts=counts, rules=self.rules(spec),
                                   domains=self.domains)
        if not result.assignments:
            return None
        node = result.assignments[0][1]
        resident = Resident(task_id, spec.id, node, dict(spec.resources),  # what the placement took there
                            spec.ports, spec.priority, RUNNING, movable=False,
                            domains=tuple(node_domains(self.nodes[node])) if spec.counted else None)
        self.tasks[task_id] = resident
        self.on_node.setdefault(node, {})[task_id] = resident
        return node

    def remove(self, task_id: str) -> Resident:
        """Take a resident off its node: what it holds is free again."""
        resident = self.tasks.pop(task_id)
        node = self.nodes[resident.node]
        del self.on_node[resident.node][task_id]
        allocated = node.allocated
        for resource, amount in resident.resources.items():
            allocated[resource] = allocated.get(resource, 0) - amount
        for port in resident.ports:
            if node.ports.get(port) == task_id:
                del node.ports[port]
        node.tasks -= 1
        on = self.counts.get(resident.job, {})
        if on.get(resident.node):
            on[resident.node] -= 1
            if not on[resident.node]:
                del on[resident.node]
        if resident.domains is not None:
            self._count(resident, -1)
        self.placer.replaced((), changed=[node.name])
        return resident

    def put(self, resident: Resident) -> None:
        """Give a removed resident back its room on its node (an undo of :meth:`remove`)."""
        node = self.nodes[resident.node]
        for resource, amount in resident.resources.items():
            node.allocated[resource] = node.allocated.get(resource, 0) + amount
        for port in resident.ports:
            node.ports[port] = resident.id
        node.tasks += 1
        if resident.domains is not None:
            self._count(resident, 1)
        self._track(resident)
        self.placer.replaced((), changed=[node.name])

    @contextmanager
    def cordoned(self, names: Iterable[str]) -> Iterator[None]:
        """Nodes that take no new task while inside (paused here only, as ``sched node
        pause`` would): where a task is moved from, or nodes being emptied."""
        changed = [name for name in set(names) if self.nodes[name].availability == ACTIVE]
        for name in changed:
            self.nodes[name].availability = PAUSE
        self._cordons.update(changed)
        if changed:
            self.placer.replaced((), changed=changed)
        try:
            yield
        finally:
            for name in changed:
                self.nodes[name].availability = ACTIVE
            self._cordons.difference_update(changed)
            if changed:
                self.placer.replaced((), changed=changed)

"""A copy of the cluster to try things on with the real placement engine: add nodes that
do not exist yet, take nodes away with their tasks, and place tasks as the workers would
(the :class:`~scheduler.engine.placement.Placer` they use, with every hard rule:
constraints, platform and plugins, taints and tolerations, resources, host ports,
``max_per_node``, topology spread, job affinity and anti-affinity, ``distinct_property``).

Nothing here writes to Redis. The copy is read once (:meth:`ClusterCopy.read`, a few
round trips: ``scheduler/state/cluster.py``) and then changed only in memory, so that each
change is seen by the placements after it: room taken by one placement, or freed by a
node taken away, is never counted twice. ``sched capacity`` runs its scale-up and
scale-down simulations on it; anything that means to place on a copy of the cluster can.

One list of nodes is kept for the placer's whole life, so its node table follows the
copy row by row instead of being laid out anew for every call: a node taken away stays
in the list, marked drained (the fit rule then refuses it, as a drained node), and the
placer is told which rows changed.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from scheduler.control.rule_view import eligible_domains
from scheduler.engine.domains import DomainCounts
from scheduler.engine.placement import Placement, PlacementOptions, Placer
from scheduler.engine.rules import RuleIndex, resolve
from scheduler.model import ACTIVE, DRAIN, READY, JobSpec, Node, Task
from scheduler.model.placement_rules import Rules
from scheduler.state.cluster import ClusterState


@dataclass
class Taken:
    """What :meth:`ClusterCopy.take_away` took off a node, to give back with :meth:`ClusterCopy.give_back`."""

    node: str
    availability: str
    tasks: list[Task]


class ClusterCopy:
    """The cluster as read, changed only in memory."""

    def __init__(self, state: ClusterState, options: PlacementOptions | None = None):
        self.state = state
        self.placer = Placer(options or PlacementOptions(seed=0))
        # Copies of the nodes and tasks read: placing changes them, and several copies may
        # be made from one reading.
        self.nodes: list[Node] = [_fresh(node) for node in state.nodes]
        self.by_name: dict[str, Node] = {node.name: node for node in self.nodes}
        self.specs = dict(state.specs)
        self.current = dict(state.current)
        self.tasks_on: dict[str, list[Task]] = defaultdict(list)
        self.job_counts: dict[str, dict[str, int]] = defaultdict(dict)
        counted: dict[str, dict[str, int]] = {}
        for task in map(copy.copy, state.live):
            if task.node not in self.by_name:
                continue
            self.tasks_on[task.node].append(task)
            counts = self.job_counts[task.job]
            counts[task.node] = counts.get(task.node, 0) + 1
            if task.domains is not None:
                fields = counted.setdefault(task.job, {})
                for name in (*task.domains, "*"):
                    fields[name] = fields.get(name, 0) + 1
        self.domains = DomainCounts(counted)
        self.index = RuleIndex(state.rules_gen, state.job_labels, state.job_anti)
        self.gone: set[str] = set()  # nodes taken away
        self._view: list[Node] | None = None  # the nodes not taken away, for spreads' eligible domains
        self._rules: dict[tuple[str, int], Rules | None] = {}

    @classmethod
    def read(cls, store, options: PlacementOptions | None = None) -> ClusterCopy:
        return cls(store.cluster_state(), options)

    # Changing the copy.
    def add_nodes(self, nodes: list[Node]) -> None:
        """Nodes that do not exist yet, empty (a new list: the placer lays its table out anew)."""
        for node in nodes:
            if node.name in self.by_name:
                raise ValueError(f"node {node.name} is already in the copy")
            self.by_name[node.name] = node
        self.nodes = [*self.nodes, *nodes]
        self._changed_domains()

    def drop_nodes(self, names: list[str]) -> None:
        """Forget nodes added with :meth:`add_nodes` (empty ones: nothing placed on them)."""
        drop = set(names)
        self.nodes = [node for node in self.nodes if node.name not in drop]
        for name in drop:
            self.by_name.pop(name, None)
        self._changed_domains()

    def take_away(self, name: str) -> Taken:
        """Take a node out of service with every task on it: its tasks no longer hold room,
        count on their jobs or in their domains, and nothing more is placed on it."""
        node = self.by_name[name]
        tasks = self.tasks_on.pop(name, [])
        for task in tasks:
            self._uncount(task, node)
        taken = Taken(name, node.availability, tasks)
        node.availability = DRAIN
        self.gone.add(name)
        self._changed_domains()
        self.placer.replaced((), changed=[name])
        return taken

    def give_back(self, taken: Taken) -> None:
        """Undo :meth:`take_away`."""
        node = self.by_name[taken.node]
        node.availability = taken.availability
        for task in taken.tasks:
            self._count(task, node)
        self.tasks_on[taken.node] = list(taken.tasks)
        self.gone.discard(taken.node)
        self._changed_domains()
        self.placer.replaced((), changed=[taken.node])

    def _count(self, task: Task, node: Node, sign: int = 1) -> None:
        for resource, amount in task.allocated.items():
            node.allocated[resource] = node.allocated.get(resource, 0) + sign * amount
        for port in task.ports:
            if sign > 0:
                node.ports[port] = task.id
            elif node.ports.get(port) == task.id:
                del node.ports[port]
        node.tasks += sign
        counts = self.job_counts[task.job]
        left = counts.get(node.name, 0) + sign
        if left > 0:
            counts[node.name] = left
        else:
            counts.pop(node.name, None)
        if task.domains is not None:
            self.domains.add(task.job, node, sign)

    def _uncount(self, task: Task, node: Node) -> None:
        self._count(task, node, -1)

    # Placing on the copy.
    def place(self, spec: JobSpec, task_ids: list[str], only: list[Node] | None = None) -> Placement:
        """Place ``task_ids``, tasks of ``spec``, as a worker would place them now on this
        copy (on the nodes of ``only``, if given: a pinned task's node). What is placed
        holds its room from then on."""
        rules = self.rules(spec)
        counts = self.job_counts[spec.id]
        if only is not None:
            return self.placer.place(only, spec, task_ids, job_counts=counts, rules=rules, domains=self.domains)
        return self.placer.place(self.nodes, spec, task_ids, job_counts=counts, rules=rules, domains=self.domains)

    def place_gang(self, spec: JobSpec, task_ids: list[str], need: int) -> Placement:
        """Place a gang's members: at least ``need`` of them at once, or none."""
        result = self.place(spec, task_ids)
        if len(result.assignments) >= need:
            return result
        self.unplace(spec, result.assignments)
        return Placement([], list(task_ids), result.explanation)

    def unplace(self, spec: JobSpec, assignments: list[tuple[str, str]]) -> None:
        """Take back placements of :meth:`place`."""
        if not assignments:
            return
        self.placer.undo(self.by_name, spec, assignments, self.job_counts[spec.id])
        if spec.counted:
            for _, name in assignments:
                self.domains.add(spec.id, self.by_name[name], -1)

    def rules(self, spec: JobSpec) -> Rules | None:
        """The spec's domain rules against the copy: its spreads' eligible domains are those
        of the nodes not taken away (added ones included)."""
        if not spec.rules:
            return None
        key = (spec.id, id(spec))
        if key not in self._rules:
            view = self._view
            if view is None:
                view = self._view = [node for node in self.nodes if node.name not in self.gone]
            self._rules[key] = resolve(spec, self.index, lambda attribute: eligible_domains(view, spec, attribute),
                                       None)
        return self._rules[key]

    def _changed_domains(self) -> None:
        self._view = None
        self._rules.clear()

    # Reading the copy.
    def usable(self) -> list[Node]:
        """Nodes that take work now: ready, active and not taken away."""
        return [node for node in self.nodes
                if node.status == READY and node.availability == ACTIVE and node.name not in self.gone]

    def spec_of(self, task: Task) -> JobSpec | None:
        return self.specs.get((task.job, task.version))


def _fresh(node: Node) -> Node:
    """A copy of ``node`` whose changing parts are its own."""
    return dataclasses.replace(node, allocated=dict(node.allocated), ports=dict(node.ports),
                               nominations=dict(node.nominations))

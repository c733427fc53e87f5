"""What ``sched capacity`` does on the shared copy of the cluster
(:class:`scheduler.engine.cluster.Cluster`, read by ``cluster_read.py``): places the
pending tasks, many at a time, with the workers' :class:`Placer` and every hard rule;
adds nodes that do not exist yet (a pool's) and drops them again; takes a node out of
service with all its tasks and gives it back.

Each change is seen by the placements after it, so room taken by one placement, or
freed by a node taken away, is never counted twice. Nothing here writes to Redis. The
copy's list of nodes stays one list while nodes are only taken away (marked drained:
the fit rule then refuses them), so the placer's node table follows it row by row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scheduler.control.cluster_read import Copy
from scheduler.engine.cluster import Cluster, Resident
from scheduler.engine.placement import Placement
from scheduler.model import ACTIVE, DRAIN, READY, JobSpec, Node
from scheduler.model.domains import node_domains
from scheduler.model.states import ASSIGNED
from scheduler.state.capacity import PendingWork


@dataclass
class Taken:
    """What :meth:`CapacityCopy.take_away` took off a node, for :meth:`CapacityCopy.give_back`."""

    node: str
    availability: str
    residents: list[Resident]


class CapacityCopy:
    """The cluster as read (its live tasks, and its pending tasks with their specs)."""

    def __init__(self, read: Copy, pending: PendingWork, fresh: bool = True):
        self.read, self.pending = read, pending
        self.cluster: Cluster = _copy_of(read.cluster) if fresh else read.cluster
        self._tainted()
        self.specs = dict(pending.specs)  # (job, version) -> spec, for the pending tasks
        self.gone: set[str] = set()  # nodes taken away
        self.added: set[str] = set()  # nodes added

    @property
    def nodes(self) -> list[Node]:
        return self.cluster.order

    @property
    def by_name(self) -> dict[str, Node]:
        return self.cluster.nodes

    def usable(self) -> list[Node]:
        """The nodes of the cluster read that take work: ready, active, not taken away."""
        return [node for node in self.cluster.order if node.status == READY and node.availability == ACTIVE
                and node.name not in self.gone and node.name not in self.added]

    def residents_on(self, name: str) -> list[Resident]:
        return list(self.cluster.on_node.get(name, {}).values())

    def current(self, job: str) -> JobSpec | None:
        return self.cluster.specs.get(job)

    # Nodes.
    def add_nodes(self, nodes: list[Node]) -> None:
        """Nodes that do not exist yet, empty. A spread's eligible domains may grow with
        them, so the rules resolved so far are resolved again."""
        cluster = self.cluster
        cluster.order = [*cluster.order, *nodes]
        for node in nodes:
            cluster.nodes[node.name] = node
            cluster.on_node[node.name] = {}
            self.added.add(node.name)
        cluster._rules.clear()
        self._tainted()

    def drop_nodes(self, names: list[str]) -> None:
        """Forget nodes added with :meth:`add_nodes` (their residents first, if any)."""
        cluster, drop = self.cluster, set(names)
        for name in drop:
            for task_id in list(cluster.on_node.get(name, {})):
                cluster.remove(task_id)
            cluster.on_node.pop(name, None)
            cluster.nodes.pop(name, None)
            self.added.discard(name)
        cluster.order = [node for node in cluster.order if node.name not in drop]
        cluster._rules.clear()
        self._tainted()

    def _tainted(self) -> None:
        """Tell the placer which nodes have taints, as a worker's node cache does, so that
        each call does not look through every node for them."""
        self.cluster.placer.tainted = [node for node in self.cluster.order if node.taints]

    def take_away(self, name: str) -> Taken:
        """Take a node out of service with its tasks: they hold no room and count on no
        job or domain any more, and nothing more is placed there."""
        cluster = self.cluster
        residents = [cluster.remove(task_id) for task_id in list(cluster.on_node.get(name, {}))]
        node = cluster.nodes[name]
        taken = Taken(name, node.availability, residents)
        node.availability = DRAIN
        self.gone.add(name)
        cluster.placer.replaced((), changed=[name])
        return taken

    def give_back(self, taken: Taken) -> None:
        """Undo :meth:`take_away`."""
        cluster = self.cluster
        cluster.nodes[taken.node].availability = taken.availability
        self.gone.discard(taken.node)
        for resident in taken.residents:
            cluster.put(resident)
        cluster.placer.replaced((), changed=[taken.node])

    # Placing.
    def place(self, spec: JobSpec, task_ids: list[str], only: list[Node] | None = None) -> Placement:
        """Place ``task_ids``, tasks of ``spec``, as a worker would now (on ``only``, if
        given: a pinned task's node); what is placed holds its room from then on, as a
        resident that may move again."""
        cluster = self.cluster
        counts = cluster.counts.setdefault(spec.id, {})
        result = cluster.placer.place(only if only is not None else cluster.order, spec, task_ids,
                                      job_counts=counts, rules=cluster.rules(spec), domains=cluster.domains)
        for task_id, name in result.assignments:
            resident = Resident(task_id, spec.id, name, dict(spec.resources), tuple(spec.ports), spec.priority,
                                ASSIGNED, movable=True,
                                domains=tuple(node_domains(cluster.nodes[name])) if spec.counted else None)
            cluster.tasks[task_id] = resident
            cluster.on_node.setdefault(name, {})[task_id] = resident
        return result

    def place_gang(self, spec: JobSpec, task_ids: list[str], need: int) -> Placement:
        """A gang's members: at least ``need`` of them at once, or none."""
        result = self.place(spec, task_ids)
        if len(result.assignments) >= need:
            return result
        self.unplace(result.assignments)
        return Placement([], list(task_ids), result.explanation)

    def unplace(self, assignments: list[tuple[str, str]]) -> None:
        """Take back placements of :meth:`place`."""
        for task_id, _ in assignments:
            self.cluster.remove(task_id)


def _copy_of(cluster: Cluster) -> Cluster:
    """A copy of ``cluster`` whose nodes and residents are its own: placing on it leaves
    the original as read, so one reading serves both halves of an answer."""
    nodes = [dataclasses.replace(node, allocated=dict(node.allocated), ports=dict(node.ports),
                                 nominations=dict(node.nominations)) for node in cluster.order]
    residents = [Resident(r.id, r.job, r.node, r.resources, r.ports, r.priority, r.state, r.movable, r.domains,
                          r.started_ms) for r in cluster.tasks.values()]
    return Cluster(nodes, residents, cluster.specs, cluster.index, cluster.epoch)

"""How many nodes of one shape a set of tasks needs: the cluster-autoscaler's binpacking
estimator (``estimator/binpacking_estimator.go``), first-fit decreasing.

Tasks are taken largest first (the autoscaler's decreasing order: the sum of each
resource's share of the node), each put on the first new node where it fits (every
resource, its host ports, its job's ``max_per_node``), else on a node opened for it. A
task that does not fit on an empty node of the shape is left out; so is one that would
open a node beyond ``limit``. First-fit decreasing needs at most 11/9 of the optimum
plus one node in one dimension; the autoscaler counts on the same.

Pure: no Redis, no engine. ``sched capacity`` then proves the estimate by placing the
tasks with the real placement engine on a copy of the cluster with that many new nodes
(``scheduler/control/scale_up.py``), which also holds every rule this does not know of
(spreads, affinities, taints are filtered before: only tasks a node of the shape may
take at all are given here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Item:
    """One task to pack: what it asks for, its host ports, and its job's ``max_per_node``."""

    resources: dict[str, int]
    job: str = ""
    ports: tuple[int, ...] = ()
    max_per_node: int = 0


@dataclass
class Estimate:
    nodes: int  # nodes opened
    placed: list[int] = field(default_factory=list)  # indexes of the items placed, in the order taken
    unplaced: list[int] = field(default_factory=list)  # indexes of the items left out
    bins: list[list[int]] = field(default_factory=list)  # the items of each node opened


def size(item: Item, capacity: dict[str, int]) -> float:
    """The item's share of a node, summed over resources (the autoscaler's pod order)."""
    return sum(amount / capacity[r] for r, amount in item.resources.items() if capacity.get(r))


def fits_empty(item: Item, capacity: dict[str, int]) -> bool:
    return all(amount <= capacity.get(r, 0) for r, amount in item.resources.items() if amount > 0)


class _Bin:
    __slots__ = ("free", "ports", "jobs", "items")

    def __init__(self, capacity: dict[str, int]):
        self.free = dict(capacity)
        self.ports: set[int] = set()
        self.jobs: dict[str, int] = {}
        self.items: list[int] = []

    def takes(self, item: Item) -> bool:
        free = self.free
        for r, amount in item.resources.items():
            if amount > 0 and amount > free.get(r, 0):
                return False
        if item.ports and not self.ports.isdisjoint(item.ports):
            return False
        return not (item.max_per_node and self.jobs.get(item.job, 0) >= item.max_per_node)

    def put(self, index: int, item: Item) -> None:
        for r, amount in item.resources.items():
            self.free[r] = self.free.get(r, 0) - amount
        self.ports.update(item.ports)
        self.jobs[item.job] = self.jobs.get(item.job, 0) + 1
        self.items.append(index)


def estimate(items: Sequence[Item], capacity: dict[str, int], limit: int | None = None) -> Estimate:
    """First-fit decreasing of ``items`` on nodes of ``capacity``, at most ``limit`` nodes."""
    order = sorted(range(len(items)), key=lambda i: (-size(items[i], capacity), i))
    bins: list[_Bin] = []
    out = Estimate(0)
    # Bins only fill up, so a bin that refused an item refuses every later item identical
    # to it: each kind of item starts its search where the last one of its kind went.
    start: dict[tuple, int] = {}
    for i in order:
        item = items[i]
        if not fits_empty(item, capacity):
            out.unplaced.append(i)
            continue
        kind = (tuple(sorted(item.resources.items())), item.job if item.max_per_node else "", item.ports,
                item.max_per_node)
        first = start.get(kind, 0)
        found = next((j for j in range(first, len(bins)) if bins[j].takes(item)), None)
        if found is None:
            if limit is not None and len(bins) >= limit:
                out.unplaced.append(i)
                start[kind] = len(bins)
                continue
            bins.append(_Bin(capacity))
            found = len(bins) - 1
        bins[found].put(i, item)
        start[kind] = found
        out.placed.append(i)
    out.nodes = len(bins)
    out.bins = [b.items for b in bins]
    out.unplaced.sort()
    return out

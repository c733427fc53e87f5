"""The tree a batch of identical tasks is placed through: SwarmKit's tree of heaps.

Each placement preference (``spread: node.labels.dc``, then ``node.labels.row``, ...) is
one level of the tree, and a node's values for them are its path. A node without the
label has the value "" and so sits in a group of its own, which gets its equal share,
as SwarmKit specifies. A leaf is a heap of nodes that fit, best first (the ranking's
key); a branch is a heap of its children ordered by

    (only penalised nodes left below, tasks of the job below, random)

so a task goes, level by level, to the group with the fewest tasks of the job: counts
level out, then stay within one of each other at every level while the groups have
room. A group without room leaves its parent's heap and the others share what remains.
The penalty comes first because the ranking puts faulty nodes last; a group holding
only those gets tasks only when no other group can take them.

Every heap is kept *settled*: the node on top of a leaf can take the task (``settle``
pops the ones that cannot), so a non-empty leaf has room and its top tells whether only
penalised nodes are left. Only nodes that reach the top of a heap are ever checked.

Building is O(n) (``heapify``); placing one task re-keys one node and one child per level,
O(depth * log n). SwarmKit also caps each heap at the batch size, since it pushes nodes
one at a time; with a linear heapify and fit checked only on top, the cap would add work.
"""

from __future__ import annotations

from heapq import heapify, heappop, heapreplace
from typing import Callable, Mapping

from scheduler.model import Node

# Leaf entries are (key, random, index, node): key from the ranking, random breaks ties
# (the batch form of kube's selectHost), index keeps nodes themselves from being compared.
Pick = Callable[[list], "Node | None"]
Settle = Callable[[list], None]
Penalised = Callable[[Node], bool] | None


class Leaf:
    __slots__ = ("heap",)

    def __init__(self, heap: list):
        self.heap = heap


class Branch:
    """Children as (penalty, tasks of the job below, random, index, child)."""

    __slots__ = ("heap",)

    def __init__(self, heap: list):
        self.heap = heap


def build(leaves: Mapping[tuple, list], counts: Mapping[tuple, int], penalised: Penalised,
          random: Callable[[], float], settle: Settle) -> Leaf | Branch | None:
    """The tree over ``leaves`` (path -> leaf entries), or None if no node has room.
    ``counts`` maps every path prefix to the tasks of the job below it."""
    if () in leaves:  # no preferences: one heap
        return _leaf(leaves[()], settle)
    root: dict = {}
    for path, entries in leaves.items():
        level = root
        for value in path[:-1]:
            level = level.setdefault(value, {})
        level[path[-1]] = entries
    return _branch((), root, counts, penalised, random, settle)


def _leaf(entries: list, settle: Settle) -> Leaf | None:
    heapify(entries)
    settle(entries)
    return Leaf(entries) if entries else None


def _branch(prefix, level: dict, counts, penalised, random, settle) -> Branch | None:
    children = []
    for index, (value, sub) in enumerate(level.items()):
        path = prefix + (value,)
        child = _leaf(sub, settle) if isinstance(sub, list) else _branch(path, sub, counts, penalised, random, settle)
        if child is not None:
            children.append((penalty(child, penalised), counts.get(path, 0), random(), index, child))
    heapify(children)
    return Branch(children) if children else None


def penalty(group: Leaf | Branch, penalised: Penalised) -> bool:
    """True when every node left below ``group`` is penalised (faulty for this job)."""
    if penalised is None or not group.heap:
        return False
    if type(group) is Leaf:
        return penalised(group.heap[0][3])  # penalised nodes sort last, so the best one decides
    return group.heap[0][0]


def take(group: Leaf | Branch, pick: Pick, penalised: Penalised) -> Node | None:
    """Place one task below ``group``; the node, or None when no node below has room.

    ``pick`` places the task on the top node of a settled leaf heap, re-keys that node and
    settles the heap again."""
    if type(group) is Leaf:
        return pick(group.heap)
    heap = group.heap
    while heap:
        _, tasks, rank, index, child = heap[0]
        node = take(child, pick, penalised)
        if node is None or not child.heap:
            heappop(heap)  # no room left below this child
        else:
            heapreplace(heap, (penalty(child, penalised), tasks + 1, rank, index, child))
        if node is not None:
            return node
    return None

"""Binpack's working set: which empty nodes a claim's bin-packed tasks may open.

Binpack fills the nodes in use before it opens another (``BinPack`` in
:mod:`scheduler.engine.scoring` ranks them first). Opening nodes one at a time, as each
task needs one, is first-fit: the first nodes opened fill up in one resource with the first tasks placed
(memory-heavy ones, say) and strand the rest of their room, which the tasks that follow
(cpu-heavy ones) could have used. So a claim opens at once the empty nodes its bin-packed
tasks need by volume: what they ask for beyond the free room of the nodes in use, covered
by the fewest empty nodes, largest first. Within those and the nodes in use, each task
goes where its request matches the free room best (``BinPack``), so the tasks of the
claim mix on every node; a node outside is opened only when none inside fits.

Volume is a lower bound (fragmentation can keep tasks from using all of it), so the set
is never larger than the claim needs; what does not fit in it opens nodes one at a time,
as before. Only a hint to the ranking: which node takes a task is still decided by
:func:`scheduler.engine.fit.misfit` and the commit.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from scheduler.engine.node_table import NodeTable


def opening(table: NodeTable, demand: Mapping[str, int]) -> frozenset[str]:
    """Names of the empty usable nodes of ``table`` to open for ``demand`` (per resource,
    what the claim's bin-packed tasks ask for in all): none when the free room of the nodes
    in use holds it, else the largest empty nodes, in table order among equals, until their
    capacity covers the rest in every resource (all of them if they cannot)."""
    wanted = {resource: amount for resource, amount in demand.items() if amount > 0}
    if not wanted or not len(table.nodes):
        return frozenset()
    in_use = table.usable & (table.tasks > 0)
    empty = np.flatnonzero(table.usable & (table.tasks == 0))
    short: dict[str, int] = {}
    for resource, amount in wanted.items():
        if resource not in table.capacity:
            continue  # no node has it: no node opened would help
        free = np.clip(table.capacity[resource] - table.allocated[resource], 0, None)[in_use].sum()
        if amount > free:
            short[resource] = amount - int(free)
    if not short or not empty.size:
        return frozenset()
    size = np.zeros(empty.size)
    for resource in short:
        capacity = table.capacity[resource][empty].astype(np.float64)
        mean = capacity.mean()
        if mean > 0:
            size += capacity / mean
    order = empty[np.argsort(-size, kind="stable")]
    covered = np.ones(order.size, dtype=bool)
    for resource, amount in short.items():
        covered &= np.cumsum(table.capacity[resource][order]) >= amount
    enough = int(np.argmax(covered)) + 1 if covered.any() else order.size
    return frozenset(table.nodes[row].name for row in order[:enough].tolist())


def demand(specs_and_counts) -> dict[str, int]:
    """What ``(spec, tasks)`` pairs of bin-packed jobs ask for in all, per resource."""
    total: dict[str, int] = {}
    for spec, count in specs_and_counts:
        for resource, amount in spec.resources.items():
            if amount > 0:
                total[resource] = total.get(resource, 0) + amount * count
    return total

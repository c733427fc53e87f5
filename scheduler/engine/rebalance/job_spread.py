"""Each service's tasks spread evenly again over the nodes it may run on, after nodes
joined or left: the spread the engine gives a job's tasks as it places them (the fewest of
the job first; with ``preferences``, the attribute value holding the fewest first,
SwarmKit's placement preferences), restored by moves.

A Balance step per job: take a task from the node holding the most (in the value holding
the most, level by level), place it again with the engine, and keep the move while it
lowers the job's imbalance: the sum of squared task counts at each preference level, then
per node, compared in that order. That sum falls exactly when the task goes where there
are at least two fewer than where it leaves, so the job ends with a skew (most tasks on
one node less the fewest, over the nodes it may run on that have room) of at most 1.
"""

from __future__ import annotations

import heapq
from collections import Counter

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.model import BINPACK, JobSpec, Node

NAME = "job-spread"


def skew(counts: dict[str, int], nodes: list[Node] | set[str]) -> int:
    """Most tasks on one of ``nodes`` (or node names) less the fewest: read from the
    job's counts alone (the nodes it is not on hold none)."""
    names = nodes if isinstance(nodes, (set, frozenset)) else {node.name for node in nodes}
    values = [n for name, n in counts.items() if n > 0 and name in names]
    if not values:
        return 0
    return max(values) - (min(values) if len(values) == len(names) else 0)


def balance(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    for job, movable in sorted(mover.jobs().items()):
        if mover.full:
            return
        spec = cluster.specs[job]
        if spec.strategy == BINPACK or spec.per_node or any(p.targets for p in spec.preferences):
            continue  # packed on purpose, or shared out by percentages: not evenly
        names = eligible.names(spec)
        if len(names) < 2:
            continue
        if spec.preferences:
            _balance_levels(mover, spec, eligible.nodes(spec), movable)
        elif skew(cluster.counts.get(job, {}), names) > 1:
            _balance(mover, spec, names, movable)


def _balance(mover: Mover, spec: JobSpec, names: set[str], movable) -> None:
    """A job without preferences: the node holding the most gives a task while the engine
    finds a node holding at least two fewer. The nodes are kept in a heap by count, and
    how many hold each count, so that a move costs O(log nodes), not a pass over them."""
    counts = mover.cluster.counts.setdefault(spec.id, {})  # kept current by the trials and moves
    on: dict[str, list] = {}
    for resident in sorted(movable, key=lambda r: r.id, reverse=True):
        if resident.node in names:
            on.setdefault(resident.node, []).append(resident)
    held = Counter(counts.get(name, 0) for name in names)  # count -> nodes holding that many
    heap = [(-counts.get(name, 0), name) for name in on]
    heapq.heapify(heap)

    def spread() -> int:
        return max(held) - min(held)

    def shift(name: str, by: int) -> None:
        if name in names:
            n = counts.get(name, 0)
            held[n - by] -= 1
            if not held[n - by]:
                del held[n - by]
            held[n] += 1

    while not mover.full and heap:
        before = spread()
        if before <= 1:
            return
        negative, source = heapq.heappop(heap)
        if source not in on or -negative != counts.get(source, 0):
            continue  # an entry from before this node's count changed
        resident = on[source].pop()
        if not on[source]:
            del on[source]
        was = counts.get(source, 0)
        trial = mover.trial(resident)
        if trial is None:
            return
        there = counts.get(trial.target, 0)  # with the trial's task
        if trial.target not in names or there >= was:
            mover.undo(trial)
            return
        move = mover.keep(trial, NAME, "tasks of the job on its node", was, there, "")
        shift(trial.target, 1)
        shift(source, -1)
        if source in on:
            heapq.heappush(heap, (-counts.get(source, 0), source))
        move.reason = (f"job {spec.id} has {was} tasks on {source} and {there - 1} on {trial.target}: its skew "
                       f"over {len(names)} nodes goes from {before} to {spread()}")


def _balance_levels(mover: Mover, spec: JobSpec, nodes: list[Node], movable) -> None:
    """A job with preferences: balanced by each attribute in turn, then by node."""
    cluster = mover.cluster
    paths = {node.name: tuple(p.get(node) for p in spec.preferences) for node in nodes}
    depth = len(spec.preferences)
    counts = cluster.counts.setdefault(spec.id, {})  # kept current by the trials and moves
    while not mover.full:
        levels: list[dict[str, int]] = [{} for _ in range(depth)]
        for name, path in paths.items():
            for level, value in enumerate(path):
                levels[level][value] = levels[level].get(value, 0) + counts.get(name, 0)

        def load(name: str) -> tuple:
            return (*(levels[level][paths[name][level]] for level in range(depth)), counts.get(name, 0))

        pending = [r for r in movable if r.node in paths and mover.movable(r)]
        if not pending:
            return
        resident = min(pending, key=lambda r: (tuple(-n for n in load(r.node)), r.id))
        source, was = resident.node, load(resident.node)
        skew_before = skew(counts, nodes)
        trial = mover.trial(resident)
        if trial is None:
            return
        target = trial.target
        if target not in paths:
            mover.undo(trial)
            return
        there = tuple(n + 1 for n in load(target)[:depth]) + (counts.get(target, 0),)  # with the trial's task
        better = False
        for level in range(depth + 1):
            if level < depth and paths[source][level] == paths[target][level]:
                continue  # the same value at this level: its count does not change
            if there[level] != was[level]:
                better = there[level] < was[level]
                break
        if not better:
            mover.undo(trial)
            return
        move = mover.keep(trial, NAME, "tasks of the job on its node", was[-1], there[-1], "")
        where = "".join(f"; {p.spread} {paths[source][i]} holds {was[i]}, {paths[target][i]} {there[i] - 1}"
                        for i, p in enumerate(spec.preferences) if paths[source][i] != paths[target][i])
        move.reason = (f"job {spec.id} has {was[-1]} tasks on {source} and {there[-1] - 1} on {target}{where}: "
                       f"its skew over {len(nodes)} nodes goes from {skew_before} to {skew(counts, nodes)}")

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

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.model import BINPACK, JobSpec, Node

NAME = "job-spread"


def skew(counts: dict[str, int], nodes: list[Node]) -> int:
    """Most tasks on one of ``nodes`` less the fewest."""
    values = [counts.get(node.name, 0) for node in nodes]
    return max(values) - min(values) if values else 0


def balance(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    for job, movable in sorted(mover.jobs().items()):
        if mover.full:
            return
        spec = cluster.specs[job]
        if spec.strategy == BINPACK or spec.per_node or any(p.targets for p in spec.preferences):
            continue  # packed on purpose, or shared out by percentages: not evenly
        nodes = eligible.nodes(spec)
        if len(nodes) > 1:
            _balance(mover, spec, nodes, movable)


def _balance(mover: Mover, spec: JobSpec, nodes: list[Node], movable) -> None:
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

        pending = [r for r in movable if mover.movable(r) and r.node in paths]
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

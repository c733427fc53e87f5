"""More tasks of one job on a node than its share: kube's RemoveDuplicates. A job's share
per node is its tasks over the nodes it may run on, rounded up (the descheduler's upper
average); a node above it gives tasks to nodes below it, as the engine chooses (a
binpack job is left packed). A Balance step: the job's tasks are looked at together."""

from __future__ import annotations

import math

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.model import BINPACK

NAME = "duplicates"


def balance(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    for job, movable in sorted(mover.jobs().items()):
        if mover.full:
            return
        spec = cluster.specs[job]
        if spec.strategy == BINPACK:
            continue  # packed on purpose
        nodes = eligible.nodes(spec)
        if len(nodes) < 2:
            continue
        counts = cluster.counts.get(job, {})  # kept current by the trials and moves
        total = sum(counts.values())
        share = math.ceil(total / len(nodes))
        if max(counts.values(), default=0) <= share:
            continue
        on: dict[str, list] = {}
        for resident in sorted(movable, key=lambda r: r.id):
            on.setdefault(resident.node, []).append(resident)
        for source in sorted(counts, key=lambda n: (-counts[n], n)):
            for resident in on.get(source, ()):
                before = counts.get(source, 0)
                if before <= share or mover.full:
                    break
                trial = mover.trial(resident)
                if trial is None:
                    break
                there = counts.get(trial.target, 0)  # with the trial's task
                if there > share:
                    mover.undo(trial)
                    break
                mover.keep(trial, NAME, "tasks of the job on its node", before, there,
                           f"{source} holds {before} tasks of job {job}, more than its share of {share} "
                           f"({total} tasks over {len(nodes)} nodes); {trial.target} holds "
                           f"{there - 1}")

"""Tasks on nodes that have since been given a ``NoSchedule`` taint their job does not
tolerate: kube's RemovePodsViolatingNodeTaints. (A ``NoExecute`` taint evicts on its own:
``scheduler/control/evictions.py``.) A Deschedule step: each task alone, moved only where
the engine finds a node that takes it."""

from __future__ import annotations

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.model.taints import NO_SCHEDULE, tolerance_s

NAME = "node-taints"


def deschedule(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    for resident in sorted(mover.candidates(list(cluster.tasks.values())), key=lambda r: r.id):
        if mover.full:
            return
        node = cluster.nodes[resident.node]
        if not node.taints:
            continue
        tolerations = mover.spec(resident).tolerations
        refused = [t for t in node.taints if t.effect == NO_SCHEDULE and tolerance_s(t, tolerations) is None]
        if not refused:
            continue
        trial = mover.trial(resident)
        if trial is None:
            continue
        mover.keep(trial, NAME, "untolerated taints", len(refused), 0,
                   f"{resident.node} has taint {refused[0]}, which job {resident.job} does not tolerate; "
                   f"{trial.target} has none it does not")

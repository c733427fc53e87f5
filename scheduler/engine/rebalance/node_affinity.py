"""Tasks on nodes that no longer meet their job's constraints (a label changed, a plugin
went away since they were placed): kube's RemovePodsViolatingNodeAffinity, for the hard
rules (constraints, platform, plugins). A Deschedule step: each task is looked at alone,
and moved only where the engine finds a node that meets them and has room."""

from __future__ import annotations

from scheduler.engine.filters import filter_pipeline
from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover

NAME = "node-affinity"


def deschedule(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    checks: dict[tuple, object] = {}
    for resident in sorted(mover.candidates(list(cluster.tasks.values())), key=lambda r: r.id):
        if mover.full:
            return
        spec = mover.spec(resident)
        key = (tuple(c.text for c in spec.constraints), spec.plugins)
        check = checks.get(key)
        if check is None:
            check = checks[key] = filter_pipeline(spec, taints=False).static_check
        why = check(cluster.nodes[resident.node])
        if why is None:
            continue
        trial = mover.trial(resident)
        if trial is None:
            continue  # nowhere better to go: it stays (kube's nodeFit)
        mover.keep(trial, NAME, "unmet constraints", 1, 0,
                   f"{resident.node} no longer meets job {resident.job}'s constraints ({why}); {trial.target} does")

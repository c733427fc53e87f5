"""How many voluntary disruptions each job's budget allows now, for the scale-down: a
node goes only if moving its tasks spends no job beyond its allowance (the
cluster-autoscaler checks PodDisruptionBudgets the same way).

Counted from the cluster as read (kube's arithmetic, ``scheduler/engine/budgets.py``:
expected tasks, those counted healthy), and no more than the budget's own record allows
(``control/budgets.py`` ``allowances``: what the workers' count says, less disruptions
granted and not yet over, such as a drain in progress)."""

from __future__ import annotations

from scheduler.control import budgets
from scheduler.control.cluster_read import Copy
from scheduler.engine.budgets import disruptions_allowed
from scheduler.model.states import LIVE_STATES


def allowance_of(read: Copy, store=None) -> dict[str, int]:
    """job -> disruptions its budget allows now; jobs without a budget are left out."""
    out: dict[str, int] = {}
    if not any(spec.disruption_budget is not None for spec in read.cluster.specs.values()):
        return out
    by_job: dict[str, list] = {}
    for task in read.tasks.values():
        by_job.setdefault(task.job, []).append(task)
    for job, spec in read.cluster.specs.items():
        if spec.disruption_budget is None:
            continue
        tasks = by_job.get(job, [])
        live = [t for t in tasks if t.state in LIVE_STATES]
        healthy = sum(1 for t in live if budgets.counted_healthy(t.state, t.health, spec.health is not None))
        out[job] = disruptions_allowed(spec.disruption_budget, budgets.expected_of(spec, len(live)), healthy)
    if store is not None and out:
        for job, allowed in budgets.allowances(store, sorted(out)).items():
            out[job] = min(out[job], allowed)
    return out

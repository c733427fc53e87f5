"""How many voluntary disruptions each job's budget allows now, for the scale-down: a
node goes only if moving its tasks spends no job beyond its allowance (the
cluster-autoscaler checks PodDisruptionBudgets the same way).

Counted from the cluster as read (kube's arithmetic, ``scheduler/engine/budgets.py``:
expected tasks, those counted healthy), less the disruptions the budget's gate has
granted whose tasks the copy still sees live (a drain under way: kube's DisruptedPods)."""

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
    if store is not None and out:  # evictions granted (a drain under way) whose tasks the copy still sees live
        for job, disrupted in store.budget_disrupted_many(sorted(out)).items():
            going = sum(1 for task_id in disrupted if (t := read.tasks.get(task_id)) is not None and t.state in LIVE_STATES)
            out[job] = max(0, out[job] - going)
    return out

"""Disruption budgets: how many of a job's tasks voluntary disruptions may take down now."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control import budgets
from scheduler.model.errors import NotFound
from scheduler.model.names import check_job_id


class BudgetClient(ClientBase):
    """Read jobs' disruption budgets as last counted."""

    def budget(self, job_id: str) -> dict | None:
        """The job's budget (:func:`scheduler.control.budgets.status`): ``{job, budget,
        expected, healthy, desired_healthy, allowed, unavailable, max_unavailable,
        disrupted, evictions, counted_at}``, or None when the job has no budget."""
        check_job_id(job_id)
        return budgets.status(self.store, job_id)

    def budgets(self) -> list[dict]:
        """Every job with a budget, by job id."""
        out = []
        for job_id in sorted(self.store.budgeted_jobs()):
            try:
                record = budgets.status(self.store, job_id)
            except NotFound:  # removed since it was listed
                continue
            if record is not None:
                out.append(record)
        return out

    def evict(self, task_id: str, reason: str = "evicted", *, replace: bool = True) -> dict:
        """Evict one task as its job's budget allows (kube's eviction API): ``{task, job,
        evicted, verdict, replacement, waiting}``; ``verdict`` says why not (``refused``:
        the budget allows no more now)."""
        done = budgets.evict_task(self.store, task_id, reason, replace=replace)
        if done.evicted:
            self._record("evict", job=done.job, task=task_id, reason=reason)
        return {"task": done.task, "job": done.job, "evicted": done.evicted, "verdict": done.verdict,
                "replacement": done.replacement, "waiting": done.waiting}

"""``deadline``: a batch or sysbatch job still running that many seconds after it started
(its submit, or its release by its dependencies) is stopped and fails with "deadline
exceeded" (kube's activeDeadlineSeconds). Each job's deadline is an entry of
``jobs:deadlines``; the workers' upkeep ends the due ones (:func:`expire`)."""

from __future__ import annotations

from scheduler.control.failing import fail_job
from scheduler.control.outcomes import RUNNING, Outcomes
from scheduler.model import JobSpec
from scheduler.state.store import Store

REASON = "deadline exceeded"


def start(store: Store, job_id: str, spec: JobSpec) -> None:
    """The job starts running now: its deadline counts from here (none without one)."""
    if spec.deadline:
        store.set_deadline(job_id, store.now_ms() + int(spec.deadline * 1000))


def expire(store: Store, outcomes: Outcomes, limit: int = 100) -> list[str]:
    """End the jobs whose deadline passed and that still run; returns them."""
    failed = []
    for job_id in store.due_deadlines(store.now_ms(), limit):
        if outcomes.of(store, job_id) == RUNNING:
            fail_job(store, job_id, f"{REASON}: job {job_id} ran past its deadline")
            failed.append(job_id)
        store.clear_deadline(job_id)
    return failed

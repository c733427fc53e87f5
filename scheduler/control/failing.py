"""Ending a job as failed, with the reason: its deadline passed, or a dependency it waited
for can never hold. The job's status then reads ``failed`` (its hash's ``failure``), it is
stopped, and its open tasks end as failed with the reason as their message."""

from __future__ import annotations

from scheduler.model import FAILED
from scheduler.state.store import Store


def fail_job(store: Store, job_id: str, reason: str) -> list[str]:
    """End ``job_id`` as failed (see the module); returns the tasks it ended. Each step may
    be sent again: the upkeep that calls it converges if it dies part way."""
    store.set_failure(job_id, reason)
    store.stop_job(job_id)
    ids = [t.id for t in store.tasks(store.job_task_ids(job_id)) if not t.terminal]
    store.finish_ids(ids, FAILED, reason)
    return ids

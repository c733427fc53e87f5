"""GC: removing now the ended work that retention would remove."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control import retention


class GcClient(ClientBase):
    """Collect ended work."""

    def gc(self, dry_run: bool = False) -> dict:
        """Remove now the ended work that retention would remove (``sched gc``): ended
        tasks of running jobs past ``task_retention`` or beyond ``ended_tasks_per_job``,
        and finished jobs past their retention. Returns what it removed (``dry_run``:
        what it would remove of the work counted so far, removing nothing)."""
        done = retention.collect(self.store, dry_run=dry_run)
        record = {"namespace": self.namespace, **done.as_dict()}
        if not dry_run and done.anything:
            self._record("gc", jobs=len(done.jobs_removed), tasks=done.tasks_removed + done.job_tasks_removed)
        return record

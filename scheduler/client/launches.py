"""Launches: a periodic job's forced launch, suspension and resumption, and a
parameterized job's dispatch."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control import periodic, schedule
from scheduler.control.dispatch import dispatch as dispatch_job
from scheduler.control.outcomes import Outcomes


class LaunchClient(ClientBase):
    """Launch, suspend and resume periodic jobs; dispatch parameterized ones."""

    def launch(self, job_id: str) -> dict:
        """Launch a periodic job now, outside its schedule (``sched job launch``; Nomad's
        ``periodic force``): ``{id, launched}`` (the child job's id)."""
        result = periodic.force(self.store, Outcomes(), job_id, self.by)
        return result

    def suspend(self, job_id: str) -> dict:
        """Launch no tick of a periodic job until :meth:`resume`: ``{id, suspended, changed,
        next_launch}`` (``changed`` False when it was suspended already)."""
        result = periodic.suspend(self.store, job_id, True)
        if result["changed"]:  # suspending a suspended job records nothing
            self._record("suspend", job=job_id)
        return {**result, "next_launch": schedule.iso(result["next_launch"])}

    def resume(self, job_id: str) -> dict:
        """Launch a suspended periodic job's ticks again, from the next one on."""
        result = periodic.suspend(self.store, job_id, False)
        if result["changed"]:
            self._record("resume", job=job_id)
        return {**result, "next_launch": schedule.iso(result["next_launch"])}

    def dispatch(self, job_id: str, meta: dict | None = None, payload: bytes | str | None = None,
                 idempotency_token: str | None = None) -> dict:
        """Launch a parameterized job with its input (``sched job dispatch``): ``{id,
        dispatched, created}``, ``dispatched`` the child job's id; with a token the job has
        seen, the child that dispatch made (``created`` False)."""
        data = payload.encode() if isinstance(payload, str) else payload
        return dispatch_job(self.store, job_id, meta or {}, data, idempotency_token, self.by)

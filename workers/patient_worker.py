"""An RQ worker that waits out a Redis outage instead of quitting.

RQ's worker loop quits on any error it does not handle, and a Redis that does not answer
is one at several steps around a job: the heartbeat it renews while its work horse runs,
what it asks Redis once the horse has ended, its state, a stop request. Quitting there
prints RQ's chained tracebacks and leaves the horse running with no process watching it
(a horse leads a process group of its own). This worker, RQ's own otherwise:

- while its horse runs, an outage is one line in its log; it goes on watching the horse,
  looking every ``AWAY_WATCH_S`` and trying its heartbeat again after each look, and
  writes the heartbeat as soon as Redis answers (one line more);
- once its horse has ended it waits for Redis before it goes on (its state, then its next
  job, are in Redis; it has nothing else to do); a stop request meanwhile ends the wait;
- a heartbeat, RQ's upkeep or a stop request it cannot write is left for the next one;
- its horse, once the task has run (its end is in the node's journal already, and the
  agent delivers it from there), waits for Redis before RQ records the job's end, so
  that the horse ends as RQ expects, while its worker and its agent are there: without
  them, nobody would stop a horse waiting for a Redis gone for good.

A refused password or permission is no outage (``failover.lasting``): it is raised as before.
"""

from __future__ import annotations

import os
import time

import redis
from rq.worker import Worker

from scheduler.state.failover import lasting

REDIS_AWAY = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)  # a restart's LOADING too
AWAY_WATCH_S = 1  # while Redis is away: how often the horse is looked at (whole seconds: RQ's alarm)


def _outage(error: BaseException) -> bool:
    return isinstance(error, REDIS_AWAY) and not lasting(error)


class PatientWorker(Worker):
    """RQ's forking worker, which waits out Redis (see the module). ``agent_pid``: the
    process whose death makes its horse stop waiting (the node's agent)."""

    def __init__(self, *args, agent_pid: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_pid = agent_pid
        self.watch_s = self.job_monitoring_interval  # how often a horse is looked at while Redis answers
        self._away_since: float | None = None  # when Redis stopped answering (monotonic), None while it answers

    # ----------------------------------------------------------------- saying so, once
    def _away(self, error: BaseException, doing: str) -> None:
        if self._away_since is None:
            self._away_since = time.monotonic()
            self.log.warning("Worker %s: Redis does not answer (%s); %s until it does", self.name,
                             str(error).rstrip("."), doing)

    def _back(self, done: str) -> None:
        if self._away_since is not None:
            self.log.warning("Worker %s: Redis answers again after %.1f s; %s", self.name,
                             time.monotonic() - self._away_since, done)
            self._away_since = None

    def _when_redis_answers(self, call, doing: str, done: str):
        """``call()``, again every ``AWAY_WATCH_S`` while Redis is away; a stop request
        meanwhile ends the wait (RQ's loop then stops at its next look)."""
        while True:
            try:
                result = call()
            except REDIS_AWAY as error:
                if not _outage(error):
                    raise
                self._away(error, doing)
                if self._stop_requested:
                    return None
                time.sleep(AWAY_WATCH_S)
                continue
            self._back(done)
            return result

    # ----------------------------------------------------------------- while the horse runs
    def maintain_heartbeats(self, job, execution):
        self.job_monitoring_interval = self.watch_s  # the heartbeat's TTL follows the usual watch
        try:
            super().maintain_heartbeats(job, execution)
        except REDIS_AWAY as error:
            if not _outage(error):
                raise
            self._away(error, f"watching the work horse of job {job.id}, its heartbeat written")
            self.job_monitoring_interval = AWAY_WATCH_S  # look again soon, and try the heartbeat again
            return
        self._back(f"heartbeat written; watching the work horse of job {job.id} on")

    def monitor_work_horse(self, job, queue, execution):
        try:
            super().monitor_work_horse(job, queue, execution)
        except REDIS_AWAY as error:
            if self.horse_pid or not _outage(error):
                raise
            # The horse has ended and left its job unrecorded (RQ asked Redis how): RQ's
            # registry upkeep fails the job once its heartbeat lapses; the task's end is in
            # the node's journal.
            self._away(error, f"the work horse of job {job.id} ended; waiting")
        finally:
            self.job_monitoring_interval = self.watch_s

    # ----------------------------------------------------------------- RQ's own writes
    def set_state(self, state, pipeline=None):
        if pipeline is not None or self.is_horse:
            return super().set_state(state, pipeline=pipeline)
        return self._when_redis_answers(lambda: super(PatientWorker, self).set_state(state),
                                        f"its state {state} is written", "state written")

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:
            return super().heartbeat(timeout, pipeline=pipeline)
        try:
            super().heartbeat(timeout)
        except REDIS_AWAY as error:
            if not _outage(error):
                raise
            self._away(error, "its heartbeat waits")  # the next one writes it
            return
        self._back("heartbeat written")

    def check_for_suspension(self, burst):
        return self._when_redis_answers(lambda: super(PatientWorker, self).check_for_suspension(burst),
                                        "it waits", "working on")

    def run_maintenance_tasks(self):
        try:
            super().run_maintenance_tasks()
        except REDIS_AWAY as error:
            if not _outage(error):
                raise
            self._away(error, "RQ's upkeep waits")  # done at a later turn

    def set_shutdown_requested_date(self):
        try:
            super().set_shutdown_requested_date()
        except REDIS_AWAY as error:  # a signal handler's write: the stop itself is kept in memory
            if not _outage(error):
                raise
            self._away(error, "it stops after its current job, unrecorded")

    def teardown(self):
        try:
            super().teardown()
        except REDIS_AWAY as error:
            if not _outage(error):
                raise
            self.log.warning("Worker %s: stopped; Redis does not answer, so RQ's record of it expires by itself",
                             self.name)

    # ----------------------------------------------------------------- in the horse
    def handle_execution_ended(self, job, queue, heartbeat_ttl):
        """The horse, its job run: wait for Redis before RQ records the job's end."""
        if self.is_horse:
            self._horse_waits(job)
        super().handle_execution_ended(job, queue, heartbeat_ttl)

    def _horse_waits(self, job) -> None:
        worker = os.getppid()
        while True:
            try:
                self.connection.ping()
                self._back(f"recording the end of job {job.id}")
                return
            except REDIS_AWAY as error:
                if not _outage(error):
                    raise
                self._away(error, f"job {job.id} has run (its end is in the node's journal); its work horse "
                                  f"waits to record it")
            if os.getppid() != worker or (self.agent_pid is not None and not _running(self.agent_pid)):
                return  # nobody left to wait for it: RQ's record of the job fails as it will
            time.sleep(AWAY_WATCH_S)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

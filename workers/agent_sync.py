"""A node agent's sync: make what runs on this node match what Redis says should.

Level-triggered, like kubelet's sync loop and Nomad's client: every round compares the
desired state (this node's live tasks in Redis) with the actual state (the executions in
the node's journal, their process groups, RQ's record of their jobs) and acts until they
agree. Nothing rests on one message, one flag or one write having arrived: a round that
fails half way (Redis went away) is done again by the next.

For a task this node should run:

- **assigned, with no live RQ job** (never queued, or its job was lost, failed before the
  task began, or is held by a worker that is gone): queue it, again if need be (with a
  growing pause). The RQ job starts it only while it is still assigned here
  (``start.lua``), so queueing it twice never runs it twice.
- **started, its work horse running**: nothing, but for a run that was frozen for want of
  a heartbeat: it is resumed (SIGCONT) once the heartbeat is current again. This is also
  how an agent that restarted adopts what its predecessor started, frozen or not.
- **started, its horse gone**: stop what is left of it (its command's group), then
  deliver the end the journal has, or "interrupted" when the horse died without one
  (``lost`` for a command: its horse only ran it; ``failed`` for a function, which ran in
  it and may have been its death).
- **ended in the journal**: deliver the end to Redis (the run ended while Redis was away,
  or a failover lost the end).
- **running in Redis with no execution here** after a grace: its run was lost; it is
  recorded lost (or as RQ's record of the run says, when RQ has one).

For an execution whose task is no longer this node's (stopped, scaled down, lost while
the node was away and replaced): its process groups are stopped (a frozen one is never
resumed first), and it is forgotten only once they are confirmed gone (a job still queued
in RQ is cancelled).
"""

from __future__ import annotations

import logging
import time

import redis
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus

from scheduler.control import process_groups, reconcile
from scheduler.control.execution import rq_job_id, run_task
from scheduler.control.journal import Execution, Journal
from scheduler.model import ASSIGNED, COMPLETED, FAILED, LOST as LOST_STATE, JobSpec, Task
from scheduler.model.errors import SchedError
from scheduler.state.app import App
from workers import metrics

log = logging.getLogger("sched.agent")

ENQUEUE_GRACE_S = 2.0  # a job just queued may be between RQ's queue and its started registry
RQ_CHECK_S = 2.0  # how often RQ is asked about a job that was queued a while ago
REQUEUE_MAX_S = 10.0  # the longest pause between two tries at queueing one task
LOST_GRACE_S = 3.0  # a task running with nothing here: its horse may be between start.lua and the journal
WRAP_UP_S = 5.0  # a horse that recorded its end is left this long to deliver it and exit
KEEP_ENDS_S = 3600.0  # delivered ends kept, should a failover lose them from Redis
PRUNE_EVERY_S = 60.0
# RQ's own records of a task's run (its job hash, result, registries' entries), kept only
# as a fallback for a run the journal lost: the task's end is in Redis and the journal.
RQ_RESULT_TTL_S = 60  # a run that returned
RQ_FAILURE_TTL_S = 86_400  # a work horse that died or raised (rq info shows these)
RQ_QUEUED_TTL_S = 86_400  # a job never picked up (its node gone for good): discarded by RQ
INTERRUPTED = "its run was interrupted: its process ended without recording how"
LOST = "its run was lost: no process on its node runs it and no end of it was kept"


class NodeSync:
    def __init__(self, app: App, node: str, journal: Journal, rq_queue, live_workers, fresh_s: float = 2.0):
        self.app, self.store, self.node = app, app.store, node
        self.journal = journal  # the calling thread's connection
        self.fresh_s = fresh_s  # a heartbeat renewed this recently is current: frozen runs may resume
        self.rq_queue = rq_queue
        self.live_workers = live_workers  # () -> names of this agent's RQ workers now running
        self.specs: dict[tuple[str, int], JobSpec] = {}  # a version's spec never changes
        self.requeues: dict[str, int] = {}  # task -> times it was queued again
        self.checked: dict[str, float] = {}  # task -> when RQ was last asked about its job
        self.unaccounted: dict[str, float] = {}  # task -> first seen running with nothing here
        self.mine: set[str] = set()  # tasks this agent started, until they leave the node (metrics)
        self.last_prune = 0.0

    def __call__(self) -> None:
        """One round. Raises the first Redis error met, after doing what it could."""
        ids = self.store.node_task_ids(self.node)
        tasks = {t.id: t for t in self.store.tasks(ids) if t.live and t.node == self.node}
        executions = self.journal.executions(include=list(tasks))
        error = None
        for task in tasks.values():
            execution = executions.get(task.id)
            if execution is not None and execution.assigned != task.assigned_ms:
                # A run of another placement of this task id (a namespace cleared and used
                # again), or one that did not name its placement: it says nothing of this one.
                self.journal.forget(task.id)
                execution = None
            error = error or self._guarded(self._converge, task, execution)
        for task_id, execution in executions.items():
            if task_id not in tasks:
                error = error or self._guarded(self._retire, execution)
        for seen in (self.unaccounted, self.checked, self.requeues):
            for task_id in [t for t in seen if t not in tasks]:
                del seen[task_id]
        self._count_finished(set(tasks))
        if time.monotonic() - self.last_prune > PRUNE_EVERY_S:
            self.journal.prune(KEEP_ENDS_S)
            self.last_prune = time.monotonic()
        if error is not None:
            raise error

    @staticmethod
    def _guarded(step, *args) -> Exception | None:
        try:
            step(*args)
        except (redis.RedisError, SchedError) as exc:  # the next round tries again
            return exc
        return None

    # A task this node should run.
    def _converge(self, task: Task, execution: Execution | None) -> None:
        if execution is not None and execution.ended:
            wrapping_up = (process_groups.running(execution.horse)
                           and time.time() - execution.ended_at < WRAP_UP_S)
            if not wrapping_up:  # (its horse delivers it itself when it can)
                self._deliver(task, execution)
            return
        if execution is not None and execution.started:
            if process_groups.running(execution.horse):
                self._thaw(task, execution)
                return
            if self._stop(execution):
                return  # confirmed gone on a later round, then recorded
            in_process = execution.command is None and "func" in (self._spec(task).run or {})
            self.journal.ended(task.id, False, INTERRUPTED, lost=not in_process)
            self._deliver(task, self.journal.get(task.id))
            return
        if task.state == ASSIGNED:
            if execution is not None and self._queued(task.id, execution):
                return
            spec = self._spec(task)
            if spec.run is None:  # a reservation: it holds its room until stopped
                if self.store.start_task(task.id, self.node):
                    self._started(task.id)
                return
            self._enqueue(task, spec, execution)
        elif self._spec(task).run is not None:
            self._lost_run(task)

    def _thaw(self, task: Task, execution: Execution) -> None:
        """Resume a frozen run of a task that is still this node's, once the heartbeat is
        current (the watchdog and the fence freeze again whenever it is overdue). Frozen
        means marked so in the journal, or a leader paused by a signal: a run can be paused
        just after an agent cleared its mark (and whole machines are paused and resumed)."""
        groups = [g for g in (execution.horse, execution.command) if g is not None]
        if not execution.frozen and not any(process_groups.stopped(g) for g in groups):
            return
        since, _ttl = self.journal.since_beat()
        if since is None or since > self.fresh_s:
            return
        for group in groups:
            process_groups.thaw_group(group)
        frozen_s = self.journal.thawed(task.id)
        log.info("agent %s: task %s resumed%s: its node still runs it", self.node, task.id,
                 f" after {frozen_s:.1f} s frozen" if frozen_s is not None else "",
                 extra={"fields": {"node": self.node, "task": task.id}})

    def _queued(self, task_id: str, execution: Execution) -> bool:
        """Whether the task's RQ job is still on its way to a work horse."""
        if execution.queued_at is not None and time.time() - execution.queued_at < ENQUEUE_GRACE_S:
            return True
        if time.monotonic() - self.checked.get(task_id, 0.0) < RQ_CHECK_S:
            return True
        self.checked[task_id] = time.monotonic()
        return self._rq_job_live(rq_job_id(self.app.keys.namespace, task_id))

    def _rq_job_live(self, job_id: str) -> bool:
        try:
            job = Job.fetch(job_id, connection=self.rq_queue.connection)
        except NoSuchJobError:
            return False
        status = job.get_status(refresh=False)
        if status == JobStatus.QUEUED:
            return self.rq_queue.get_job_position(job_id) is not None
        if status == JobStatus.STARTED:
            return job.worker_name in self.live_workers()
        return status in (JobStatus.DEFERRED, JobStatus.SCHEDULED, JobStatus.CREATED)

    def _enqueue(self, task: Task, spec: JobSpec, execution: Execution | None) -> None:
        again = execution is not None and execution.queued_at is not None
        if again:
            tries = self.requeues.get(task.id, 0)
            if time.time() - execution.queued_at < min(REQUEUE_MAX_S, 0.5 * 2 ** tries):
                return
            self.requeues[task.id] = tries + 1
            log.warning("agent %s: task %s is assigned here but its RQ job is gone or ended before it began; "
                        "queueing it again", self.node, task.id, extra={"fields": {"node": self.node,
                                                                                     "task": task.id}})
        keys = self.app.keys
        job_id = rq_job_id(keys.namespace, task.id)
        self.journal.queued(task.id, job_id, task.assigned_ms)
        try:
            Job.fetch(job_id, connection=self.rq_queue.connection).delete()  # what is left of an earlier try
        except NoSuchJobError:
            pass
        # A command's timeout is kept by its work horse, which does not count the time it
        # was frozen (RQ's would); a function's is RQ's (frozen time counts).
        timeout = int(spec.run["timeout"]) + 30 if spec.run.get("timeout") and "func" in spec.run else -1
        # Both URLs: the scheduling state's (any topology) and RQ's own execution Redis.
        self.rq_queue.enqueue_call(run_task, args=(self.app.url, keys.namespace, self.node, task.id),
                                   kwargs={"rq_url": self.app.rq_url, "journal": str(self.journal.path)},
                                   job_id=job_id, timeout=timeout, ttl=RQ_QUEUED_TTL_S,
                                   result_ttl=RQ_RESULT_TTL_S, failure_ttl=RQ_FAILURE_TTL_S,
                                   description=f"task {task.id}")
        if not again:
            self._started(task.id)

    def _lost_run(self, task: Task) -> None:
        """The task runs in Redis's eyes, but nothing here runs it or kept its end."""
        job_id = rq_job_id(self.app.keys.namespace, task.id)
        first = self.unaccounted.setdefault(task.id, time.monotonic())
        if time.monotonic() - first < LOST_GRACE_S:
            return
        try:
            job = Job.fetch(job_id, connection=self.rq_queue.connection)
        except NoSuchJobError:
            job = None
        if job is not None and job.get_status(refresh=False) == JobStatus.STARTED \
                and job.worker_name in self.live_workers():
            return  # a horse is on it (it records itself in the journal as it starts)
        result = job.return_value() if job is not None and job.is_finished else None
        if isinstance(result, dict) and result.get("ran"):  # a run kept by RQ alone
            ended = reconcile.task_ended(self.store, task, bool(result.get("succeeded")), result.get("message", ""),
                                         lost=bool(result.get("lost")))
        else:
            ended = reconcile.task_ended(self.store, task, False, LOST, lost=True)
        self.unaccounted.pop(task.id, None)
        log.warning("agent %s: task %s was running with no process here and no end kept; recorded %s",
                    self.node, task.id, ended["state"], extra={"fields": {"node": self.node, "task": task.id}})

    # An execution whose task is no longer this node's.
    def _retire(self, execution: Execution) -> None:
        if execution.started:
            if (execution.ended and process_groups.running(execution.horse)
                    and time.time() - execution.ended_at < WRAP_UP_S):
                return  # it is finishing on its own
            if self._stop(execution):
                return  # confirmed gone on a later round
        elif execution.rq_job:
            self._cancel(execution.rq_job)
        if execution.ended and not execution.delivered:
            self._deliver(None, execution)
        elif not execution.ended:
            self.journal.forget(execution.task)

    def _cancel(self, job_id: str) -> None:
        try:
            job = Job.fetch(job_id, connection=self.rq_queue.connection)
            if job.get_status(refresh=False) in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED):
                job.cancel()
        except (NoSuchJobError, InvalidJobOperation):
            pass

    # Both.
    def _stop(self, execution: Execution) -> bool:
        """SIGKILL the execution's process groups, its work horse's first (so that it does
        not record the command's death as the run's end); True while any still had to be."""
        stopping = False
        for group in (execution.horse, execution.command):
            if group is not None and not process_groups.stop_group(group):
                stopping = True
        if stopping:
            log.info("agent %s: stopping what runs for task %s", self.node, execution.task,
                     extra={"fields": {"node": self.node, "task": execution.task}})
        return stopping

    def _deliver(self, task: Task | None, execution: Execution) -> None:
        """Tell Redis how the run ended (nothing changes if its task ended otherwise)."""
        if task is None:
            found = self.store.tasks([execution.task])
            task = found[0] if found else None
        if task is not None and task.live and task.node == self.node:
            ended = reconcile.task_ended(self.store, task, bool(execution.succeeded), execution.message,
                                         lost=execution.lost)
            if ended["state"] in (COMPLETED, FAILED, LOST_STATE):
                log.info("agent %s: task %s %s (recorded from the node's journal): %s", self.node, task.id,
                         ended["state"], execution.message, extra={"fields": {"node": self.node, "task": task.id}})
        self.journal.delivered(execution.task)

    def _spec(self, task: Task) -> JobSpec:
        key = (task.job, task.version)
        spec = self.specs.get(key)
        if spec is None:
            if len(self.specs) > 1024:
                self.specs.clear()
            spec = self.specs[key] = self.store.job_spec(task.job, task.version)
        return spec

    def _started(self, task_id: str) -> None:
        self.mine.add(task_id)
        metrics.AGENT_STARTED.inc()

    def _count_finished(self, current: set[str]) -> None:
        """Count (and log, if failed) the tasks this agent started that left the node."""
        gone = [task_id for task_id in self.mine if task_id not in current]
        metrics.AGENT_RUNNING.set(len(self.mine) - len(gone))
        if not gone:
            return
        self.mine.difference_update(gone)
        for task in self.store.tasks(gone):
            metrics.AGENT_FINISHED.labels(task.state).inc()
            if task.state == FAILED:
                log.warning("agent %s: task %s failed: %s", self.node, task.id, task.message or "-",
                            extra={"fields": {"node": self.node, "task": task.id}})

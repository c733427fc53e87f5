"""Disruption budgets at work: counting each budgeted job (kube's disruption controller),
and the eviction every voluntary disruption goes through (kube's eviction API).

**Counting.** Any worker's upkeep counts each job listed in ``jobs:budgets`` about once a
second (:func:`count_due`, under a short lock): ``expected`` (a service's replicas; a
global, batch or sysbatch job's open tasks), ``healthy`` (its running tasks counted
healthy: health ``healthy``, or running when the job has no health check; not those in
its disrupted set, granted but maybe not yet ended) and ``desired`` (the budget's rule,
``scheduler/engine/budgets.py``). ``budget_count.lua`` writes the count, keeping every
disruption that came after the count began.

**Evicting.** :func:`evict` asks the gate (``evict.lua``) whether the task's job allows
one more disruption now, which records it atomically, then ends the task as stopped
(queueing its replacement, unless the caller started one already). An evictor that dies
between the two leaves the task recorded as disrupted: the next attempt is granted again
without counting twice, and ends it. A job without a budget is never held back (kube).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scheduler.control import reconcile
from scheduler.engine.budgets import desired_healthy
from scheduler.model import LIVE_STATES, PENDING, RUNNING, SERVICE, STOPPED, JobSpec, Task
from scheduler.model.errors import NotFound, SchedError
from scheduler.model.update import HEALTHY
from scheduler.state.budgets import GONE, STALE, UNCOUNTED, Gate
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

log = logging.getLogger("sched.worker")

COUNT_EVERY_MS = 1_000  # the upkeep counts a budget again once its count is this old
STALE_MS = 10_000  # the gate refuses to judge on a count older than this (no worker counting?)
DISRUPTED_TIMEOUT_MS = 120_000  # kube's DeletionTimeout: a grant whose task still runs after this counts no more
COUNTS_PER_STEP = 100  # budgets one upkeep step counts at most
LOCK_MS = 5_000
UNBUDGETED = "unbudgeted"  # Eviction.verdict of a task whose job has no budget


def counted_healthy(state: str, health: str, checked: bool) -> bool:
    """Whether a task counts among its job's healthy ones (``counted_healthy`` in ``_lib.lua``)."""
    return state == RUNNING and (health == HEALTHY or not checked)


def expected_of(spec: JobSpec, open_tasks: int) -> int:
    """The tasks the job should have: a service's replicas; else its open tasks (a global
    job's one per eligible node; a batch job's, which end by themselves: kube counts the
    pods of a controller without a scale)."""
    return spec.replicas if spec.type == SERVICE else open_tasks


def count(store: Store, job_id: str) -> dict | None:
    """Count the job's budget now and write it; returns :func:`status`'s record, or None
    when the job has no budget (its count, if any, is forgotten)."""
    began = store.clock_ms()
    fields, disrupted = store.budget_record(job_id)
    job = store.job_fields(job_id)
    spec = parse_stored(job["spec"]) if job.get("spec") else None
    if spec is None or job.get("status", reconcile.RUNNING_JOB) != reconcile.RUNNING_JOB \
            or spec.disruption_budget is None or spec.launcher:
        store.forget_budget(job_id)
        return None
    tasks = store.task_health_states(store.job_task_ids(job_id))
    states = {task_id: state for task_id, state, _ in tasks}
    checked = spec.health is not None
    fresh = {task_id for task_id, ms in disrupted.items() if began - ms <= DISRUPTED_TIMEOUT_MS}
    healthy = sum(1 for task_id, state, health in tasks
                  if counted_healthy(state, health, checked) and task_id not in fresh)
    open_count = sum(1 for _, state, _ in tasks if state == PENDING or state in LIVE_STATES)
    expected = expected_of(spec, open_count)
    desired = desired_healthy(spec.disruption_budget, expected)
    drop = [task_id for task_id in disrupted
            if task_id not in fresh or states.get(task_id) not in LIVE_STATES]
    store.write_budget_count(job_id, began, expected, healthy, desired, checked, str(spec.disruption_budget),
                             disrupted, drop)
    return status(store, job_id)


def count_if_old(store: Store, job_id: str, older_than_ms: int = COUNT_EVERY_MS) -> None:
    """Count the job's budget unless a count younger than ``older_than_ms`` is written."""
    fields, _ = store.budget_record(job_id)
    if not fields or store.clock_ms() - int(fields.get("counted_at", 0)) > older_than_ms:
        count(store, job_id)


def count_due(store: Store, limit: int = COUNTS_PER_STEP) -> list[str]:
    """The upkeep's step: count the budgets whose count is older than ``COUNT_EVERY_MS``
    (the oldest first, at most ``limit``), one worker at a time. Returns the jobs counted."""
    due = store.budgeted_jobs(store.clock_ms() - COUNT_EVERY_MS, limit)
    if not due or not store.take_lock("budgets", LOCK_MS):
        return []
    try:
        done = []
        for job_id in due:
            try:
                count(store, job_id)
                done.append(job_id)
            except SchedError as exc:  # a stored spec that no longer parses: the others go on
                log.warning("budget of job %s: %s", job_id, exc)
        return done
    finally:
        store.release_lock("budgets")


def status(store: Store, job_id: str) -> dict | None:
    """The job's budget as last counted, less the disruptions since: ``{job, budget,
    expected, healthy, desired_healthy, allowed, unavailable, max_unavailable, disrupted
    (task id -> ms), evictions, counted_at}``; a job with a budget that was never counted
    is counted here without writing. None when the job has no budget."""
    fields, disrupted = store.budget_record(job_id)
    if not fields:
        return _uncounted(store, job_id)
    expected, healthy, desired = int(fields["expected"]), int(fields["healthy"]), int(fields["desired"])
    return _record(job_id, fields.get("budget", ""), expected, healthy, desired, disrupted,
                   int(fields.get("evictions", 0)), int(fields.get("counted_at", 0)))


def _uncounted(store: Store, job_id: str) -> dict | None:
    job = store.job_fields(job_id)
    if not job.get("spec"):
        raise NotFound(f"job {job_id!r} does not exist.")
    spec = parse_stored(job["spec"])
    if spec.disruption_budget is None:
        return None
    tasks = store.task_health_states(store.job_task_ids(job_id))
    checked = spec.health is not None
    healthy = sum(1 for _, state, health in tasks if counted_healthy(state, health, checked))
    expected = expected_of(spec, sum(1 for _, state, _ in tasks if state == PENDING or state in LIVE_STATES))
    return _record(job_id, str(spec.disruption_budget), expected, healthy,
                   desired_healthy(spec.disruption_budget, expected), {}, 0, 0)


def _record(job_id: str, budget: str, expected: int, healthy: int, desired: int, disrupted: dict[str, int],
            evictions: int, counted_at: int) -> dict:
    down = max(0, expected - healthy)
    return {"job": job_id, "budget": budget, "expected": expected, "healthy": healthy, "desired_healthy": desired,
            "allowed": max(0, healthy - desired), "unavailable": down, "max_unavailable": max(0, expected - desired),
            "disrupted": disrupted, "evictions": evictions, "counted_at": counted_at}


def waiting_words(record: dict) -> str:
    """What a disruption that waits on this budget says: ``job web's budget, 1 of 1 unavailable``."""
    return f"job {record['job']}'s budget, {record['unavailable']} of {record['max_unavailable']} unavailable"


@dataclass(frozen=True)
class Eviction:
    """What :func:`evict_task` did: ``evicted``, or why not (``verdict``: the gate's, or
    ``unbudgeted``), with the budget's numbers and the replacement queued."""

    task: str
    job: str
    evicted: bool
    verdict: str
    healthy: int = 0
    desired: int = 0
    expected: int = 0
    replacement: str = ""

    @property
    def waiting(self) -> str:
        """Why it was not evicted, in a drain's words (empty when it was)."""
        if self.evicted or self.verdict in (GONE, "elsewhere"):
            return ""
        if self.verdict == STALE:
            return f"job {self.job}'s budget, not counted for {STALE_MS // 1000} s (is a scheduler worker running?)"
        down, allowed = max(0, self.expected - self.healthy), max(0, self.expected - self.desired)
        return f"job {self.job}'s budget, {down} of {allowed} unavailable"


def evict(store: Store, task_id: str, reason: str, *, node: str = "", replace: bool = True) -> bool:
    """End ``task_id`` as a voluntary disruption if its job's budget allows it now (always,
    for a job without one). True when it is ended."""
    return evict_task(store, task_id, reason, node=node, replace=replace).evicted


def evict_task(store: Store, task_id: str, reason: str, *, node: str = "", replace: bool = True,
               task: Task | None = None) -> Eviction:
    """:func:`evict`, saying what happened. ``node``: the node the caller saw the task on
    (it is not evicted from another); ``replace``: queue a replacement (False when the
    caller started one already, as a rebalance does); ``task``: the task as just read."""
    if task is None:
        try:
            task = store.get_task(task_id)
        except NotFound:
            return Eviction(task_id, task_id.rpartition(".")[0], False, GONE)
    if not task.live or (node and task.node != node):
        return Eviction(task.id, task.job, False, GONE if not task.live else "elsewhere")
    try:
        spec = store.job_spec(task.job)
    except NotFound:
        spec = None
    if spec is None or spec.disruption_budget is None:
        return _end(store, task, reason, replace, Gate(UNBUDGETED))
    gate = store.evict_gate(task.job, task.id, task.node, reason, STALE_MS)
    if gate.verdict in (UNCOUNTED, STALE):
        count(store, task.job)
        gate = store.evict_gate(task.job, task.id, task.node, reason, STALE_MS)
    if not gate.allowed:
        return Eviction(task.id, task.job, False, gate.verdict, gate.healthy, gate.desired, gate.expected)
    return _end(store, task, reason, replace, gate)


def _end(store: Store, task: Task, reason: str, replace: bool, gate: Gate) -> Eviction:
    if replace:
        stopped, replaced = reconcile.replace_tasks(store, [task], STOPPED, reason, put_back=True)
        evicted, successor = task.id in stopped, (replaced.get(task.job) or [""])[0]
    else:
        evicted, successor = store.finish([task], STOPPED, reason)[0] in LIVE_STATES, ""
    return Eviction(task.id, task.job, evicted, gate.verdict, gate.healthy, gate.desired, gate.expected, successor)


def allowances(store: Store, jobs) -> dict[str, int]:
    """Disruptions each of ``jobs`` with a counted budget allows now (jobs without one are
    left out): what preemption weighs its victims by."""
    return {job: max(0, healthy - desired) for job, (healthy, desired) in store.budget_numbers(jobs).items()}


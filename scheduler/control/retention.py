"""Retention: remove ended work once its time has come (docs/redis-keys.md, Retention).

Run by every scheduler worker's upkeep (one worker at a time, under a short lock) and by
``sched gc``. One pass, in steps of bounded Lua calls:

1. **Count** the tasks that ended since the last pass into their jobs (``gc_note.lua``):
   a job whose last open task ended, or that was stopped with none open, is *finished*
   from then (a ``job finished`` event says when it will be removed).
2. **Prune** the ended tasks of jobs that still run: those that ended more than
   ``task_retention`` ago, and the oldest beyond ``ended_tasks_per_job`` (the newest are
   kept), each with its output and attempts (``gc_prune.lua``). Kept, whatever their
   age: a batch or sysbatch job's results (each slot's task that completed or
   failed with no retry queued, removed with the job), a task whose
   replacement is still open, and, during a deployment, the tasks of the version it rolls
   out.
3. **Remove** finished jobs ``job_retention`` after they finished, or their own
   ``ttl_after_finished``, with every key of them (``gc_job.lua``, which announces ``job
   removed``). Kept while a deployment of the job is in progress, something holds it
   (``job:<id>:holds``) or a submit is still queueing its tasks: looked at again a minute
   later.

Each script checks in its own atomic step that what it removes is ended and not needed,
whatever this module read before; so any number of passes may run at once, and one that
dies part way leaves nothing half-removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from scheduler.model import LIVE_STATES, PENDING
from scheduler.model.retention import Retention
from scheduler.state.retention import CALL_TASKS
from scheduler.state.store import Store

LOCK = "gc"
LOCK_MS = 30_000  # a worker that dies holding the lock holds it this long at most
AGAIN_MS = 60_000  # a finished job kept for something that still needs it is looked at again after this
JOBS_PER_ROUND = 100
OPEN = (PENDING, *LIVE_STATES)


@dataclass
class Collected:
    """What a pass did (or, dry, would do)."""

    dry_run: bool = False
    counted: int = 0  # task ends counted into their jobs
    uncounted: int = 0  # (dry run) task ends not counted yet
    finished: list[str] = field(default_factory=list)  # jobs found finished in this pass
    tasks_removed: int = 0  # ended tasks of running jobs
    jobs_removed: list[str] = field(default_factory=list)
    job_tasks_removed: int = 0  # tasks removed with their jobs
    kept: dict[str, int] = field(default_factory=dict)  # finished jobs due but kept: why -> how many
    more: bool = False  # the pass stopped at its budget with work left

    def as_dict(self) -> dict:
        return {"dry_run": self.dry_run, "counted": self.counted, "uncounted": self.uncounted,
                "finished": self.finished, "tasks_removed": self.tasks_removed, "jobs_removed": self.jobs_removed,
                "job_tasks_removed": self.job_tasks_removed, "kept": self.kept, "more": self.more}

    @property
    def anything(self) -> bool:
        return bool(self.counted or self.tasks_removed or self.jobs_removed)


def collect(store: Store, *, dry_run: bool = False, budget_s: float | None = None, now_ms: int | None = None,
            retention: Retention | None = None) -> Collected:
    """One pass of retention over the namespace (see the module's text). ``budget_s``
    bounds its time (None: until nothing is due); ``now_ms`` replaces Redis TIME for the
    decisions of what is due (tests); ``retention`` replaces the namespace's settings.
    A dry run counts the ends (bookkeeping the workers do anyway) and removes nothing: it
    says what the real pass would remove now, and how many ends are still not counted
    (those that came after its budget ran out)."""
    started = time.monotonic()
    out = Collected(dry_run=dry_run)
    settings = retention or store.retention()
    now = store.now_ms() if now_ms is None else now_ms

    def spent() -> bool:
        if budget_s is not None and time.monotonic() - started > budget_s:
            out.more = True
            return True
        return False

    # Counting is bookkeeping, not removal (the workers count on their own within seconds):
    # a dry run counts too, so that it reports what the real pass would remove.
    while not spent():
        ids = store.uncounted_ends(CALL_TASKS)
        if not ids:
            break
        counted, finished = store.count_ends(ids, settings)
        out.counted += counted
        out.finished += finished
        if len(ids) < CALL_TASKS:  # that was all (ends since are the next pass's)
            break
    if dry_run:
        out.uncounted = store.retention_counts()["uncounted_ends"]
    _prune(store, settings, now, out, spent)
    # (The clock again: a job the steps above found finished counts from their time.)
    _remove_jobs(store, settings, store.now_ms() if now_ms is None else now_ms, out, spent)
    return out


def _prune(store: Store, settings: Retention, now: int, out: Collected, spent) -> None:
    cutoff = now - int(settings.task_retention * 1000)
    seen: set[str] = set()
    while not spent():
        job_ids = [j for j in store.due_for_pruning(cutoff, JOBS_PER_ROUND) if j not in seen]
        if not job_ids:
            return
        seen.update(job_ids)
        window = settings.ended_tasks_per_job + CALL_TASKS
        for job_id, ended, deployment in store.prunable(job_ids, window):
            over = max(0, len(ended) - settings.ended_tasks_per_job)
            chosen = [t for i, (t, at) in enumerate(ended) if i < over or at <= cutoff][:CALL_TASKS]
            if not chosen:
                if not out.dry_run:  # nothing to remove (a job just stopped): settle it, which may find it finished
                    store.prune_tasks(job_id, deployment, [], settings)
                continue
            links = store.successors(chosen)
            needed = {t for t, (successor, state) in links.items() if successor and state in OPEN}
            wanted = [(t, links[t][0]) for t in chosen if t not in needed]
            if out.dry_run:
                out.tasks_removed += len(wanted)
                continue
            removed = store.prune_tasks(job_id, deployment, wanted, settings) if wanted else []
            if removed is None:
                continue  # its deployment changed meanwhile: the next pass reads it again
            out.tasks_removed += len(removed)
            kept = {t for t, _ in wanted if t not in removed} | needed
            if kept:
                # Still needed: look at them again one retention period from now, or when
                # the next task that is not kept is due, whichever comes first.
                rest = [at for t, at in ended if t not in kept and t not in removed]
                store.look_again(job_id, int(min([now, *rest[:1]])))


def _remove_jobs(store: Store, settings: Retention, now: int, out: Collected, spent) -> None:
    retention_ms = int(settings.job_retention * 1000)
    seen: set[str] = set()
    while not spent():
        found = store.due_jobs(now - retention_ms, now, JOBS_PER_ROUND)
        due = [j for j in found if j not in seen]
        if not due:
            return
        seen.update(due)
        last = len(found) < JOBS_PER_ROUND  # that was all: none is left to look for once these are done
        for job in store.read_jobs(due):
            if out.dry_run:
                out.jobs_removed.append(job.id)
                out.job_tasks_removed += len(job.tasks)
                continue
            outcome, removed = store.remove_job(job, settings)
            if outcome == "removed":
                out.jobs_removed.append(job.id)
                out.job_tasks_removed += removed
                continue
            out.kept[outcome] = out.kept.get(outcome, 0) + 1
            if outcome in ("deploying", "held", "filling"):
                store.postpone_job(job.id, now - retention_ms + AGAIN_MS, now + AGAIN_MS)
            if spent():
                return
        if last:
            return


def upkeep(store: Store, budget_s: float | None = 0.2, now_ms: int | None = None,
           retention: Retention | None = None) -> Collected | None:
    """A worker's share: one pass of at most ``budget_s`` (None: whole), unless another
    worker is doing one now (None); ``now_ms`` and ``retention`` as in :func:`collect`."""
    if not store.take_lock(LOCK, LOCK_MS):
        return None
    try:
        return collect(store, budget_s=budget_s, now_ms=now_ms, retention=retention)
    finally:
        store.release_lock(LOCK)

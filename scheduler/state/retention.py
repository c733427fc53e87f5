"""Retention in Redis: the namespace's settings, the indexes of ended work, and the
scripts that count ended tasks into their jobs (``gc_note.lua``) and remove what is due
(``gc_prune.lua``: ended tasks of a job; ``gc_job.lua``: a finished job with every key
of it). Which work is due is decided by ``scheduler/control/retention.py``; each script
re-checks, in its own step, that nothing it removes is still needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.retention import Retention, parse_setting
from scheduler.state.namespace import NamespaceStore

CALL_TASKS = 500  # tasks per script call: each call stays within a few ms of Redis


@dataclass
class JobRead:
    """What gc_job.lua is given about a job, read just before: its state as enqueue.lua
    compares it, its deployments and its task ids."""

    id: str
    state: str
    deployments: list[str]
    tasks: list[str]
    parent: str = ""  # a launch's periodic or parameterized job, which keeps its id


def removal_ms(own, finished, job_retention) -> int | None:
    """When a finished job is to be removed (ms), from its ``jobs:expiring`` score
    (``own``), its ``jobs:finished`` score and the ``job_retention`` setting as stored (each
    None when absent); None for a job that is not finished."""
    if own is not None:
        return int(float(own))
    if finished is None:
        return None
    return int(float(finished) + Retention.from_config({"job_retention": job_retention or ""}).job_retention * 1000)


class RetentionStore(NamespaceStore):
    # Settings (the config hash).
    def retention(self) -> Retention:
        return Retention.from_config(self.client.hgetall(self.keys.config))

    def set_retention(self, values: dict) -> Retention:
        """Set retention settings (name -> value as a user gives it), all or none: each
        value is checked first (one sentence naming the setting)."""
        stored = {name: parse_setting(name, value) for name, value in values.items()}
        if stored:
            self.client.hset(self.keys.config, mapping=stored)
        if "ended_tasks_per_job" in stored:
            self.look_at_every_job()
        return self.retention()

    def look_at_every_job(self) -> None:
        """Have retention look at every job with ended tasks on its next pass (after
        ``ended_tasks_per_job`` changed: which jobs have too many is counted then)."""
        k = self.keys
        for first in range(0, self.client.zcard(k.jobs_ended), 1000):
            ids = self.client.zrange(k.jobs_ended, first, first + 999)
            if ids:
                self.client.zadd(k.jobs_ended, dict.fromkeys(ids, 0), xx=True)

    def config_fields(self) -> dict[str, str]:
        """The namespace's settings as stored (those set)."""
        return self.client.hgetall(self.keys.config)

    def unset_settings(self, names: list[str]) -> None:
        """Back to the defaults for these settings (names checked by the caller)."""
        if names:
            self.client.hdel(self.keys.config, *names)

    # The indexes.
    def uncounted_ends(self, limit: int) -> list[str]:
        """The first ``limit`` tasks that ended and that retention has not counted yet."""
        return self.client.zrange(self.keys.ended, 0, limit - 1)

    def retention_counts(self) -> dict[str, int]:
        """How much ended work the indexes hold now."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for key in (k.ended, k.jobs_ended, k.jobs_finished, k.jobs_expiring):
                pipe.zcard(key)
            uncounted, with_ended, finished, expiring = pipe.execute()
        return {"uncounted_ends": uncounted, "jobs_with_ended_tasks": with_ended,
                "finished_jobs": finished + expiring}

    def count_ends(self, task_ids: list[str], retention: Retention) -> tuple[int, list[str]]:
        """``gc_note.lua``: count these ended tasks into their jobs and settle each job.
        Returns (tasks counted, the jobs that finished)."""
        k = self.keys
        by_job: dict[str, list[str]] = {}
        for task_id in task_ids:
            by_job.setdefault(task_id.rpartition(".")[0], []).append(task_id)
        keys = [k.ended, k.jobs_ended, k.jobs_finished, k.jobs_expiring, k.stream, k.config]
        args: list = [self.events_arg, retention.ended_tasks_per_job, int(retention.job_retention * 1000)]
        for job_id, ids in by_job.items():
            keys += [k.job(job_id), k.job_tasks(job_id), k.job_ended(job_id), *(k.task(t) for t in ids)]
            args += [job_id, len(ids), *ids]
        reply = self.scripts.gc_note(keys=keys, args=args)
        return int(reply[0]), list(reply[1:])

    def due_for_pruning(self, before_ms: int, limit: int) -> list[str]:
        """Jobs with ended tasks that retention may remove, oldest first: those whose
        oldest such task ended before ``before_ms``, and those with too many (scored 0)."""
        return self.client.zrangebyscore(self.keys.jobs_ended, "-inf", before_ms, start=0, num=limit)

    def look_again(self, job_id: str, at_ms: int) -> None:
        """Have retention look at the job's ended tasks as if its oldest ended at ``at_ms``
        (after it kept some that are still needed), if it is still waiting for that."""
        self.client.zadd(self.keys.jobs_ended, {job_id: at_ms}, xx=True)

    def prunable(self, job_ids: list[str], limit: int) -> list[tuple[str, list[tuple[str, float]], str]]:
        """Per job: (its id, its ended tasks that retention may remove, oldest first, at
        most ``limit``, as (task id, when it ended), its deployment ("" for none))."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.zrangebyscore(k.job_ended(job_id), "-inf", "(inf", start=0, num=limit, withscores=True)
                pipe.hget(k.job(job_id), "deployment")
            replies = pipe.execute()
        return [(job_id, [(t, s) for t, s in ended], deployment or "")
                for job_id, ended, deployment in zip(job_ids, replies[::2], replies[1::2])]

    def successors(self, task_ids: list[str]) -> dict[str, tuple[str, str]]:
        """Per task: (the task that replaced it, "" for none; that task's state, "" if gone)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hget(k.task(task_id), "replaced_by")
            nexts = pipe.execute()
        with self.client.pipeline(transaction=False) as pipe:
            for successor in nexts:
                if successor:
                    pipe.hget(k.task(successor), "state")
            states = iter(pipe.execute())
        return {task_id: (successor or "", (next(states) or "") if successor else "")
                for task_id, successor in zip(task_ids, nexts)}

    def prune_tasks(self, job_id: str, deployment: str, tasks: list[tuple[str, str]],
                    retention: Retention) -> list[str] | None:
        """``gc_prune.lua``: remove these ended tasks (task id, the task that replaced it or
        "") of one job, except those still needed. Returns the ids removed, or None when the
        job's deployment changed since it was read."""
        k = self.keys
        keys = [k.job(job_id), k.job_tasks(job_id), k.job_ended(job_id), k.jobs_ended, k.jobs_finished,
                k.jobs_expiring, k.active_deployments, k.deployment(deployment) if deployment else k.job(job_id),
                k.stream, k.config]
        for task_id, successor in tasks:
            keys += [*k.task_keys(task_id), k.task(successor or task_id)]
        reply = self.scripts.gc_prune(keys=keys, args=[self.events_arg, job_id, retention.ended_tasks_per_job,
                                                       int(retention.job_retention * 1000), deployment,
                                                       *(t for t, _ in tasks)])
        if reply and reply[0] == -1:
            return None
        return list(reply)

    def due_jobs(self, finished_before_ms: int, now_ms: int, limit: int) -> list[str]:
        """Finished jobs due for removal: those following the namespace's job_retention
        that finished before ``finished_before_ms``, then those with their own
        ttl_after_finished whose time has come."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(k.jobs_finished, "-inf", finished_before_ms, start=0, num=limit)
            pipe.zrangebyscore(k.jobs_expiring, "-inf", now_ms, start=0, num=limit)
            by_default, by_own = pipe.execute()
        return [*by_default, *by_own]

    def postpone_job(self, job_id: str, finished_ms: int, remove_at_ms: int) -> None:
        """Look at a finished job again later (something still needs it): its index entry
        is moved on, in whichever of the two finished indexes it is."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(k.jobs_finished, {job_id: finished_ms}, xx=True)
            pipe.zadd(k.jobs_expiring, {job_id: remove_at_ms}, xx=True)
            pipe.execute()

    def remove_at(self, job_id: str) -> int | None:
        """When a finished job is to be removed (ms): its own time in ``jobs:expiring``
        (``ttl_after_finished``), else its score in ``jobs:finished`` plus
        ``job_retention`` as set now; None when it is in neither (it is not finished)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zscore(k.jobs_expiring, job_id)
            pipe.zscore(k.jobs_finished, job_id)
            pipe.hget(k.config, "job_retention")
            own, finished, setting = pipe.execute()
        return removal_ms(own, finished, setting)

    def read_jobs(self, job_ids: list[str]) -> list[JobRead]:
        """What :meth:`remove_job` needs of each job, in one round trip (a job that is gone
        is left out)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hmget(k.job(job_id), "version", "next_index", "status", "parent")
                pipe.zrange(k.job_deployments(job_id), 0, -1)
                pipe.zrange(k.job_tasks(job_id), 0, -1)
            replies = pipe.execute()
        found = []
        for i, job_id in enumerate(job_ids):
            (version, next_index, status, parent), deployments, tasks = replies[3 * i:3 * i + 3]
            if version is not None:
                found.append(JobRead(job_id, f"{version}|{next_index or ''}|{status or ''}", deployments, tasks,
                                     parent or ""))
        return found

    def remove_job(self, job: JobRead, retention: Retention) -> tuple[str, int]:
        """``gc_job.lua``, as many calls as the job's tasks need (``CALL_TASKS`` each, the
        job itself with the last): remove a finished job with every key of it, and a
        launch's id from its parent's launches and idempotency tokens. Returns
        ("removed", tasks removed with it) or why it was kept (gc_job.lua's words)."""
        k = self.keys
        own, indexes = k.job_keys(job.id), k.job_indexes
        fixed = [k.deployments, k.active_deployments, k.filling, k.stream, k.config, *own, *indexes,
                 *(k.deployment(d) for d in job.deployments)]
        parent = [k.job_children(job.parent), k.dispatch_tokens(job.parent)] if job.parent else []
        removed = 0
        tasks = job.tasks
        while True:
            chunk, tasks = tasks[:CALL_TASKS], tasks[CALL_TASKS:]
            final = not tasks
            keys = [*fixed, *(key for t in chunk for key in k.task_keys(t)), *parent]
            args = [self.events_arg, job.id, job.state, len(own), len(indexes), int(final),
                    retention.ended_tasks_per_job, int(retention.job_retention * 1000), removed,
                    len(job.deployments), *job.deployments, *chunk]
            outcome, count = self.scripts.gc_job(keys=keys, args=args)
            removed += int(count)
            if outcome != "part":
                return outcome, removed


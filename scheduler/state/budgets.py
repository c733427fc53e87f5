"""Disruption budgets in Redis: each budgeted job's count (``budget:<job>``), the
disruptions since (``budget:<job>:disrupted``), the jobs the upkeep counts
(``jobs:budgets``), and the scripts that change them: the gate (``evict.lua``), a count's
write (``budget_count.lua``) and the disruptions that passed no gate (``budget_note.lua``).
What the numbers mean is ``scheduler/control/budgets.py``'s and ``docs/budgets.md``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from scheduler.model import Task
from scheduler.state.hashes import hmget_many
from scheduler.state.namespace import NamespaceStore

# The gate's verdicts (evict.lua): the first three let the task go.
GRANTED, AGAIN, FREE = "granted", "again", "free"
REFUSED, UNCOUNTED, STALE, GONE, ELSEWHERE = "refused", "uncounted", "stale", "gone", "elsewhere"
ALLOWED = (GRANTED, AGAIN, FREE)


@dataclass(frozen=True)
class Gate:
    """What evict.lua said of one task, with the budget's numbers as it left them."""

    verdict: str
    healthy: int = 0
    desired: int = 0
    expected: int = 0

    @property
    def allowed(self) -> bool:
        return self.verdict in ALLOWED


class BudgetStore(NamespaceStore):
    def evict_gate(self, job: str, task_id: str, node: str, reason: str, stale_ms: int) -> Gate:
        """``evict.lua``: may ``task_id`` (of ``job``, live on ``node``; "" for any) be taken
        down now as a voluntary disruption? Granted and recorded in one step."""
        k = self.keys
        verdict, healthy, desired, expected = self.scripts.evict(
            keys=[k.budget(job), k.budget_disrupted(job), k.task(task_id), k.stream, k.config],
            args=[self.events_arg, task_id, node, reason, stale_ms, self.scripts.now_arg()])
        return Gate(verdict, int(healthy), int(desired), int(expected))

    def write_budget_count(self, job: str, began_ms: int, expected: int | None, healthy: int = 0, desired: int = 0,
                           checked: bool = False, text: str = "", seen: Iterable[str] = (),
                           drop: Iterable[str] = ()) -> int | None:
        """``budget_count.lua``: the job's budget as a count that began at ``began_ms`` found
        it (``seen``: the disrupted set as it read it first; ``drop``: those it found ended
        or timed out). Returns ``healthy`` as written, or None when a later count was.
        ``expected`` None: the job has no budget (any more), or is gone: its count is forgotten."""
        k = self.keys
        seen, drop = list(seen), list(drop)
        reply = self.scripts.budget_count(
            keys=[k.budget(job), k.budget_disrupted(job), k.budgets],
            args=[job, began_ms, "" if expected is None else expected, healthy, desired, int(checked), text,
                  len(seen), *seen, len(drop), *drop])
        return int(reply[1]) if reply[0] else None

    def forget_budget(self, job: str) -> None:
        """Forget the job's count and take it out of ``jobs:budgets``."""
        self.write_budget_count(job, 0, None)

    def note_disruptions(self, tasks: Iterable[Task]) -> int:
        """``budget_note.lua``: count ``tasks`` (as read before they ended) against their
        jobs' budgets, those that have one. Returns how many were counted."""
        by_job: dict[str, list[Task]] = {}
        for task in tasks:
            by_job.setdefault(task.job, []).append(task)
        if not by_job:
            return 0
        k = self.keys
        keys, args = [], [self.scripts.now_arg()]
        for job, group in by_job.items():
            keys += [k.budget(job), k.budget_disrupted(job)]
            args.append(len(group))
            for task in group:
                args += [task.id, task.state, task.health]
        return int(self.scripts.budget_note(keys=keys, args=args))

    def track_budget(self, job: str, budgeted: bool) -> None:
        """List the job among those the upkeep counts (kept at its last count's time), or
        take it out and forget its count."""
        if budgeted:
            self.client.zadd(self.keys.budgets, {job: 0}, nx=True)
        elif self.client.zscore(self.keys.budgets, job) is not None:
            self.forget_budget(job)

    def budgeted_jobs(self, counted_before_ms: int | None = None, limit: int | None = None) -> list[str]:
        """The jobs with a budget (those last counted before ``counted_before_ms``, the
        longest uncounted first; at most ``limit``)."""
        top = "+inf" if counted_before_ms is None else f"({counted_before_ms}"
        if limit is None:
            return self.client.zrangebyscore(self.keys.budgets, "-inf", top)
        return self.client.zrangebyscore(self.keys.budgets, "-inf", top, start=0, num=limit)

    def budget_record(self, job: str) -> tuple[dict[str, str], dict[str, int]]:
        """The job's budget hash and its disrupted set (task id -> ms), in one round trip."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.budget(job))
            pipe.zrange(k.budget_disrupted(job), 0, -1, withscores=True)
            fields, disrupted = pipe.execute()
        return fields, {task: int(ms) for task, ms in disrupted}

    def budget_disrupted_many(self, jobs: Iterable[str]) -> dict[str, list[str]]:
        """The tasks each of ``jobs`` has had an eviction granted for and not yet seen end
        (its disrupted set), in one round trip."""
        jobs = list(dict.fromkeys(jobs))
        if not jobs:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.zrange(self.keys.budget_disrupted(job), 0, -1)
            return dict(zip(jobs, pipe.execute()))

    def budget_numbers(self, jobs: Iterable[str]) -> dict[str, tuple[int, int]]:
        """(healthy, desired) of each of ``jobs`` that has a count, in one round trip."""
        jobs = list(dict.fromkeys(jobs))
        if not jobs:
            return {}
        rows = hmget_many(self.client, [self.keys.budget(job) for job in jobs], ("healthy", "desired"))
        return {job: (int(row["healthy"]), int(row["desired"])) for job, row in zip(jobs, rows)
                if "healthy" in row and "desired" in row}

    def task_health_states(self, task_ids: list[str]) -> list[tuple[str, str, str]]:
        """(id, state, health) of each of ``task_ids`` that exists: what a count reads."""
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hmget(self.keys.task(task_id), "state", "health")
            rows = pipe.execute()
        return [(task_id, state, health or "") for task_id, (state, health) in zip(task_ids, rows) if state]

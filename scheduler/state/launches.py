"""Launches of periodic and parameterized jobs: ``launch.lua`` (a child job, made
exactly once), the launcher's heap ``jobs:periodic``, a parent's ``children`` and its
dispatches' idempotency ``tokens``. When to launch, and what, is decided in
``control/periodic.py`` and ``control/dispatch.py``."""

from __future__ import annotations


import math
import time
from dataclasses import dataclass

import orjson
import redis

from scheduler.model.errors import RedisUnavailable
from scheduler.state.history import HISTORY_KEEP
from scheduler.state.namespace import NamespaceStore


@dataclass(frozen=True, slots=True)
class Launched:
    """What ``launch.lua`` answered: ``created`` (the child is new), ``child`` (its id, or
    the one an idempotency token named), ``refused`` (why nothing was made: "gone",
    "stopped", "tick", "launched", "exists"; "" otherwise), ``now_ms``."""

    created: bool
    child: str = ""
    refused: str = ""
    now_ms: int = 0


class LaunchStore(NamespaceStore):
    def launch(self, parent: str, child: str, *, how: str, tick: int | None = None, launches: int | None = None,
               next_launch: float | None = None, token: str = "", shares: str = "", per_node: bool = False,
               held: bool = False, skipped: tuple[str, int, int, int] | None = None, by: str = "sched",
               create: bool = True, fields: dict | None = None) -> Launched:
        """``launch.lua`` (its header says what each argument does): create the child job
        ``child`` of ``parent`` with the hash ``fields``, if ``parent``'s next launch is still
        ``tick`` and its count of launches still ``launches`` (None: not compared); move its
        next launch to ``next_launch`` (``math.inf``: none; None: unchanged) and record the
        ``skipped`` ticks ((reason, first ms, last ms, count)) in the same step. With
        ``create`` False only the tick and what it skipped are recorded.

        A call whose reply is lost is sent again only when that cannot make a second child:
        a tick (its time is then claimed) or a dispatch with a ``token``. Otherwise the
        error says that the child may or may not exist."""
        k = self.keys
        pairs = [item for pair in (fields or {}).items() for item in pair]
        skipped_arg = "" if skipped is None else "|".join(str(part) for part in skipped)
        nxt = "" if next_launch is None else "+inf" if next_launch == math.inf else str(int(next_launch))
        args = [self.events_arg, how, parent, child, "" if tick is None else str(tick),
                "" if launches is None else str(launches), nxt, token, shares, "1" if per_node else "0",
                "1" if held else "0", skipped_arg, HISTORY_KEEP, by, "1" if create else "0", len(pairs) // 2, *pairs]
        keys = [k.job(parent), k.job(child), k.jobs, k.job_shares, k.filling, k.job_children(parent), k.launchers,
                k.dispatch_tokens(parent), k.held, k.global_jobs, k.stream, k.config, k.job_history(parent),
                k.jobs_by_id]
        resend = tick is not None or bool(token)
        for attempt in range(5 if resend else 1):
            try:
                reply = self.scripts.launch(keys=keys, args=args)
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if not resend or attempt == 4:
                    raise RedisUnavailable(
                        f"Redis did not answer while job {parent!r} was being launched ({str(exc).rstrip('.')}); "
                        f"a launch may or may not have been made: look with `sched job show {parent}`.") from None
                time.sleep(min(2.0, 0.1 * 2 ** attempt))
        if reply[0] == 1:
            return Launched(True, reply[1], "", int(reply[2]))
        if reply[0] == 2:
            return Launched(False, reply[1])
        if reply[0] == 3:
            return Launched(False, "", "", int(reply[1]))
        return Launched(False, "", reply[1])

    def set_launcher(self, job_id: str, next_ms: float) -> None:
        """Put a periodic job in the launcher's heap at its next launch (``math.inf``: none)."""
        self.client.zadd(self.keys.launchers, {job_id: "+inf" if next_ms == math.inf else int(next_ms)})

    def set_schedule(self, job_id: str, suspended: bool, next_ms: float) -> None:
        """Suspend or resume a periodic job: its ``suspended`` flag and its next launch
        (``math.inf``: none) in its hash and the heap. A launcher that read the old next
        launch is refused by ``launch.lua``."""
        nxt = "+inf" if next_ms == math.inf else str(int(next_ms))
        self.client.hset(self.keys.job(job_id), mapping={"suspended": "1" if suspended else "0", "next_launch": nxt})
        self.set_launcher(job_id, next_ms)

    def forget_launcher(self, job_id: str) -> None:
        self.client.zrem(self.keys.launchers, job_id)

    def first_launch(self) -> tuple[int, float | None]:
        """(Redis time, the earliest next launch of any periodic job) or (0, None) when no
        periodic job has one: Redis time is read only when there is one (a cluster pipeline
        cannot send TIME, and a namespace without periodic jobs pays one ZRANGE)."""
        first = self.client.zrange(self.keys.launchers, 0, 0, withscores=True)
        if not first or first[0][1] == math.inf:
            return 0, None
        return self.now_ms(), first[0][1]

    def due_launchers(self, until_ms: int, limit: int = 100) -> list[str]:
        return self.client.zrangebyscore(self.keys.launchers, "-inf", until_ms, start=0, num=limit)

    def next_launches(self, job_ids: list[str]) -> dict[str, float | None]:
        """Job -> its next launch (ms, inf when none), for the periodic jobs among ``job_ids``."""
        if not job_ids:
            return {}
        scores = self.client.zmscore(self.keys.launchers, job_ids)
        return {job_id: score for job_id, score in zip(job_ids, scores) if score is not None}

    def launcher_ids(self, job_ids: list[str], kind: str) -> list[str]:
        """The jobs among ``job_ids`` whose spec has a ``kind`` block (``periodic`` or
        ``parameterized``): one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(self.keys.job(job_id), "spec")
            specs = pipe.execute()
        return [job_id for job_id, spec in zip(job_ids, specs) if spec and kind in orjson.loads(spec)]

    def children(self, job_id: str) -> list[tuple[str, int]]:
        """(child id, launched ms) of a periodic or parameterized job, oldest first."""
        return [(child, int(ms)) for child, ms in self.client.zrange(self.keys.job_children(job_id), 0, -1,
                                                                     withscores=True)]

    def dispatched(self, job_id: str, token: str) -> str | None:
        """The child a dispatch with ``token`` made, while it is kept."""
        return self.client.hget(self.keys.dispatch_tokens(job_id), token)

    def remove_launch(self, child: str, chunk: int = 500) -> None:
        """Remove an ended launch of a periodic or parameterized job with every key of it
        (``Keys.job_keys``, and each task's ``Keys.task_keys``) and its id from every index
        of jobs (``Keys.job_indexes``): its parent's history limits say it is no longer
        kept. Plain commands, a chunk at a time (its tasks ended: no queue or tally holds
        them), the indexes last: a remover that dies part way leaves the launch listed in
        its parent's children, and the next trim removes the rest."""
        k = self.keys
        tasks = self.client.zrange(k.job_tasks(child), 0, -1)
        for start in range(0, len(tasks), chunk):
            self.client.delete(*(key for task in tasks[start:start + chunk] for key in k.task_keys(task)))
        self.client.delete(*k.job_keys(child))
        with self.client.pipeline(transaction=False) as pipe:
            for index in k.job_indexes:
                pipe.type(index)
            kinds = pipe.execute()
        with self.client.pipeline(transaction=False) as pipe:
            for index, kind in zip(k.job_indexes, kinds):
                if kind == "set":
                    pipe.srem(index, child)
                elif kind == "zset":
                    pipe.zrem(index, child)
                elif kind == "hash":
                    pipe.hdel(index, child)
            pipe.execute()

    def forget_children(self, job_id: str, children: list[str]) -> None:
        if children:
            self.client.zrem(self.keys.job_children(job_id), *children)
            tokens = {token for token, child in self.client.hgetall(self.keys.dispatch_tokens(job_id)).items()
                      if child in set(children)}
            if tokens:
                self.client.hdel(self.keys.dispatch_tokens(job_id), *tokens)

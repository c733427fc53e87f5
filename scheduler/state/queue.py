"""The scheduling queue: kube-scheduler's PriorityQueue, as Redis sorted sets and Lua.

Every pending task is in exactly one of five sorted sets, four of them here:

``q:active``         ready to be scheduled. Score = priority band, then enqueue order, so
                     ``ZRANGE q:active 0 0`` is the next task (higher priority, then older).
``q:inflight``       claimed by a worker. Score = lease deadline from Redis ``TIME``. A worker
                     that dies leaves its tasks here; anyone returns expired leases to active.
``q:backoff``        failed recently. Score = when its backoff ends: ``initial * 2^(attempts-1)``,
                     capped (1 s doubling to 10 s by default). Due entries move to active.
``q:unschedulable``  failed while nothing in the cluster changed. Score = when it entered.
                     A cluster event (node added or made available, resources freed) moves
                     them all back; leftovers older than 60 s move back anyway.

A fifth set holds pending tasks that may not be scheduled yet, whatever the cluster:

``q:waiting``        tasks of a job whose ``after`` dependencies do not hold yet. Score =
                     the task's active-queue score; ``unhold.lua`` moves them, unchanged, to
                     ``q:active`` once they hold (control/dependencies.py).

The choice between backoff and unschedulable is kube's moveRequestCycle rule: each claim
takes a new value of the scheduling-cycle counter (also its fencing token); each cluster
event records the counter in ``move_cycle``. A task whose attempt failed after an event
(``move_cycle >= its claim's cycle``) may fit now, so it only backs off; otherwise it waits
for the next event. All moves are Lua scripts, so a task is never in two sets or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import orjson
import redis
from redis.cluster import RedisCluster

from scheduler.state.connection import time_ms
from scheduler.state.keys import Keys
from scheduler.model import MAX_PRIORITY
from scheduler.state.scripts import Scripts
from scheduler.state.stream import events_argument

CHUNK = 500  # tasks per Lua call when moving many: keeps each call short
RECLAIM_LIMIT = 1000  # expired leases returned per look (the rest at the next)
FLUSH_LIMIT = 10 * CHUNK  # due backoffs moved per look
ATTEMPTS_KEPT = 8  # entries of a task's attempts list: its last distinct placement outcomes


def queue_score(priority: int, sequence: int) -> int:
    """Active-queue score: higher priority first, then first enqueued first.

    Read in decimal, the leading digits are ``1000 - priority`` and the last twelve are the
    task's enqueue sequence number (``q:seq``), so ``ZRANGE`` lists tasks in exactly the
    order they will be claimed; the whole stays exact in a double.
    """
    return (MAX_PRIORITY - priority) * 10**12 + sequence


@dataclass(frozen=True)
class QueueConfig:
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 10_000
    unschedulable_ms: int = 60_000  # leftover flush age
    lease_ms: int = 30_000


@dataclass(frozen=True)
class Claim:
    token: str
    now_ms: int
    task_ids: list[str]
    waiting: int = 0  # tasks left in the active queue after this claim


def _chunks(items: list, size: int = CHUNK) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class SchedulingQueue:
    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts | None = None,
                 config: QueueConfig | None = None, clock: Callable[[], int] | None = None):
        """``clock`` (ms) replaces Redis TIME for backoff and flush decisions, for tests.
        Leases always use Redis TIME, so no worker's clock can make one last longer."""
        self.client = client
        self.keys = keys
        self.scripts = scripts or Scripts(client)
        self.config = config or QueueConfig()
        self.clock = clock

    def _now_arg(self) -> str:
        return "" if self.clock is None else str(int(self.clock()))

    def now_ms(self) -> int:
        if self.clock is not None:
            return int(self.clock())
        return time_ms(self.client.time())

    # Claim and what follows it.
    def claim(self, count: int, lease_ms: int | None = None, share_from: int | None = None,
              job_tail: int = 0, capacity: dict[str, int] | None = None, window: int = 0) -> Claim:
        """Lease up to ``count`` tasks. With ``share_from``, take only half of what is
        waiting (but at least ``share_from``), leaving the rest to other workers. With
        ``job_tail``, a claim that ends inside a job takes up to that many more of its
        tasks, so that the job is placed in one pass. With ``window``, the first ``window``
        waiting tasks are claimed by dominant resource fairness between tenants (their
        shares measured against ``capacity``, the cluster's total per resource), and a
        gang's waiting tasks always come whole (see ``lua/claim.lua``)."""
        k = self.keys
        args = [count, lease_ms or self.config.lease_ms, "" if share_from is None else share_from, job_tail]
        keys = [k.active, k.inflight, k.leases, k.cycle]
        if window:
            keys += [k.job_shares, k.tenants, k.usage]
            args += [",".join(f"{r}={int(a)}" for r, a in sorted((capacity or {}).items())), window]
        reply = self.scripts.claim(keys=keys, args=[*args, self._now_arg()])
        if len(reply) == 1:
            return Claim(token="", now_ms=int(reply[0]), task_ids=[])
        return Claim(token=str(reply[1]), now_ms=int(reply[0]), task_ids=list(reply[3:]), waiting=int(reply[2]))

    def fail(self, token: str, failures: list[tuple[str, dict]], conflicts=frozenset()) -> list[str]:
        """Requeue claimed tasks that did not fit, each with its explanation (a dict).
        Tasks in ``conflicts`` were refused at commit by a race, not for lack of room: they
        back off rather than wait for a cluster event. A task whose explanation says it
        waits for its job's ``parallelism`` has no backoff window: the end of one of the
        job's tasks (a cluster event) brings it back at once."""
        k, c = self.keys, self.config
        results: list[str] = []
        for chunk in _chunks(failures):
            args = [token, self._now_arg(), c.initial_backoff_ms, c.max_backoff_ms, events_argument(k), ATTEMPTS_KEPT]
            keys = [k.inflight, k.leases, k.backoff, k.unschedulable, k.move_cycle, k.stream, k.config]
            for task_id, explanation in chunk:
                flag = "1" if task_id in conflicts else "2" if explanation.get("parallelism") else "0"
                args += [task_id, orjson.dumps(explanation), flag, explanation.get("gang") or ""]
                keys += [k.task(task_id), k.task_attempts(task_id)]
            results += self.scripts.fail(keys=keys, args=args)
        return results

    def attempts(self, task_id: str) -> list[dict]:
        """The outcomes of the task's failed placement attempts, oldest first (at most
        ``ATTEMPTS_KEPT`` entries; consecutive attempts with the same explanation share one):
        ``{first, last, since, at, queue, message[, conflict]}`` (see ``lua/fail.lua``)."""
        return [orjson.loads(entry) for entry in self.client.lrange(self.keys.task_attempts(task_id), 0, -1)]

    def release(self, token: str, task_ids: list[str]) -> list[str]:
        """Hand claimed tasks back to the active queue untouched (a worker stopping)."""
        return self._reclaim(token, task_ids)

    def reclaim_expired(self, limit: int = RECLAIM_LIMIT) -> list[str]:
        """Return tasks whose lease has run out (their worker died or stalled) to active."""
        now = time_ms(self.client.time())
        expired = self.client.zrangebyscore(self.keys.inflight, "-inf", now, start=0, num=limit)
        return self._reclaim("", expired) if expired else []

    def _reclaim(self, token: str, task_ids: list[str]) -> list[str]:
        k = self.keys
        returned: list[str] = []
        for chunk in _chunks(task_ids):
            returned += self.scripts.reclaim(
                keys=[k.inflight, k.leases, k.active, k.wake, k.stream, k.config, *(k.task(t) for t in chunk)],
                args=[token, events_argument(k), *chunk])
        return returned

    # Moving waiting tasks back.
    def flush_backoff(self) -> int:
        """Move tasks whose backoff has ended to the active queue."""
        due = self.client.zrangebyscore(self.keys.backoff, "-inf", self.now_ms(), start=0, num=FLUSH_LIMIT)
        return self._move(self.keys.backoff, "backoff", due, 0)[0]

    def flush_unschedulable(self, older_than_ms: int | None = None) -> tuple[int, int]:
        """Move unschedulable tasks that waited at least ``older_than_ms`` (default 60 s) back."""
        age = self.config.unschedulable_ms if older_than_ms is None else older_than_ms
        latest = self.now_ms() - age
        ids = self.client.zrangebyscore(self.keys.unschedulable, "-inf", latest)
        return self._move(self.keys.unschedulable, "unschedulable", ids, latest)

    def move_all_to_active(self) -> tuple[int, int]:
        """After a cluster event: every unschedulable task goes to active (or backoff if still
        inside its backoff window). Returns (to active, to backoff)."""
        ids = self.client.zrange(self.keys.unschedulable, 0, -1)
        return self._move(self.keys.unschedulable, "unschedulable", ids, 2**53)  # any entry time

    def _move(self, source: str, kind: str, ids: list[str], latest: int) -> tuple[int, int]:
        k = self.keys
        to_active = to_backoff = 0
        for chunk in _chunks(ids):
            a, b = self.scripts.move(keys=[source, k.active, k.backoff, k.wake, k.stream, k.config,
                                           *(k.task(t) for t in chunk)],
                                     args=[self._now_arg(), kind, int(latest), events_argument(k), *chunk])
            to_active, to_backoff = to_active + a, to_backoff + b
        return to_active, to_backoff

    def cluster_event(self) -> None:
        """Record a cluster event not made by a script (scripts record their own)."""
        k = self.keys
        self.client.set(k.move_cycle, self.client.get(k.cycle) or 0)

    def maintain(self) -> dict[str, int]:
        """The periodic work any worker does: expired leases, due backoffs, cluster events
        since it last looked, and the leftover flush. Safe to run from many workers at once.
        What is due is read in one round trip (on a cluster, whose pipelines carry only
        commands with keys, the time is read apart first), and what it is in one more, only
        when there is any; only what there is to move costs a script call."""
        return self.maintain_with(None)[0]

    def maintain_with(self, also=None) -> tuple[dict[str, int], list]:
        """:meth:`maintain`, with what ``also(pipe)`` queues read in its first round trip
        (those replies come second)."""
        k, one = self.keys, self.on_one_server
        now = 0 if one else time_ms(self.client.time())
        with self.client.pipeline(transaction=False) as pipe:
            if one:
                pipe.time()
            for key in (k.inflight, k.backoff, k.unschedulable):
                pipe.zrange(key, 0, 0, withscores=True)  # the first to expire, end, or be flushed
            pipe.get(k.move_cycle)  # two GETs: a cluster pipeline refuses MGET
            pipe.get(k.moved_cycle)
            if also is not None:
                also(pipe)
            replies = pipe.execute()
        if one:
            now = time_ms(replies.pop(0))
        first_lease, first_backoff, oldest, move_cycle, moved_cycle, *more = replies
        queue_now = int(self.clock()) if self.clock is not None else now
        latest = queue_now - self.config.unschedulable_ms
        expiring = bool(first_lease) and first_lease[0][1] <= now
        ending = bool(first_backoff) and first_backoff[0][1] <= queue_now
        event = move_cycle != moved_cycle
        flushing = not event and bool(oldest) and oldest[0][1] <= latest
        expired, due, unschedulable = [], [], []
        if expiring or ending or event or flushing:
            with self.client.pipeline(transaction=False) as pipe:
                if expiring:
                    pipe.zrangebyscore(k.inflight, "-inf", now, start=0, num=RECLAIM_LIMIT)  # as reclaim_expired
                if ending:
                    pipe.zrangebyscore(k.backoff, "-inf", queue_now, start=0, num=FLUSH_LIMIT)  # as flush_backoff
                if event:
                    # Record first: an event during the move changes move_cycle again and is seen next time.
                    pipe.set(k.moved_cycle, move_cycle or 0)
                    pipe.zrange(k.unschedulable, 0, -1)  # every one goes back (as move_all_to_active)
                elif flushing:
                    pipe.zrangebyscore(k.unschedulable, "-inf", latest)
                read = iter(pipe.execute())
            expired = next(read) if expiring else []
            due = next(read) if ending else []
            if event:
                next(read)
            unschedulable = next(read) if event or flushing else []
        done = {"reclaimed": len(self._reclaim("", expired)) if expired else 0,
                "from_backoff": self._move(k.backoff, "backoff", due, 0)[0] if due else 0}
        if event:
            done["after_event"] = sum(self._move(k.unschedulable, "unschedulable", unschedulable, 2**53))
            unschedulable = []  # every unschedulable task has just been moved
        done["leftover"] = sum(self._move(k.unschedulable, "unschedulable", unschedulable, latest)) \
            if unschedulable else 0
        return done, more

    def wait_for_work(self, timeout_s: float, others: Sequence[SchedulingQueue] = ()) -> bool:
        """Wait up to ``timeout_s`` for a script to make tasks claimable (a token on
        ``q:wake``); True if one came. A token is a hint: a worker claims after the wait
        either way, so a token lost or taken by another worker costs at most the wait.
        ``others``: queues of other cells on the same server (:attr:`on_one_server`),
        waited on in the same ``BLPOP``."""
        keys = [self.keys.wake, *(queue.keys.wake for queue in others)]
        return self.client.blpop(keys, timeout=max(timeout_s, 0.001)) is not None

    @property
    def on_one_server(self) -> bool:
        """Whether the Redis is one server, where one ``BLPOP`` may wait on several cells'
        lists (on a Redis Cluster they are in different slots)."""
        return not isinstance(self.client, RedisCluster)

    def claim_probe(self) -> tuple[int, int | None, int]:
        """(the scheduling-cycle counter, the earliest lease deadline in flight or None,
        Redis TIME in ms), read together: how the benchmark sees when the first claim came."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(k.cycle)
            pipe.zrange(k.inflight, 0, 0, withscores=True)
            cycle, earliest = pipe.execute()
        now = time_ms(self.client.time())  # apart: a cluster pipeline carries only commands with keys
        return int(cycle or 0), int(earliest[0][1]) if earliest else None, now

    def next_due_ms(self) -> int | None:
        """When the next waiting task is due back in the active queue without a cluster
        event (the first backoff to end, or the oldest unschedulable task's leftover flush),
        by the queue's clock; None when neither queue holds a task."""
        return self.outlook()[1]

    def counts(self) -> dict[str, int]:
        return self.outlook()[0]

    def outlook(self, also=None) -> tuple[dict[str, int], int | None, list]:
        """:meth:`counts` and :meth:`next_due_ms` in one round trip, with what ``also(pipe)``
        queues on the same pipeline (its replies come third)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for key in (k.active, k.backoff, k.unschedulable, k.inflight, k.waiting):
                pipe.zcard(key)
            pipe.zrange(k.backoff, 0, 0, withscores=True)
            pipe.zrange(k.unschedulable, 0, 0, withscores=True)
            if also is not None:
                also(pipe)
            active, backoff, unschedulable, inflight, waiting, first_backoff, oldest, *more = pipe.execute()
        due = [int(first_backoff[0][1])] if first_backoff else []
        if oldest:
            due.append(int(oldest[0][1]) + self.config.unschedulable_ms)
        return ({"active": active, "backoff": backoff, "unschedulable": unschedulable, "inflight": inflight,
                 "waiting": waiting}, min(due) if due else None, more)

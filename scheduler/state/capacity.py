"""What ``sched capacity`` keeps in Redis: its last answer (the dashboard's capacity panel),
since when each node has been unneeded (the cluster-autoscaler's unneeded time, counted
across runs), and when a hook last acted on a scale-up and on a scale-down (the
cooldowns). One HASH, ``capacity``, of a bounded size: one answer, and one entry per
node of the cluster in ``unneeded``. ``lua/capacity.lua`` writes it and sends the
``capacity`` events of an answer in the same step."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from scheduler.model import PENDING, JobSpec, Task
from scheduler.state.hashes import hgetall_many
from scheduler.state.jobs import parse_stored
from scheduler.state.namespace import NamespaceStore

PENDING_QUEUES = ("active", "backoff", "unschedulable", "inflight")  # not waiting: held by dependencies


@dataclass
class PendingWork:
    """The pending tasks (in the four scheduling queues, in queue order: priority, then
    age), the spec of each of their job versions, and the running global jobs' specs
    (a new node gets one task of each that wants it)."""

    tasks: list[Task] = field(default_factory=list)
    specs: dict[tuple[str, int], JobSpec] = field(default_factory=dict)
    global_jobs: dict[str, JobSpec] = field(default_factory=dict)


@dataclass
class CapacityRecord:
    last: dict | None = None  # the last answer recorded
    digest: str = ""  # what it decided
    at_ms: int = 0  # when it was recorded
    unneeded: dict[str, int] = field(default_factory=dict)  # node -> since when it has been unneeded (ms)
    up_at_ms: int = 0  # when a hook last acted on a scale-up (0: never)
    down_at_ms: int = 0  # when a hook last acted on a scale-down (0: never)


def _loads(text, default):
    try:
        return orjson.loads(text) if text else default
    except orjson.JSONDecodeError:
        return default


class CapacityStore(NamespaceStore):
    def pending_work(self) -> PendingWork:
        """Every pending task with its version's spec, and the running global jobs (a few
        pipelined round trips)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for queue in PENDING_QUEUES:
                pipe.zrange(getattr(k, queue), 0, -1, withscores=True)
            pipe.smembers(k.global_jobs)
            *queued, global_ids = pipe.execute()
        scored: dict[str, float] = {}
        for entries in queued:
            for task_id, score in entries:
                scored.setdefault(task_id, score)
        ids = sorted(scored, key=lambda t: (scored[t], t))
        tasks = [Task.from_hash(f) for f in hgetall_many(self.client, [k.task(t) for t in ids])
                 if f and f.get("state") == PENDING]
        versions = sorted({(t.job, t.version) for t in tasks})
        global_ids = sorted(global_ids)
        with self.client.pipeline(transaction=False) as pipe:
            for job, version in versions:
                pipe.hget(k.job(job), f"spec:{version}")
            for job in global_ids:
                pipe.hmget(k.job(job), "spec", "status")
            replies = pipe.execute()
        specs = {key: parse_stored(text) for key, text in zip(versions, replies) if text is not None}
        globals_ = {job: parse_stored(text) for job, (text, status) in zip(global_ids, replies[len(versions):])
                    if text is not None and (status or "running") == "running"}
        return PendingWork([t for t in tasks if (t.job, t.version) in specs], specs, globals_)

    def capacity_record(self) -> CapacityRecord:
        got = self.client.hgetall(self.keys.capacity)
        return CapacityRecord(last=_loads(got.get("last"), None), digest=got.get("digest", ""),
                              at_ms=int(got.get("at", 0)), unneeded=_loads(got.get("unneeded"), {}),
                              up_at_ms=int(got.get("up_at", 0)), down_at_ms=int(got.get("down_at", 0)))

    def record_capacity(self, answer: dict, digest: str, unneeded: dict[str, int], acted: tuple[str, ...] = (),
                        events: list[dict] = (), now_ms: int | None = None) -> int:
        """``capacity.lua``: keep ``answer``, the unneeded times and what a hook ``acted`` on
        (``up``, ``down``), and send ``events`` (each a dict of the event's members but
        ``ts``); returns the time recorded (ms)."""
        k = self.keys
        heads = [orjson.dumps(event).decode()[1:-1] for event in events]
        return int(self.scripts.capacity(
            keys=[k.capacity, k.stream, k.config],
            args=[self.events_arg, orjson.dumps(answer).decode(), digest, orjson.dumps(unneeded).decode(),
                  ",".join(acted), "" if now_ms is None else int(now_ms), *heads]))

"""The version of a namespace's key layout, and the steps that move an older one forward.

Each namespace records the layout its keys follow in ``sched:{ns}:layout`` (a STRING
holding a whole number). :data:`CURRENT` is the layout this version of sched writes:

- **1**: before layouts were recorded (no ``layout`` key in a namespace that has jobs or
  nodes).
- **2**: retention's indexes: every ended task counted in ``job:<id>:ended`` (or waiting
  in ``tasks:ended`` to be), finished jobs in ``jobs:finished`` / ``jobs:expiring``, jobs
  with ended tasks to look at in ``jobs:ended``, and ``replaced_by`` on every task a
  replacement names.

A process checks the layout before its first write (``Scripts.set_guard``, one read):
an empty namespace is given :data:`CURRENT`; a namespace of a newer layout than it
knows, or of an older one, is refused in one sentence naming the layout and the command
that fixes it. ``sched upgrade`` (:meth:`LayoutStore.upgrade_layout`) runs the steps from
the namespace's layout to :data:`CURRENT` in place, each in bounded script calls, each
idempotent, recording the new layout after each step; run it with every process of the
older version stopped (what they write meanwhile is not in the new indexes: run it again).

The API is small on purpose: :data:`CURRENT`, :meth:`LayoutStore.layout_version`,
:meth:`LayoutStore.check_layout` and :meth:`LayoutStore.upgrade_layout` (and ``STEPS``
to add the next layout: a function of the store that brings a namespace of the layout
before up to it).
"""

from __future__ import annotations

from scheduler.model.errors import SchedError
from scheduler.state.namespace import NamespaceStore

CURRENT = 2
PROGRAM_UPGRADE = "pip install --upgrade redis-sched"
_CHUNK = 500  # tasks per layout_2.lua call


class LayoutError(SchedError):
    """The namespace's key layout is not the one this sched writes."""


class LayoutStore(NamespaceStore):
    def layout_version(self) -> int:
        """The namespace's layout: the recorded number; 1 for a namespace that has jobs or
        nodes and no record (written before layouts were recorded); 0 for an empty one."""
        k = self.keys
        recorded = self.client.get(k.layout)
        if recorded is not None:
            return int(recorded)
        return 1 if self.client.exists(k.jobs, k.nodes) else 0

    def check_layout(self) -> None:
        """Refuse to write to a namespace of another layout than :data:`CURRENT` (one
        sentence, :class:`LayoutError`); give an empty namespace the current one."""
        version = self.layout_version()
        if version == CURRENT:
            return
        ns = self.keys.namespace
        if version == 0:
            self.client.set(self.keys.layout, CURRENT, nx=True)
            if int(self.client.get(self.keys.layout)) != CURRENT:  # another sched was first
                self.check_layout()
            return
        if version > CURRENT:
            raise LayoutError(f"namespace {ns} has key layout {version}, newer than this sched knows ({CURRENT}); "
                              f"upgrade sched ({PROGRAM_UPGRADE}) before writing to it.")
        raise LayoutError(f"namespace {ns} has key layout {version}, older than this sched's ({CURRENT}); run "
                          f"`sched -n {ns} upgrade` to move it forward in place.")

    def upgrade_layout(self) -> dict:
        """Move the namespace's layout forward to :data:`CURRENT`, step by step (each
        idempotent). Returns ``{namespace, from, to, steps: {version: what it did}}``."""
        version = self.layout_version()
        ns = self.keys.namespace
        if version > CURRENT:
            raise LayoutError(f"namespace {ns} has key layout {version}, newer than this sched knows ({CURRENT}); "
                              f"upgrade sched ({PROGRAM_UPGRADE}) instead.")
        done: dict[int, dict] = {}
        start = version
        if version == 0:
            self.client.set(self.keys.layout, CURRENT, nx=True)
            return {"namespace": ns, "from": 0, "to": CURRENT, "steps": {}}
        while version < CURRENT:
            version += 1
            done[version] = STEPS[version](self)
            self.client.set(self.keys.layout, version)
        return {"namespace": ns, "from": start, "to": CURRENT, "steps": done}


def check_before_serving(url: str, keys) -> None:
    """Raise :class:`LayoutError` now if the namespace of ``keys`` is of another layout,
    rather than in every turn of a long-running loop; on a connection of its own, closed
    at once. Anything else (a Redis not up yet, a refused password) is left to the
    processes, which wait for Redis or say why they cannot reach it."""
    import redis
    from redis.exceptions import RedisClusterException

    from scheduler.state.connection import client_for

    try:
        client = client_for(url, retrying=False)
    except (redis.RedisError, RedisClusterException):
        return
    try:
        LayoutStore(client, keys).check_layout()
    except (redis.RedisError, RedisClusterException):
        pass
    finally:
        client.close()


def _to_2(store: LayoutStore) -> dict:
    """Layout 2: count every ended task into its job, record ``replaced_by``, settle each
    job (finished jobs get the latest end of their tasks, or their stop, as when they
    finished). A job at a time, ``_CHUNK`` tasks per call."""
    from scheduler.model.retention import Retention

    k = store.keys
    retention = Retention.from_config(store.client.hgetall(k.config))
    jobs = counted = 0
    for job_id in store.client.sscan_iter(k.jobs, count=500):
        ids = store.client.zrange(k.job_tasks(job_id), 0, -1)
        status, updated = store.client.hmget(k.job(job_id), "status", "updated")
        last = int(updated or 0) if status == "stopped" else 0
        links: list = []
        for first in range(0, len(ids), _CHUNK):
            with store.client.pipeline(transaction=False) as pipe:
                for task_id in ids[first:first + _CHUNK]:
                    pipe.hmget(k.task(task_id), "replaces", "ended_at")
                links += pipe.execute()
        retried = {replaces for replaces, _ in links if replaces}
        for first in range(0, max(len(ids), 1), _CHUNK):
            chunk, rows = ids[first:first + _CHUNK], links[first:first + _CHUNK]
            for _replaces, ended_at in rows:
                last = max(last, int(ended_at or 0))
            keys = [k.jobs_ended, k.jobs_finished, k.jobs_expiring, k.stream, k.config, k.job(job_id),
                    k.job_tasks(job_id), k.job_ended(job_id)]
            args: list = [store.events_arg, job_id, retention.ended_tasks_per_job, int(retention.job_retention * 1000),
                          int(first + _CHUNK >= len(ids)), last]
            for task_id, (replaces, _ended_at) in zip(chunk, rows):
                keys += [k.task(task_id), k.task(replaces or task_id)]
                args += [task_id, replaces or "", "1" if task_id in retried else ""]
            counted += int(store.scripts.layout_2(keys=keys, args=args))
        jobs += 1
    return {"jobs": jobs, "ended_tasks": counted}


STEPS = {2: _to_2}

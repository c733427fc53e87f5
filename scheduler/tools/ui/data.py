"""Every read and write of scheduler state the dashboard makes, in one place.

Each function takes an :class:`App` (one namespace of one Redis) and returns model
objects (:class:`Node`, :class:`Task`) or the small views below; task hashes become
:class:`Task` values as soon as they are read. The rest of the dashboard never touches
Redis, keys or the store, so this module is the one to adapt when the store changes.

Writes go through the same functions the CLI uses: ``Store.set_availability`` and
``reconcile.drain_node``, ``reconcile.scale`` and ``reconcile.stop``.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import AsyncIterator

import anyio
import orjson
import redis.asyncio

from scheduler.control import reconcile
from scheduler.model import DRAIN, PENDING, TASK_STATES, Node, Task
from scheduler.state.app import App
from scheduler.state.connection import time_ms
from scheduler.state.keys import Keys

NAMESPACES_TTL_S = 10.0  # the namespace list costs a SCAN of the whole keyspace: reuse it this long
REGISTRY = "sched:namespaces"  # a SET of namespace names, used when it exists
OUTPUT_LIMIT = 65_536  # characters of a task's stdout, stderr or result shown


@dataclass
class JobView:
    id: str
    type: str
    status: str
    priority: int
    replicas: int | None  # None for a global job (one task per eligible node)
    version: int
    created_ms: int
    spec: dict
    counts: dict[str, int] = field(default_factory=dict)  # task state -> tasks, every state present

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Overview:
    nodes: list[Node]
    queues: dict[str, int]
    placed: int  # the workers' `placed` counter (stats hash)
    now_ms: int  # Redis TIME when it was read, to turn two readings into a rate
    jobs: list[JobView]


@dataclass
class TaskView:
    task: Task
    message: str  # why it is where it is, in words
    nodes_evaluated: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> nodes, for a pending task
    preemption: str = ""
    output: dict[str, str] | None = None  # stdout, stderr, result; None when nothing was captured
    truncated: bool = False


# ----------------------------------------------------------------------------- namespaces
def namespace_app(app: App, namespace: str) -> App:
    """The App for another namespace of the same Redis, sharing the connection."""
    if namespace == app.keys.namespace:
        return app
    return _namespace_app(app, namespace)


@lru_cache(maxsize=64)
def _namespace_app(app: App, namespace: str) -> App:
    return App(redis_url=app.url, namespace=namespace, client=app.client)


_namespaces_seen: dict[int, tuple[float, list[str]]] = {}


def namespaces(app: App) -> list[str]:
    """Namespaces that hold jobs or nodes (from a SCAN of ``sched:{*}:jobs`` and
    ``sched:{*}:nodes``), or the registry set ``sched:namespaces`` when it exists; the
    App's own namespace always. Kept for a few seconds, as the SCAN walks every key."""
    now = time.monotonic()
    cached = _namespaces_seen.get(id(app))
    if cached and now - cached[0] < NAMESPACES_TTL_S:
        return cached[1]
    client = app.client
    found = {app.keys.namespace}
    registered = client.smembers(REGISTRY) if client.type(REGISTRY) == "set" else set()
    if registered:
        found |= registered
    else:
        for pattern in ("sched:{*}:jobs", "sched:{*}:nodes"):
            for key in client.scan_iter(match=pattern, count=1000):
                found.add(key[len("sched:{"):key.rfind("}:")])
    names = sorted(name for name in found if _valid_namespace(name))
    _namespaces_seen[id(app)] = (now, names)
    return names


def _valid_namespace(name: str) -> bool:
    try:
        Keys(name)
    except ValueError:
        return False
    return name.isprintable()


# ----------------------------------------------------------------------------- reads
def overview(app: App) -> Overview:
    store = app.store
    with app.client.pipeline(transaction=False) as pipe:
        pipe.hget(app.keys.stats, "placed")
        pipe.time()
        placed, now = pipe.execute()
    return Overview(nodes=store.nodes(), queues=app.queue.counts(), placed=int(placed or 0), now_ms=time_ms(now),
                    jobs=jobs(app))


def nodes(app: App) -> list[tuple[Node, list[str]]]:
    """Every node with the ids of the tasks live on it."""
    found = app.store.nodes()
    with app.client.pipeline(transaction=False) as pipe:
        for node in found:
            pipe.smembers(app.keys.node_tasks(node.name))
        task_sets = pipe.execute()
    return [(node, sorted(ids, key=_task_order)) for node, ids in zip(found, task_sets)]


def node(app: App, name: str) -> tuple[Node, list[Task]]:
    """One node and its live tasks; NotFound if there is no such node."""
    store = app.store
    found = store.get_node(name)
    return found, _tasks(app, sorted(store.node_task_ids(name), key=_task_order))


def jobs(app: App) -> list[JobView]:
    """Every job with its tasks counted by state: two pipelined round trips in all."""
    k = app.keys
    ids = app.store.job_ids()
    with app.client.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hmget(k.job(job_id), "version", "status", "created", "spec")
            pipe.zrange(k.job_tasks(job_id), 0, -1)
        replies = pipe.execute()
    views, task_ids = [], []
    for job_id, (version, status, created, spec), ids_of_job in zip(ids, replies[::2], replies[1::2]):
        if spec is None:
            continue  # removed between the two reads
        views.append(_job_view(job_id, version, status, created, orjson.loads(spec)))
        task_ids.append(ids_of_job)
    with app.client.pipeline(transaction=False) as pipe:
        for ids_of_job in task_ids:
            for task_id in ids_of_job:
                pipe.hget(k.task(task_id), "state")
        states = iter(pipe.execute())
    for view, ids_of_job in zip(views, task_ids):
        for _ in ids_of_job:
            state = next(states)
            if state in view.counts:
                view.counts[state] += 1
    return views


def job(app: App, job_id: str) -> tuple[JobView, list[Task]]:
    """One job and all its tasks, in index order; NotFound if there is no such job."""
    store = app.store
    found = store.get_job(job_id)
    tasks = _tasks(app, store.job_task_ids(job_id))
    view = _job_view(job_id, found["version"], found["status"], found["created"], found["spec"])
    for task in tasks:
        if task.state in view.counts:
            view.counts[task.state] += 1
    return view, tasks


def task(app: App, task_id: str) -> TaskView:
    """One task, why it is where it is, and its captured output; NotFound if none."""
    found = Task.from_hash(app.store.get_task(task_id))
    raw_output = app.client.hgetall(app.keys.task(task_id) + ":output")
    view = TaskView(task=found, message="")
    if raw_output:
        view.output = {}
        for name in ("stdout", "stderr", "result"):
            text = raw_output.get(name, "")
            view.truncated |= len(text) > OUTPUT_LIMIT
            view.output[name] = text[:OUTPUT_LIMIT]
    # The last attempt's explanation matters only while the task is still pending (as in `sched task explain`).
    explanation = orjson.loads(found.explanation) if found.explanation and found.state == PENDING else None
    if explanation:
        view.message = explanation.get("message", "")
        view.nodes_evaluated = int(explanation.get("nodes_evaluated", 0))
        view.reasons = dict(sorted(explanation.get("reasons", {}).items(), key=lambda item: (-item[1], item[0])))
        view.preemption = explanation.get("preemption", "")
    elif found.live:
        view.message = f"placed on node {found.node}."
    elif found.state == PENDING:
        view.message = "waiting for a scheduler worker; no attempt has been made yet."
    else:
        view.message = found.message or f"{found.state}."
    return view


def _tasks(app: App, task_ids: list[str]) -> list[Task]:
    return [Task.from_hash(fields) for fields in app.store.tasks(task_ids)]


def _job_view(job_id: str, version, status, created, spec: dict) -> JobView:
    return JobView(id=job_id, type=spec.get("type", ""), status=status or reconcile.RUNNING_JOB,
                   priority=int(spec.get("priority", 0)), replicas=spec.get("replicas"), version=int(version or 0),
                   created_ms=int(created or 0), spec=spec, counts=dict.fromkeys(TASK_STATES, 0))


def _task_order(task_id: str):
    job_id, _, index = task_id.rpartition(".")
    return (job_id, int(index) if index.isdigit() else 0)


# ----------------------------------------------------------------------------- writes
def set_availability(app: App, name: str, availability: str) -> dict:
    """Pause, drain or activate a node (as `sched node pause/drain/activate`); a drain
    also moves its tasks elsewhere. NotFound if there is no such node."""
    before = app.store.set_availability(name, availability)
    moved = reconcile.drain_node(app.store, name) if availability == DRAIN else []
    return {"node": name, "before": before, "availability": availability, "moved": moved}


def scale(app: App, job_id: str, replicas: int) -> dict:
    return reconcile.scale(app.store, job_id, replicas)


def stop(app: App, job_id: str) -> dict:
    return reconcile.stop(app.store, job_id)


# ----------------------------------------------------------------------------- events
class Events:
    """A subscription to a namespace's events channel (see docs/events.md)."""

    def __init__(self, pubsub):
        self._pubsub = pubsub

    async def next(self, timeout: float) -> dict | None:
        """The next event, or None when none came within ``timeout`` seconds. The wait is
        a blocking read on the subscribed connection: nothing is asked of Redis meanwhile."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is None or message.get("type") != "message":
                continue
            try:
                event = orjson.loads(message["data"])
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict):
                return event
        return None


@asynccontextmanager
async def subscribe(app: App) -> AsyncIterator[Events]:
    """Subscribed to the App's events channel (``sched:{ns}:events``) for the duration of
    the ``async with``, on a connection of its own (an asyncio client, made on the loop
    that uses it). The connection is closed on the way out, even when cancelled."""
    client = redis.asyncio.Redis.from_url(app.url, decode_responses=True)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(app.keys.events)
        yield Events(pubsub)
    finally:
        with anyio.CancelScope(shield=True):
            await pubsub.aclose()
            await client.aclose()

"""Reading and writing nodes, jobs and tasks in Redis.

Hashes are kept flat and readable (``redis-cli HGETALL sched:{default}:node:n1`` shows
``cap:cpu``, ``alloc:cpu``, ``port:8080``...). Every change that must be atomic with the
queue or the tallies goes through a Lua script; simple writes use MULTI transactions.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import orjson
import redis

from scheduler.model.errors import NotFound, SpecError
from scheduler.state.connection import time_ms
from scheduler.state.keys import Keys
from scheduler.model import (ACTIVE, AVAILABILITIES, DOWN, LIVE_STATES, READY, STOPPED, JobSpec, Node,
                    Nomination, check_job_id, check_node_name, parse_job)
from scheduler.state.scripts import Scripts

_DESCRIPTION = ("hostname", "role", "os", "arch")


def parse_allocation(text: str) -> dict[str, int]:
    """``cpu=500,memory=268435456`` (as commit.lua records it) -> a resources dict."""
    out = {}
    for pair in filter(None, (text or "").split(",")):
        name, _, amount = pair.partition("=")
        out[name] = int(amount)
    return out


def reservation(job: JobSpec) -> str:
    """What a nomination holds for a preemptor of ``job``: ``priority|job|cpu=500,...|8080,...``."""
    alloc = ",".join(f"{name}={amount}" for name, amount in job.resources.items() if amount > 0)
    return f"{job.priority}|{job.id}|{alloc}|{','.join(str(p) for p in job.ports)}"


def nomination_value(held: str, expires_ms: int) -> str:
    """A node hash's ``nom:<task>`` value (preempt.lua writes it, commit.lua reads it):
    the reservation with its expiry after the priority."""
    priority, rest = held.split("|", 1)
    return f"{priority}|{expires_ms}|{rest}"


def parse_nomination(task_id: str, value: str) -> Nomination:
    priority, expires, job, alloc, ports = value.split("|")
    return Nomination(task_id=task_id, job=job, priority=int(priority), expires_ms=int(expires),
                      resources=parse_allocation(alloc), ports=tuple(int(p) for p in filter(None, ports.split(","))))


def node_from_hash(fields: dict[str, str]) -> Node:
    """Decode a node hash (see :func:`node_fields`) into a :class:`Node`."""
    capacity, allocated, ports, nominations = {}, {}, {}, {}
    for field, value in fields.items():
        if field.startswith("cap:"):
            capacity[field[4:]] = int(value)
        elif field.startswith("alloc:"):
            allocated[field[6:]] = int(value)
        elif field.startswith("port:"):
            ports[int(field[5:])] = value
        elif field.startswith("nom:"):
            nominations[field[4:]] = parse_nomination(field[4:], value)
    return Node(
        name=fields["name"],
        capacity=capacity,
        allocated=allocated,
        labels=orjson.loads(fields.get("labels", "{}")),
        engine_labels=orjson.loads(fields.get("engine_labels", "{}")),
        hostname=fields.get("hostname", ""),
        role=fields.get("role", "worker"),
        os=fields.get("os", "linux"),
        arch=fields.get("arch", "amd64"),
        plugins=frozenset(orjson.loads(fields.get("plugins", "[]"))),
        availability=fields.get("availability", ACTIVE),
        status=fields.get("status", READY),
        ports=ports,
        tasks=int(fields.get("tasks", 0)),
        nominations=nominations,
    )


def node_fields(node: Node) -> list[str]:
    """The description part of a node hash, as field/value pairs (capacity goes separately)."""
    out = []
    for name in _DESCRIPTION:
        out += [name, getattr(node, name)]
    out += ["labels", orjson.dumps(node.labels).decode(), "engine_labels", orjson.dumps(node.engine_labels).decode(),
            "plugins", orjson.dumps(sorted(node.plugins)).decode()]
    return out


class Store:
    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts | None = None):
        self.client = client
        self.keys = keys
        self.scripts = scripts or Scripts(client)

    # Nodes.
    def resource_names(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.resources))

    def put_node(self, node: Node) -> bool:
        """Register or update a node; returns True when it is new."""
        current = self.client.hgetall(self.keys.node(node.name))
        return bool(self.node_put(node, {f[4:] for f in current if f.startswith("cap:")}))

    def node_put(self, node: Node, previous_resources=frozenset(), client=None):
        """The ``node_put.lua`` call for ``node``; ``previous_resources`` are the ones the
        node had before (they lose their capacity if it no longer has them). ``client``
        may be a pipeline, to register many new nodes per round trip."""
        k = self.keys
        names = sorted(set(previous_resources) | set(node.capacity))
        args = [k.events, node.name, len(names)]
        for name in names:
            args += [name, node.capacity.get(name, "")]
        args += node_fields(node)
        return self.scripts.node_put(
            keys=[k.node(node.name), k.nodes, k.node_changes, k.node_seq, k.cycle, k.move_cycle, k.resources,
                  k.node_epoch, *(k.free(name) for name in names)],
            args=args, client=client)

    def get_node(self, name: str) -> Node:
        fields = self.client.hgetall(self.keys.node(name))
        if not fields:
            raise NotFound(f"node {name!r} does not exist.")
        return node_from_hash(fields)

    def node_names(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.nodes))

    def nodes(self, names: list[str] | None = None) -> list[Node]:
        names = self.node_names() if names is None else names
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.keys.node(name))
            replies = pipe.execute()
        return [node_from_hash(fields) for fields in replies if fields]

    def _set_node(self, name: str, field: str, value: str) -> str:
        k = self.keys
        check_node_name(name)
        before = self.scripts.node_set(keys=[k.node(name), k.node_changes, k.node_seq, k.cycle, k.move_cycle, k.node_epoch],
                                       args=[k.events, name, field, value])
        if before is None:
            raise NotFound(f"node {name!r} does not exist.")
        return before

    def set_availability(self, name: str, availability: str) -> str:
        if availability not in AVAILABILITIES:
            raise SpecError(f"availability {availability!r} is not one of {', '.join(AVAILABILITIES)}.")
        return self._set_node(name, "availability", availability)

    def set_status(self, name: str, status: str) -> str:
        if status not in (READY, DOWN):
            raise SpecError(f"status {status!r} is not one of ready, down.")
        return self._set_node(name, "status", status)

    def remove_node(self, name: str) -> None:
        k = self.keys
        check_node_name(name)
        result = self.scripts.node_rm(
            keys=[k.node(name), k.nodes, k.node_tasks(name), k.node_changes, k.node_seq, k.tally_tasks,
                  k.heartbeat(name), k.node_epoch, *(k.free(r) for r in self.resource_names())],
            args=[k.events, name])
        if result == 0:
            raise NotFound(f"node {name!r} does not exist.")
        if result == -1:
            raise SpecError(f"node {name!r} still runs tasks; drain it and wait for them to move first.")
        self.client.srem(k.agents, name)

    def unnominate(self, task_id: str, node: str) -> bool:
        """Release the room ``node`` holds for ``task_id`` (placed or nominated elsewhere)."""
        k = self.keys
        return bool(self.scripts.unnominate(keys=[k.node(node), k.node_changes, k.node_seq, k.task(task_id)],
                                            args=[task_id, node]))

    def node_task_ids(self, name: str) -> list[str]:
        return sorted(self.client.smembers(self.keys.node_tasks(name)))

    # Jobs.
    def get_job(self, job_id: str) -> dict:
        check_job_id(job_id)
        fields = self.client.hgetall(self.keys.job(job_id))
        if not fields:
            raise NotFound(f"job {job_id!r} does not exist.")
        return {"id": job_id, "version": int(fields["version"]), "status": fields.get("status", "running"),
                "created": int(fields.get("created", 0)), "spec": orjson.loads(fields["spec"])}

    def job_ids(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.jobs))

    def job_spec(self, job_id: str, version: int | None = None) -> JobSpec:
        """The parsed spec of a job at a version (specs of old versions are kept per version)."""
        key = self.keys.job(job_id)
        field = "spec" if version is None else f"spec:{version}"
        raw = self.client.hget(key, field)
        if raw is None:
            raise NotFound(f"job {job_id!r} (version {version}) does not exist.")
        return parse_stored(raw)

    def enqueue(self, job_id: str, read: str, job_fields: dict, version: int, priority: int, first_index: int,
                count: int, *, pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0,
                is_global: bool = False) -> int | None:
        """``enqueue.lua``: write ``job_fields`` to the job's hash and queue ``count`` new
        pending tasks (``<job>.<first_index + i>``), created now (Redis TIME), if the job is
        still as ``read`` (:func:`job_state`; "" = it must not exist). ``pins`` fixes each
        task to one node (global jobs); ``delay_ms`` starts them in backoff (restart delay);
        ``retries`` counts how many tasks ran before them in the same slot. Returns the
        creation time (ms), or None when the job changed since it was read."""
        k = self.keys
        args = [read, k.events, job_id, version, priority, first_index, delay_ms, retries, int(is_global),
                len(job_fields)]
        for field, value in job_fields.items():
            args += [field, value]
        args += pins or []
        reply = self.scripts.enqueue(
            keys=[k.job(job_id), k.jobs, k.global_jobs, k.active, k.backoff, k.job_tasks(job_id), k.enqueue_seq,
                  *(k.task(f"{job_id}.{first_index + i}") for i in range(count))],
            args=args)
        return int(reply[1]) if reply[0] else None

    def now_ms(self) -> int:
        return time_ms(self.client.time())

    # Tasks.
    def get_task(self, task_id: str) -> dict:
        fields = self.client.hgetall(self.keys.task(task_id))
        if not fields:
            raise NotFound(f"task {task_id!r} does not exist.")
        return fields

    def tasks(self, task_ids: list[str]) -> list[dict]:
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hgetall(self.keys.task(task_id))
            return [fields for fields in pipe.execute() if fields]

    def job_task_ids(self, job_id: str) -> list[str]:
        return self.client.zrange(self.keys.job_tasks(job_id), 0, -1)

    def all_task_ids(self) -> list[str]:
        ids: list[str] = []
        for job_id in self.job_ids():
            ids += self.job_task_ids(job_id)
        return ids

    def finish(self, tasks: list[dict], state: str, message: str = "") -> list[str]:
        """End tasks (read with :meth:`tasks`) in ``state``: pending ones leave the queue, live
        ones give their resources back. Returns, per task, what finish.lua reported."""
        k = self.keys
        resources = self.resource_names()
        keys = [k.active, k.backoff, k.unschedulable, k.inflight, k.leases, k.tally_tasks, k.node_changes,
                k.node_seq, k.cycle, k.move_cycle, k.tally_priority, *(k.free(r) for r in resources)]
        args = [k.events, len(resources), *resources]
        for task in tasks:
            node = task.get("node", "") if task.get("state") in LIVE_STATES else ""
            keys += [k.task(task["id"]), k.node(node), k.node_tasks(node), k.tally_job(task["job"])]
            args += [task["id"], state, message, node]
        return self.scripts.finish(keys=keys, args=args) if tasks else []

    def finish_ids(self, task_ids: list[str], state: str = STOPPED, message: str = "", attempts: int = 3) -> dict:
        """End tasks by id, re-reading any that were placed while we looked."""
        outcome: dict[str, str] = {}
        pending = list(task_ids)
        for _ in range(attempts):
            tasks = self.tasks(pending)
            results = self.finish(tasks, state, message)
            pending = []
            for task, result in zip(tasks, results):
                if result == "elsewhere":
                    pending.append(task["id"])
                else:
                    outcome[task["id"]] = result
            if not pending:
                break
        return outcome


@lru_cache(maxsize=4096)
def parse_stored(raw: str) -> JobSpec:
    """A spec as stored (normalised JSON, ``id`` first). Jobs made from one template differ
    only in their id, so the rest of the text is parsed and validated once and shared."""
    head, comma, rest = raw.partition('",')
    if comma and head.startswith('{"id":"'):
        job_id = head[7:]
        try:
            template = _parse_without_id(rest)
        except SpecError:
            pass  # parsed in full below, so the error names this job
        else:
            return dataclasses.replace(template, id=job_id, raw={**template.raw, "id": job_id})
    return parse_job(orjson.loads(raw))


@lru_cache(maxsize=1024)
def _parse_without_id(rest: str) -> JobSpec:
    return parse_job(orjson.loads('{"id":"x",' + rest))

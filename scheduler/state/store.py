"""Reading and writing nodes, jobs and tasks in Redis.

Hashes are kept flat and readable (``redis-cli HGETALL sched:{default}:node:n1`` shows
``cap:cpu``, ``alloc:cpu``, ``port:8080``...). Every change that must be atomic with the
queue or the tallies goes through a Lua script; simple writes use MULTI transactions.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from functools import lru_cache

import orjson
import redis
from redis.exceptions import NoScriptError

from scheduler.model.errors import NotFound, RedisUnavailable, SpecError
from scheduler.model.names import is_job_id
from scheduler.state.connection import time_ms
from scheduler.state.keys import Keys
from scheduler.model import (ACTIVE, AVAILABILITIES, DOWN, LIVE_STATES, READY, STOPPED, JobSpec, Node, Nomination, Task,
                             check_job_id, check_node_name, parse_allocation, parse_job)
from scheduler.state.events import Subscription
from scheduler.state.scripts import Scripts

ENQUEUE_CHUNK = 500  # tasks per enqueue.lua call: each call takes a few ms (docs/reliability.md)
_PIPELINED = 4  # enqueue_many.lua calls per round trip
_DESCRIPTION = ("hostname", "role", "os", "arch")


def reservation(job: JobSpec) -> str:
    """What a nomination holds for a preemptor of ``job``: ``priority|job|cpu=500,...|8080,...``."""
    alloc = ",".join(f"{name}={amount}" for name, amount in job.resources.items() if amount > 0)
    return f"{job.priority}|{job.id}|{alloc}|{','.join(str(p) for p in job.ports)}"


def shares_value(spec: JobSpec) -> str:
    """A job's ``jobs:shares`` entry (what claim.lua needs): ``tenant|gang size|cpu=500,...``."""
    needs = ",".join(f"{r}={a}" for r, a in spec.resources.items() if a > 0)
    return f"{spec.tenant}|{spec.gang}|{needs}"


def _chunks(jobs: list[tuple[str, JobSpec]], limit: int):
    """(job id, spec) pairs in runs of at most ``limit`` tasks and ``limit`` jobs (a job of
    more than ``limit`` tasks alone)."""
    chunk: list[tuple[str, JobSpec]] = []
    tasks = 0
    for job in jobs:
        replicas = job[1].replicas
        if chunk and (tasks + replicas > limit or len(chunk) >= limit):
            yield chunk
            chunk, tasks = [], 0
        chunk.append(job)
        tasks += replicas
    if chunk:
        yield chunk


def _text_after_id(spec: JobSpec) -> str:
    """The stored spec text (normalised JSON, ``id`` first) after ``{"id":"<id>``: what
    jobs that differ only in their id share (enqueue_many.lua puts each id in front)."""
    text = orjson.dumps(spec.raw).decode()
    head = '{"id":"' + spec.id
    if not text.startswith(head + '"'):
        raise ValueError(f"job {spec.id}: its stored spec does not start with its id.")
    return text[len(head):]


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
        kind = field[:4]
        if kind == "cap:":
            capacity[field[4:]] = int(value)
        elif kind == "allo":
            allocated[field[6:]] = int(value)
        elif kind == "port":
            ports[int(field[5:])] = value
        elif kind == "nom:":
            nominations[field[4:]] = parse_nomination(field[4:], value)
    get = fields.get
    return Node(
        name=fields["name"],
        capacity=capacity,
        allocated=allocated,
        labels=_decoded(get("labels", "{}")),
        engine_labels=_decoded(get("engine_labels", "{}")),
        hostname=get("hostname", ""),
        role=get("role", "worker"),
        os=get("os", "linux"),
        arch=get("arch", "amd64"),
        plugins=_decoded(get("plugins", "[]"), frozenset),
        availability=get("availability", ACTIVE),
        status=get("status", READY),
        ports=ports,
        tasks=int(get("tasks", 0)),
        nominations=nominations,
    )


@lru_cache(maxsize=10_000)  # nodes share a few label and plugin texts
def _decoded(text: str, kind=None):
    """``text`` (JSON) decoded, made ``kind`` if given; the same object for the same text,
    so it must not be changed (nothing changes a node's labels or plugins in place)."""
    value = orjson.loads(text)
    return value if kind is None else kind(value)


def node_fields(node: Node) -> list[str]:
    """The description part of a node hash, as field/value pairs (capacity goes separately)."""
    out = []
    for name in _DESCRIPTION:
        out += [name, getattr(node, name)]
    out += ["labels", orjson.dumps(node.labels).decode(), "engine_labels", orjson.dumps(node.engine_labels).decode(),
            "plugins", orjson.dumps(sorted(node.plugins)).decode()]
    return out


@dataclasses.dataclass
class Tallies:
    """What the scripts keep beside the tasks, read at once (for checking them against
    the tasks: see ``scheduler.control.audit``)."""

    queues: dict[str, set[str]]  # active, backoff, unschedulable, inflight -> task ids
    node_tasks: dict[str, set[str]]  # node -> its task set
    priority: dict[int, int]  # tally:priority
    jobs: dict[str, dict[str, int]]  # job -> tally:job, node -> live tasks


NAMESPACE_REGISTRY = "sched:namespaces"  # SET of namespace names, when kept


@dataclasses.dataclass
class JobSummary:
    id: str
    version: int
    status: str
    created_ms: int
    spec: dict
    task_states: list[str]


class Store:
    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts | None = None):
        self.client = client
        self.keys = keys
        self.scripts = scripts or Scripts(client)
        self._registered = False  # the namespace is in sched:namespaces (as far as this Store knows)

    def register_namespace(self) -> None:
        """Add the namespace to the registry ``sched:namespaces`` (once per Store), so that
        workers serving every cell (``sched worker --all-namespaces``) find it. The registry
        is a key of its own slot on a cluster, hence a command of its own, not in a script."""
        if not self._registered:
            self.client.sadd(NAMESPACE_REGISTRY, self.keys.namespace)
            self._registered = True

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
        self.register_namespace()
        k = self.keys
        names = sorted(set(previous_resources) | set(node.capacity))
        args = [k.events, node.name, len(names)]
        for name in names:
            args += [name, node.capacity.get(name, "")]
        args += node_fields(node)
        return self.scripts.node_put(
            keys=[k.node(node.name), k.nodes, k.node_changes, k.node_seq, k.cycle, k.move_cycle, k.resources,
                  k.node_epoch],
            args=args, client=client)

    def put_new_nodes(self, nodes: list[Node], chunk: int = 1000, advance=None) -> None:
        """Register nodes that do not exist yet, ``chunk`` per round trip: the same script
        call as :meth:`put_node`, without first reading each node. ``advance(n)`` is called
        after each chunk (a progress bar)."""
        with self.client.pipeline(transaction=False) as pipe:
            for i in range(0, len(nodes), chunk):
                part = nodes[i:i + chunk]
                for node in part:
                    self.node_put(node, client=pipe)
                pipe.execute()
                if advance:
                    advance(len(part))

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
            keys=[k.node(name), k.nodes, k.node_tasks(name), k.node_changes, k.node_seq,
                  k.heartbeat(name), k.node_epoch],
            args=[k.events, name])
        if result == 0:
            raise NotFound(f"node {name!r} does not exist.")
        if result == -1:
            raise SpecError(f"node {name!r} still runs tasks; drain it and wait for them to move first.")
        self.forget_agent(name)

    # Preemption.
    def live_priorities(self) -> dict[int, int]:
        """Priority -> how many live tasks have it (``tally:priority``)."""
        return {int(p): int(n) for p, n in self.client.hgetall(self.keys.tally_priority).items()}

    def live_tasks_on(self, nodes: list[str]) -> dict[str, list[Task]]:
        """The live tasks on each of ``nodes``, by task id."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for name in nodes:
                pipe.smembers(k.node_tasks(name))
            members = pipe.execute()
        ids = [(name, task_id) for name, names in zip(nodes, members) for task_id in sorted(names)]
        with self.client.pipeline(transaction=False) as pipe:
            for _, task_id in ids:
                pipe.hgetall(k.task(task_id))
            rows = pipe.execute()
        out: dict[str, list[Task]] = {}
        for (name, _), fields in zip(ids, rows):
            if fields and fields.get("state") in LIVE_STATES:
                out.setdefault(name, []).append(Task.from_hash(fields))
        return out

    def preempt(self, token: str, task_id: str, node: str, nomination_ms: int, held: str,
                victims: list[tuple[str, str, dict[str, int]]]) -> str:
        """``preempt.lua``: end ``victims`` (task id, job, resources) on ``node`` as
        preempted and send the claimed ``task_id`` back to the active queue nominated to
        the node, with ``held`` (:func:`reservation`) held for it for ``nomination_ms``.
        Returns "ok" or why not."""
        k = self.keys
        return self.scripts.preempt(
            keys=[k.inflight, k.leases, k.active, k.node_changes, k.node_seq, k.task(task_id),
                  k.node(node), k.node_tasks(node), k.tally_priority,
                  *(key for victim, job, _ in victims for key in (k.task(victim), k.tally_job(job))), k.usage],
            args=[token, k.events, task_id, node, nomination_ms, held, *(victim for victim, _, _ in victims)])

    def preempt_gang(self, token: str, gang: str, members: list[tuple[str, str]], nomination_ms: int, held: str,
                     victims: list[tuple[str, str, str, dict[str, int]]]) -> str:
        """``preempt_gang.lua``: all or nothing, end ``victims`` (task id, job, node,
        resources) as preempted and send every claimed member (task id, node) of the gang
        ``gang`` back to the active queue nominated to its node, with ``held``
        (:func:`reservation`) held for each for ``nomination_ms``. Returns "ok" or why not
        (then nothing was changed)."""
        k = self.keys
        return self.scripts.preempt_gang(
            keys=[k.inflight, k.leases, k.active, k.node_changes, k.node_seq, k.tally_priority, k.usage,
                  *(key for task_id, node in members for key in (k.task(task_id), k.node(node), k.node_tasks(node))),
                  *(key for victim, job, _, _ in victims for key in (k.task(victim), k.tally_job(job)))],
            args=[token, k.events, nomination_ms, held, gang, len(members),
                  *(x for member in members for x in member), *(x for v, _, node, _ in victims for x in (v, node))])

    def tallies(self, nodes: list[str], jobs: list[str]) -> Tallies:
        k = self.keys
        queues = ("active", "backoff", "unschedulable", "inflight")
        with self.client.pipeline(transaction=False) as pipe:
            for name in queues:
                pipe.zrange(getattr(k, name), 0, -1)
            for name in nodes:
                pipe.smembers(k.node_tasks(name))
            pipe.hgetall(k.tally_priority)
            for job_id in jobs:
                pipe.zrange(k.tally_job(job_id), 0, -1, withscores=True)
            replies = iter(pipe.execute())
        return Tallies(
            queues={name: set(next(replies)) for name in queues},
            node_tasks={name: set(next(replies)) for name in nodes},
            priority={int(p): int(c) for p, c in next(replies).items()},
            jobs={job_id: {n: int(c) for n, c in next(replies)} for job_id in jobs})

    # Agents and their heartbeats.
    def beat(self, name: str, ttl_ms: int) -> str | None:
        """Write the agent's heartbeat (it lapses after ``ttl_ms``) and count the node as
        agent-run; returns the node's status before."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(k.heartbeat(name), self.now_ms(), px=ttl_ms)
            pipe.sadd(k.agents, name)
            pipe.hget(k.node(name), "status")
            pipe.hset(k.agent_ttls, name, ttl_ms)
            return pipe.execute()[2]

    def agent_liveness(self) -> tuple[int, list[tuple[str, bool, str | None, int]]]:
        """Redis TIME (ms), and (node, heartbeat still there, status, heartbeat TTL in ms)
        for every agent-run node."""
        k = self.keys
        now = self.now_ms()  # apart: a cluster pipeline carries only commands with keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.smembers(k.agents)
            pipe.hgetall(k.agent_ttls)
            members, ttls = pipe.execute()
        names = sorted(members)
        if not names:
            return now, []
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.exists(k.heartbeat(name))
                pipe.hget(k.node(name), "status")
            replies = pipe.execute()
        return now, [(name, bool(replies[2 * i]), replies[2 * i + 1], int(ttls.get(name, 0)))
                     for i, name in enumerate(names)]

    def forget_agent(self, name: str) -> None:
        """The node no longer has an agent: its heartbeat lapsing no longer takes it down."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.srem(self.keys.agents, name)
            pipe.hdel(self.keys.agent_ttls, name)
            pipe.execute()

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

    def job_fields(self, job_id: str) -> dict[str, str]:
        """The job's hash as stored (empty when there is no such job)."""
        return self.client.hgetall(self.keys.job(job_id))

    def set_job_status(self, job_id: str, status: str) -> None:
        self.client.hset(self.keys.job(job_id), "status", status)

    def job_ids(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.jobs))

    def job_tally(self, job_id: str) -> dict[str, int]:
        """Node -> the job's live tasks there (``tally:job:<id>``)."""
        return {name: int(n) for name, n in self.client.zrange(self.keys.tally_job(job_id), 0, -1, withscores=True)}

    def global_job_ids(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.global_jobs))

    def record_fault(self, job_id: str, node: str, task_id: str, version: int, window_ms: int) -> None:
        """A task of the job's ``version`` failed on ``node``: it counts towards "faulty"
        for ``window_ms``, while the job stays at that version (``tallies.lua``)."""
        faults, now = self.keys.faults(job_id), self.now_ms()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(faults, {f"{node}|{task_id}|{version}": now})
            pipe.zremrangebyscore(faults, "-inf", now - window_ms)  # older ones no longer count
            pipe.execute()

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
                is_global: bool = False, shares: str = "") -> int | None:
        """``enqueue.lua``: write ``job_fields`` to the job's hash and queue ``count`` new
        pending tasks (``<job>.<first_index + i>``), created now (Redis TIME), if the job is
        still as ``read`` (:func:`job_state`; "" = it must not exist). ``pins`` fixes each
        task to one node (global jobs); ``delay_ms`` starts them in backoff (restart delay);
        ``retries`` counts how many tasks ran before them in the same slot; ``shares``, if
        given, is written as the job's ``jobs:shares`` entry (:meth:`mark_job`) with its
        hash. Returns the creation time (ms), or None when the job changed since it was read.

        No call blocks Redis for long: the first call (job hash and the first
        ``ENQUEUE_CHUNK`` tasks) is the compare-and-set; the other tasks follow in fill
        calls of a chunk each (:meth:`enqueue_fill`), which stop early if the job is
        stopped or replaced meanwhile. The first call is never resent after a timeout
        or a lost connection (it may have been applied): that is one sentence,
        :class:`RedisUnavailable`. Fill calls are idempotent, so they are resent."""
        self.register_namespace()
        k = self.keys
        head = min(count, ENQUEUE_CHUNK)
        mark = None
        if count > head and not pins:
            # The fill calls may never come (the submitter dies): the mark lets any worker
            # create the rest (complete_fills). Global jobs' tasks are reconciled anyway.
            mark = f"filling:{version}:{first_index}"
            job_fields = {**job_fields, mark: f"{count}|{priority}|{delay_ms}|{retries}"}
            self.client.zadd(k.filling, {job_id: self.now_ms()})
        args = [read, k.events, job_id, version, priority, first_index, delay_ms, retries, int(is_global), shares,
                len(job_fields)]
        for field, value in job_fields.items():
            args += [field, value]
        args += (pins or [])[:head]
        try:
            reply = self.scripts.enqueue(keys=self._enqueue_keys(job_id, first_index, head), args=args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(
                f"Redis did not answer while job {job_id!r} was being written ({str(exc).rstrip('.')}); it may or "
                f"may not have been applied: look with `sched job show {job_id}`.") from None
        if not reply[0]:
            return None
        for offset in range(head, count, ENQUEUE_CHUNK):
            size = min(ENQUEUE_CHUNK, count - offset)
            chunk_pins = pins[offset:offset + size] if pins else None
            if self.enqueue_fill(job_id, version, priority, first_index + offset, size, pins=chunk_pins,
                                 delay_ms=delay_ms, retries=retries) is None:
                break  # stopped or replaced meanwhile: its newer state decides
        if mark is not None:
            self.filled(job_id, mark)
        return int(reply[1])

    def filled(self, job_id: str, mark: str | None) -> None:
        """The tasks that ``mark`` (a ``filling:<version>:<first index>`` field; None: the
        submit's first call never landed) stood for exist, or no longer need to: drop it,
        and the job from ``jobs:filling`` if it was its last."""
        k = self.keys
        if mark is not None:
            self.client.hdel(k.job(job_id), mark)
        if not any(field.startswith("filling:") for field in self.client.hkeys(k.job(job_id))):
            self.client.zrem(k.filling, job_id)

    def unfinished_fills(self, before_ms: int) -> dict[str, dict[str, str]]:
        """Jobs whose submit began queueing before ``before_ms`` and has not finished:
        job id -> its ``filling:*`` fields (none if the first call never landed)."""
        k = self.keys
        ids = self.client.zrangebyscore(k.filling, "-inf", before_ms)
        if not ids:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(k.job(job_id))
            rows = pipe.execute()
        return {job_id: {f: v for f, v in row.items() if f.startswith("filling:") or f in ("status", "version")}
                for job_id, row in zip(ids, rows)}

    def enqueue_fill(self, job_id: str, version: int, priority: int, first_index: int, count: int, *,
                     pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0,
                     attempts: int = 5) -> int | None:
        """One fill call of ``enqueue.lua``: create the tasks ``<job>.<first_index + i>``
        (``count`` <= a chunk) that do not exist yet, if the job is still running at
        ``version``. Idempotent, so resent (``attempts`` times) after a timeout or a lost
        connection. Returns how many tasks it created, or None if the job changed."""
        k = self.keys
        args = [f"={version}", k.events, job_id, version, priority, first_index, delay_ms, retries, 0, "", 0,
                *(pins or [])]
        keys = self._enqueue_keys(job_id, first_index, count)
        reply = _resending(lambda: self.scripts.enqueue(keys=keys, args=args), attempts, lambda exc: RedisUnavailable(
            f"Redis did not answer while the tasks of job {job_id!r} from index {first_index} were being "
            f"queued ({str(exc).rstrip('.')}); the job has fewer tasks than it asks for."))
        return int(reply[2]) if reply[0] else None

    def enqueue_many(self, jobs: list[tuple[str, JobSpec]], attempts: int = 5) -> list[bool]:
        """``enqueue_many.lua``: create new jobs (version 1) with their pending tasks, many
        per call, up to ``ENQUEUE_CHUNK`` tasks (and at most that many jobs) per call; each
        job only if it does not exist yet. ``jobs`` are (job id, spec) pairs: the spec may
        be one shared by jobs that differ only in their id (its own id is then ignored), and
        runs of jobs sharing a spec send its text once. Returns, per job in order, True when
        this created it, False when it existed (nothing written: submit it the ordinary
        way). Every job must have ``replicas`` <= ``ENQUEUE_CHUNK`` and not be global.

        The calls go from a sender thread, ``_PIPELINED`` per round trip (so that Redis has
        the next call at hand when one ends), while the next ones are laid out here. Each
        call is idempotent, so a round trip is resent (``attempts`` times) after a timeout
        or a lost connection (a resent call reports the jobs it had created as existing);
        if one fails for good, none after it is sent."""
        self.register_namespace()
        replies: list = []
        failure: list[BaseException] = []
        work: queue.Queue = queue.Queue(maxsize=2)

        def run(calls) -> list:
            for reloaded in (False, True):
                pipe = self.client.pipeline(transaction=False)
                for _first, _last, keys, args in calls:
                    self.scripts.queue(pipe, "enqueue_many", keys, args)
                try:
                    return pipe.execute()
                except NoScriptError:  # Redis lost its scripts (a restart): load them, send again
                    if reloaded:
                        raise
                    self.scripts.load_all()

        def send() -> None:
            while (calls := work.get()) is not None:
                if failure:
                    continue
                first, last = calls[0][0], calls[-1][1]
                try:
                    replies.extend(_resending(lambda: run(calls), attempts, lambda exc: RedisUnavailable(
                        f"Redis did not answer while jobs {first!r} to {last!r} were being written "
                        f"({str(exc).rstrip('.')}); the jobs before them were written, these may or may "
                        f"not have been, none after them was.")))
                except BaseException as exc:  # noqa: BLE001 (handed to the caller below)
                    failure.append(exc)

        sender = threading.Thread(target=send, name="enqueue_many", daemon=True)
        sender.start()
        try:
            calls = []
            for call in self._enqueue_many_calls(jobs):
                calls.append(call)
                if len(calls) == _PIPELINED:
                    if failure:
                        break
                    work.put(calls)
                    calls = []
            if calls and not failure:
                work.put(calls)
        finally:
            work.put(None)
            sender.join()
        if failure:
            raise failure[0]
        return [flag == 1 for reply in replies for flag in reply[1]]

    def _enqueue_many_calls(self, jobs: list[tuple[str, JobSpec]]):
        """(first job id, last job id, keys, args) of each ``enqueue_many.lua`` call."""
        k = self.keys
        fixed = [k.jobs, k.active, k.enqueue_seq, k.job_shares, k.wake]
        task_key = k.task
        rests: dict[int, str] = {}
        for chunk in _chunks(jobs, ENQUEUE_CHUNK):
            keys, args = list(fixed), [k.events, 0]
            shared, count_at = None, 0
            for job_id, spec in chunk:
                if spec is not shared:  # a new group: its spec text after the id, once
                    shared = spec
                    rest = rests.get(id(spec))
                    if rest is None:
                        rest = rests[id(spec)] = _text_after_id(spec)
                    args += [spec.priority, rest, shares_value(spec), spec.replicas, 0]
                    count_at = len(args) - 1
                    args[1] += 1
                args[count_at] += 1
                args.append(job_id)
                keys += [k.job(job_id), k.job_tasks(job_id)]
                keys += [task_key(f"{job_id}.{i}") for i in range(spec.replicas)]
            yield chunk[0][0], chunk[-1][0], keys, args

    def _enqueue_keys(self, job_id: str, first_index: int, count: int) -> list[str]:
        k = self.keys
        return [k.job(job_id), k.jobs, k.global_jobs, k.active, k.backoff, k.job_tasks(job_id), k.enqueue_seq,
                k.job_shares, k.wake, *(k.task(f"{job_id}.{first_index + i}") for i in range(count))]

    # Gangs, tenants and quotas.
    def mark_job(self, spec: JobSpec) -> None:
        """Record what claim.lua needs of a job: its tenant, gang size and one task's needs."""
        self.client.hset(self.keys.job_shares, spec.id, shares_value(spec))

    def quota(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.client.hgetall(self.keys.quota).items()}

    def set_quota(self, limits: dict[str, int]) -> None:
        if limits:
            self.client.hset(self.keys.quota, mapping={k: int(v) for k, v in limits.items()})

    def remove_quota(self) -> bool:
        return bool(self.client.delete(self.keys.quota))

    def usage(self) -> dict[str, int]:
        """The usage hash: namespace totals and ``tenant:<t>:<resource>``."""
        return {k: int(v) for k, v in self.client.hgetall(self.keys.usage).items()}

    def quota_and_usage(self) -> tuple[dict[str, int], dict[str, int]]:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.quota)
            pipe.hgetall(self.keys.usage)
            quota, usage = pipe.execute()
        return {k: int(v) for k, v in quota.items()}, {k: int(v) for k, v in usage.items()}

    def queue_quota_and_usage(self, pipe) -> None:
        pipe.hgetall(self.keys.quota)
        pipe.hgetall(self.keys.usage)

    @staticmethod
    def read_quota_and_usage(replies) -> tuple[dict[str, int], dict[str, int]]:
        quota, usage = replies
        return ({k: int(v) for k, v in quota.items()},
                {k: int(v) for k, v in usage.items() if not k.startswith("tenant:")})

    def tenant_weights(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.client.hgetall(self.keys.tenants).items()}

    def set_tenant_weight(self, tenant: str, weight: float) -> None:
        self.client.hset(self.keys.tenants, tenant, repr(float(weight)) if weight != int(weight) else int(weight))

    def remove_tenant(self, tenant: str) -> bool:
        return bool(self.client.hdel(self.keys.tenants, tenant))

    def quota_namespaces(self) -> list[str]:
        """Namespaces that have a quota (a SCAN: for ``sched quota ls``)."""
        found = set()
        for key in self.client.scan_iter(match="sched:{*}:quota", count=1000):
            found.add(key[len("sched:{"):-len("}:quota")])
        return sorted(found)

    def now_ms(self) -> int:
        return time_ms(self.client.time())

    # What a worker reads per batch.
    def claimed(self, task_ids: list[str]) -> list[list]:
        """``claimed.lua``: per claimed task, (job, version, pin, nominated node, the job's
        current spec text)."""
        k = self.keys
        return self.scripts.claimed(keys=[*(k.task(t) for t in task_ids),
                                          *(k.job(t.rpartition(".")[0]) for t in task_ids)])

    def created_ms(self, task_ids: list[str]) -> list[int]:
        """Each task's creation time (Redis ms; 0 if gone), in one pipelined round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hget(self.keys.task(task_id), "created")
            return [int(value or 0) for value in pipe.execute()]

    def queue_job_tallies(self, pipe, job_ids: list[str], faults_since_ms: int) -> None:
        """Queue ``tallies.lua`` on ``pipe`` (by SHA: see :meth:`Scripts.queue`): each job's
        tasks per node, and its failures per node since ``faults_since_ms`` by tasks of
        its current version. Read the reply with :meth:`read_job_tallies`."""
        k = self.keys
        keys = [key for job_id in job_ids for key in (k.tally_job(job_id), k.faults(job_id), k.job(job_id))]
        self.scripts.queue(pipe, "tallies", keys, [faults_since_ms])

    @staticmethod
    def read_job_tallies(job_ids: list[str], reply: list) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """(job -> node -> live tasks, job -> node -> recent failures of its current version,
        only for jobs with some)."""
        counts: dict[str, dict[str, int]] = {}
        faults: dict[str, dict[str, int]] = {}
        for i, job_id in enumerate(job_ids):
            flat = reply[2 * i]
            counts[job_id] = {flat[j]: int(float(flat[j + 1])) for j in range(0, len(flat), 2)}
            per_node: dict[str, int] = {}
            for entry in reply[2 * i + 1]:
                node = entry.split("|", 1)[0]
                per_node[node] = per_node.get(node, 0) + 1
            if per_node:
                faults[job_id] = per_node
        return counts, faults

    def node_epoch(self) -> str | None:
        return self.client.get(self.keys.node_epoch)

    def add_stats(self, counts: dict[str, int]) -> None:
        """Add to the shared ``stats`` counters (placed, refused, batches...)."""
        with self.client.pipeline(transaction=False) as pipe:
            for name, value in counts.items():
                pipe.hincrby(self.keys.stats, name, value)
            pipe.execute()

    def stats(self) -> dict[str, int]:
        return {name: int(value) for name, value in self.client.hgetall(self.keys.stats).items()}

    def node_task_sets(self, names: list[str]) -> list[set[str]]:
        """The ids of the tasks live on each of ``names``, in that order."""
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.smembers(self.keys.node_tasks(name))
            return pipe.execute()

    def job_summaries(self) -> list[JobSummary]:
        """Every job with the state of each of its tasks, in two pipelined round trips."""
        k = self.keys
        ids = self.job_ids()
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(k.job(job_id), "version", "status", "created", "spec")
                pipe.zrange(k.job_tasks(job_id), 0, -1)
            replies = pipe.execute()
        found, task_ids = [], []
        for job_id, (version, status, created, spec), ids_of_job in zip(ids, replies[::2], replies[1::2]):
            if spec is None:
                continue  # removed between the two reads
            found.append(JobSummary(job_id, int(version or 0), status or "running", int(created or 0),
                                    orjson.loads(spec), []))
            task_ids.append(ids_of_job)
        with self.client.pipeline(transaction=False) as pipe:
            for ids_of_job in task_ids:
                for task_id in ids_of_job:
                    pipe.hget(k.task(task_id), "state")
            states = iter(pipe.execute())
        for summary, ids_of_job in zip(found, task_ids):
            summary.task_states = [state for _ in ids_of_job if (state := next(states)) is not None]
        return found

    # The namespace as a whole.
    def ping(self) -> None:
        self.client.ping()

    def namespaces(self) -> set[str]:
        """The namespaces of this Redis: the registry ``sched:namespaces`` when it exists,
        else those holding jobs or nodes (a SCAN of every key)."""
        client = self.client
        registered = client.smembers(NAMESPACE_REGISTRY) if client.type(NAMESPACE_REGISTRY) == "set" else set()
        if registered:
            return set(registered)
        found = set()
        for pattern in ("sched:{*}:jobs", "sched:{*}:nodes"):
            for key in client.scan_iter(match=pattern, count=1000):
                found.add(key[len("sched:{"):key.rfind("}:")])
        return found

    def subscribe(self) -> Subscription:
        """Follow the namespace's events."""
        return Subscription(self.client, self.keys.events)

    def namespace_empty(self) -> bool:
        return next(self.client.scan_iter(match=f"{self.keys.prefix}*", count=1000), None) is None

    def clear_namespace(self) -> None:
        """Delete every key of the namespace (and its name from the registry)."""
        self.client.srem(NAMESPACE_REGISTRY, self.keys.namespace)
        self._registered = False
        batch = []
        for key in self.client.scan_iter(match=f"{self.keys.prefix}*", count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)

    def server_usage(self) -> dict:
        """The Redis server's memory in use (bytes) and CPU time so far (seconds)."""
        info = self.client.info()
        return {"used_memory": int(info["used_memory"]),
                "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"])}

    # Repair (scheduler.control.audit.repair): the bookkeeping rewritten from the tasks.
    def rewrite_bookkeeping(self, nodes: dict[str, dict], jobs: dict[str, dict[str, int]], priority: dict[int, int],
                            stale: dict[str, list[str]], requeue: list[tuple[str, int]],
                            lost: list[tuple[str, str]]) -> None:
        """Make the bookkeeping say what the tasks say, in one MULTI/EXEC (one slot):
        ``nodes``: name -> {"capacity", "allocated", "ports" (port -> task), "tasks" (live ids)},
        written to the node hash and its task set;
        ``jobs``: job -> node -> live tasks (``tally:job``); ``priority``: ``tally:priority``;
        ``stale``: queue name -> task ids to take out of it; ``requeue``: (task, priority)
        pending in no queue, put back in ``q:active``; ``lost``: (task, message) live on a
        node that no longer exists, marked lost (not counted anywhere)."""
        from scheduler.state.queue import queue_score

        k = self.keys
        sequence = self.client.incrby(k.enqueue_seq, len(requeue)) - len(requeue) if requeue else 0
        # Every rewritten node goes on the change feed, so that running workers read it again.
        changed = self.client.incrby(k.node_seq, len(nodes)) - len(nodes) if nodes else 0
        now = self.now_ms()
        with self.client.pipeline(transaction=True) as pipe:
            if nodes:
                pipe.zadd(k.node_changes, {name: changed + i for i, name in enumerate(nodes, 1)})
            for name, node in nodes.items():
                current = self.client.hkeys(k.node(name))
                gone = [f for f in current if (f.startswith("alloc:") and f[6:] not in node["allocated"])
                        or (f.startswith("port:") and int(f[5:]) not in node["ports"])]
                if gone:
                    pipe.hdel(k.node(name), *gone)
                mapping = {"tasks": len(node["tasks"]), **{f"alloc:{r}": a for r, a in node["allocated"].items()},
                           **{f"port:{p}": t for p, t in node["ports"].items()}}
                pipe.hset(k.node(name), mapping=mapping)
                pipe.delete(k.node_tasks(name))
                if node["tasks"]:
                    pipe.sadd(k.node_tasks(name), *node["tasks"])
            for job_id, counts in jobs.items():
                pipe.delete(k.tally_job(job_id))
                if counts:
                    pipe.zadd(k.tally_job(job_id), counts)
            pipe.delete(k.tally_priority)
            if priority:
                pipe.hset(k.tally_priority, mapping={str(p): c for p, c in priority.items()})
            for name, ids in stale.items():
                if ids:
                    pipe.zrem(getattr(k, name), *ids)
            for offset, (task_id, task_priority) in enumerate(requeue):
                pipe.zadd(k.active, {task_id: queue_score(task_priority, sequence + offset + 1)})
            for task_id, message in lost:
                pipe.hset(k.task(task_id), mapping={"state": "lost", "message": message, "ended_at": now})
            pipe.execute()


    def shards_usage(self) -> dict:
        """:meth:`server_usage` summed over every master (of a cluster; else the one server)."""
        from redis.cluster import RedisCluster

        if not isinstance(self.client, RedisCluster):
            return self.server_usage()
        infos = self.client.info(target_nodes=RedisCluster.PRIMARIES)
        infos = list(infos.values()) if isinstance(next(iter(infos.values()), None), dict) else [infos]
        return {"used_memory": sum(int(i["used_memory"]) for i in infos),
                "cpu_s": sum(float(i["used_cpu_sys"]) + float(i["used_cpu_user"]) for i in infos),
                "masters": len(infos)}

    def slot_owner(self) -> str:
        """The server holding this namespace's slot ("" on one server)."""
        from redis.cluster import RedisCluster

        return self.client.get_node_from_key(self.keys.active).name if isinstance(self.client, RedisCluster) else ""

    # Short locks, for work that one process at a time should do.
    def take_lock(self, name: str, ttl_ms: int) -> bool:
        return bool(self.client.set(self.keys.lock(name), "1", nx=True, px=ttl_ms))

    def release_lock(self, name: str) -> None:
        self.client.delete(self.keys.lock(name))

    # Tasks.
    def get_task(self, task_id: str) -> Task:
        fields = self.client.hgetall(self.keys.task(task_id))
        if not fields:
            raise NotFound(f"task {task_id!r} does not exist.")
        return Task.from_hash(fields)

    def tasks(self, task_ids: list[str]) -> list[Task]:
        """The tasks that exist among ``task_ids``, in that order."""
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hgetall(self.keys.task(task_id))
            return [Task.from_hash(fields) for fields in pipe.execute() if fields]

    def start_task(self, task_id: str, node: str, token: str = "") -> bool:
        """``start.lua``: assigned -> running, if the task is still assigned to ``node``.
        With a ``token`` (one per run), a start resent after its reply was lost is
        recognised as the same run's and answers True again."""
        k = self.keys
        return bool(self.scripts.start(keys=[k.task(task_id)], args=[node, k.events, token]))

    def mark_enqueued(self, task_id: str, enqueued: bool = True) -> bool:
        """Record that the node's agent handed the task to RQ (or, with False, that it must
        again). Marking is first-come: returns False if it was already marked."""
        key = self.keys.task(task_id)
        if enqueued:
            return bool(self.client.hsetnx(key, "enqueued", 1))
        self.client.hdel(key, "enqueued")
        return True

    def save_output(self, task_id: str, fields: dict) -> None:
        self.client.hset(self.keys.task_output(task_id), mapping=fields)

    def task_output(self, task_id: str) -> dict[str, str]:
        """What the task printed (empty when nothing was captured)."""
        return self.client.hgetall(self.keys.task_output(task_id))

    def job_task_ids(self, job_id: str) -> list[str]:
        return self.client.zrange(self.keys.job_tasks(job_id), 0, -1)

    def all_task_ids(self) -> list[str]:
        ids: list[str] = []
        for job_id in self.job_ids():
            ids += self.job_task_ids(job_id)
        return ids

    def finish(self, tasks: list[Task], state: str, message: str = "") -> list[str]:
        """End tasks (read with :meth:`tasks`) in ``state``: pending ones leave the queue, live
        ones give their resources back. Returns, per task, what finish.lua reported."""
        k = self.keys
        keys = [k.active, k.backoff, k.unschedulable, k.inflight, k.leases, k.node_changes,
                k.node_seq, k.cycle, k.move_cycle, k.tally_priority]
        args = [k.events]
        for task in tasks:
            node = task.node if task.live else ""
            keys += [k.task(task.id), k.node(node), k.node_tasks(node), k.tally_job(task.job)]
            args += [task.id, state, message, node]
        keys.append(k.usage)
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
                    pending.append(task.id)
                else:
                    outcome[task.id] = result
            if not pending:
                break
        return outcome


def _resending(call, attempts: int, gave_up):
    """``call()``, which must be idempotent, sent again after a timeout or a lost connection
    with a growing pause, ``attempts`` times in all; then ``gave_up(error)`` is raised."""
    for attempt in range(attempts):
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if attempt == attempts - 1:
                raise gave_up(exc) from None
            time.sleep(min(2.0, 0.1 * 2 ** attempt))


@lru_cache(maxsize=4096)
def parse_stored(raw: str) -> JobSpec:
    """A spec as stored (normalised JSON, ``id`` first). Jobs made from one template differ
    only in their id, so the rest of the text is parsed and validated once and shared."""
    head, comma, rest = raw.partition('",')
    # Shared only for an id whose JSON text is the id itself (a valid id has no escapes);
    # anything else (say "web\\n" or an escaped quote) is decoded and checked in full.
    shared = comma and head.startswith('{"id":"') and is_job_id(head[7:])
    if shared:
        template = _templates.get(rest)
        if template is not None:
            return template.with_id(head[7:])
    spec = parse_job(orjson.loads(raw))  # an error names this job
    if shared:
        if len(_templates) >= _TEMPLATES_KEPT:
            _templates.clear()
        _templates[rest] = spec
    return spec


_TEMPLATES_KEPT = 1024
_templates: dict[str, JobSpec] = {}  # stored text after the id -> a spec parsed from it

"""Nodes and their agents in Redis: registration, listing, availability and status,
removal, the live-task set of a node, and the agents' heartbeats.

A node hash is kept flat and readable (``redis-cli HGETALL sched:{default}:node:n1``
shows ``cap:cpu``, ``alloc:cpu``, ``port:8080``...); :func:`node_from_hash` decodes it.
Every change of a node goes through a Lua script (``node_put``, ``node_set``,
``node_rm``), which also feeds the workers' node caches (``nodes:changes``).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import orjson

from scheduler.model import ACTIVE, AVAILABILITIES, DOWN, READY, Node, check_node_name
from scheduler.model.domains import node_domains
from scheduler.model.errors import NotFound, SpecError
from scheduler.model.taints import NO_EXECUTE, Taint, taints_from_text, taints_text
from scheduler.state.hashes import CHUNK as HASHES_PER_ROUND_TRIP, hgetall_many
from scheduler.state.namespace import NamespaceStore
from scheduler.state.nominations import parse_nomination
from scheduler.state.read_steps import Batch, Steps, as_hash, newest_id, run

_DESCRIPTION = ("hostname", "role", "os", "arch")


_PLAIN = frozenset(("name", "availability", "status", "tasks", *_DESCRIPTION, "labels", "engine_labels", "plugins",
                    "taints", "slots", "domains"))


def node_from_hash(fields: dict[str, str]) -> Node:
    """Decode a node hash (see :func:`node_fields`) into a :class:`Node`."""
    capacity, allocated, ports, nominations = {}, {}, {}, {}
    for field, value in fields.items():
        if field in _PLAIN:  # most fields: read by name below
            continue
        kind, _, rest = field.partition(":")
        if kind == "cap":
            capacity[rest] = int(value)
        elif kind == "alloc":
            allocated[rest] = int(value)
        elif kind == "port":
            ports[int(rest)] = value
        elif kind == "nom":
            nominations[rest] = parse_nomination(rest, value)
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
        taints=_taints(get("taints", "")),
        slots=int(get("slots", 0)),  # none on a node without an agent, or one written before slots were kept
    )


@lru_cache(maxsize=10_000)  # nodes share a few label and plugin texts
def _decoded(text: str, kind=None):
    """``text`` (JSON) decoded, made ``kind`` if given; the same object for the same text,
    so it must not be changed (nothing changes a node's labels or plugins in place)."""
    value = orjson.loads(text)
    return value if kind is None else kind(value)


@lru_cache(maxsize=10_000)  # nodes share a few taint texts
def _taints(text: str) -> tuple:
    return taints_from_text(text)


def node_fields(node: Node) -> list[str]:
    """The description part of a node hash, as field/value pairs (capacity goes separately).
    Taints only when the node has some: registering a node again without taints keeps
    those it has (``sched node untaint`` removes them). Slots only from an agent, which
    always has some: ``sched node add`` of an agent's node keeps its agent's slots."""
    out = []
    for name in _DESCRIPTION:
        out += [name, getattr(node, name)]
    out += ["labels", orjson.dumps(node.labels).decode(), "engine_labels", orjson.dumps(node.engine_labels).decode(),
            "plugins", orjson.dumps(sorted(node.plugins)).decode(),
            # what a counted job's task placed there is counted under (commit.lua reads it whole)
            "domains", orjson.dumps(node_domains(node)).decode()]
    if node.taints:
        out += ["taints", taints_text(node.taints)]
    if node.slots:
        out += ["slots", str(node.slots)]
    return out


def _stamped(taints, before, now_ms) -> tuple:
    """``taints`` with each NoExecute taint's time: the one it had (``before``), else ``now_ms()``."""
    out = []
    for taint in taints:
        if taint.effect == NO_EXECUTE:
            old = next((t for t in before if t.same(taint)), None)
            taint = dataclasses.replace(taint, added_ms=old.added_ms if old is not None else now_ms())
        out.append(taint)
    return tuple(out)


class NodeStore(NamespaceStore):
    def resource_names(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.resources))

    def put_node(self, node: Node) -> bool:
        """Register or update a node; returns True when it is new."""
        current = self.client.hgetall(self.keys.node(node.name))
        if node.taints:
            node = dataclasses.replace(node, taints=_stamped(node.taints, taints_from_text(current.get("taints")),
                                                             self.clock_ms))
        return bool(self.node_put(node, {f[4:] for f in current if f.startswith("cap:")}))

    def node_put(self, node: Node, previous_resources=frozenset(), client=None):
        """The ``node_put.lua`` call for ``node``; ``previous_resources`` are the ones the
        node had before (they lose their capacity if it no longer has them). ``client``
        may be a pipeline, to register many new nodes per round trip."""
        self.register_namespace()
        k = self.keys
        names = sorted(set(previous_resources) | set(node.capacity))
        args = [self.events_arg, node.name, len(names)]
        for name in names:
            args += [name, node.capacity.get(name, "")]
        args += node_fields(node)
        return self.scripts.node_put(
            keys=[k.node(node.name), k.nodes, k.node_changes, k.node_seq, k.cycle, k.move_cycle, k.resources,
                  k.node_epoch, k.stream, k.config, k.nodes_noexecute],
            args=args, client=client)

    def put_new_nodes(self, nodes: list[Node], chunk: int = 1000, advance=None) -> None:
        """Register nodes that do not exist yet, ``chunk`` per round trip: the same script
        call as :meth:`put_node`, without first reading each node. ``advance(n)`` is called
        after each chunk (a progress bar)."""
        if any(node.taints for node in nodes):
            nodes = [dataclasses.replace(node, taints=_stamped(node.taints, (), self.clock_ms)) if node.taints else node
                     for node in nodes]
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
        replies = hgetall_many(self.client, [self.keys.node(name) for name in names])
        return [node_from_hash(fields) for fields in replies if fields]

    def nodes_since(self, seq: int | None) -> tuple[int, str, list[Node] | None, int]:
        """The nodes' change sequence (``nodes:seq``, which every change of a node moves:
        node_cache.py), the namespace's newest event id and how many drains are in
        progress, read first, in one round trip; and every node, read after them, unless
        the sequence is ``seq`` (None: no node changed since a copy read at ``seq``)."""
        return run(self, self.nodes_since_steps(seq))

    def nodes_since_steps(self, seq: int | None) -> Steps:
        """:meth:`nodes_since` as steps (state/read_steps.py)."""
        k = self.keys
        batch = Batch()
        batch.execute_command("XREVRANGE", k.stream, "+", "-", "COUNT", 1)
        batch.execute_command("GET", k.node_seq)
        batch.execute_command("HLEN", k.drains)
        newest, now, draining = yield batch
        now = int(now or 0)
        if now == seq:
            return now, newest_id(newest), None, int(draining)
        batch = Batch()
        batch.execute_command("SMEMBERS", k.nodes)
        [names] = yield batch
        nodes = []
        names = sorted(names)
        for start in range(0, len(names), HASHES_PER_ROUND_TRIP):
            batch = Batch()
            for name in names[start:start + HASHES_PER_ROUND_TRIP]:
                batch.execute_command("HGETALL", k.node(name))
            nodes += [node_from_hash(as_hash(reply)) for reply in (yield batch) if reply]
        return now, newest_id(newest), nodes, int(draining)

    def _set_node(self, name: str, field: str, value: str) -> str:
        k = self.keys
        check_node_name(name)
        before = self.scripts.node_set(keys=[k.node(name), k.node_changes, k.node_seq, k.cycle, k.move_cycle,
                                             k.node_epoch, k.stream, k.config],
                                       args=[self.events_arg, name, field, value])
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

    def taint(self, name: str, taint: Taint) -> tuple[str, str]:
        """Add ``taint`` to the node (replacing one of its key and effect); returns the
        node's taints before and after, as text."""
        return self._taint(name, "add", taint.key, taint.value, taint.effect)

    def untaint(self, name: str, key: str, effect: str = "") -> tuple[str, str]:
        """Remove the node's taints of ``key`` (of ``effect`` only, if given)."""
        return self._taint(name, "remove", key, "", effect)

    def _taint(self, name: str, mode: str, key: str, value: str, effect: str) -> tuple[str, str]:
        k = self.keys
        check_node_name(name)
        reply = self.scripts.node_taint(
            keys=[k.node(name), k.node_changes, k.node_seq, k.cycle, k.move_cycle, k.node_epoch, k.nodes_noexecute,
                  k.stream, k.config],
            args=[self.events_arg, name, mode, key, value, effect, self.scripts.now_arg()])
        if not reply:
            raise NotFound(f"node {name!r} does not exist.")
        return reply[0], reply[1]

    def noexecute_nodes(self) -> list[str]:
        """Nodes that have (or had, until the evictions look) a NoExecute taint."""
        return sorted(self.client.smembers(self.keys.nodes_noexecute))

    def forget_noexecute(self, names: list[str]) -> None:
        if names:
            self.client.srem(self.keys.nodes_noexecute, *names)

    def remove_node(self, name: str) -> None:
        k = self.keys
        check_node_name(name)
        own = k.node_keys(name)
        result = self.scripts.node_rm(
            keys=[k.node_changes, k.node_seq, k.node_epoch, k.stream, k.config, *own, *k.node_indexes],
            args=[self.events_arg, name, len(own)])
        if result == 0:
            raise NotFound(f"node {name!r} does not exist.")
        if result == -1:
            raise SpecError(f"node {name!r} still runs tasks; drain it and wait for them to move first.")

    def node_task_ids(self, name: str) -> list[str]:
        return sorted(self.client.smembers(self.keys.node_tasks(name)))

    def node_task_sets(self, names: list[str]) -> list[set[str]]:
        """The ids of the tasks live on each of ``names``, in that order."""
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.smembers(self.keys.node_tasks(name))
            return pipe.execute()

    def node_epoch(self) -> str | None:
        return self.client.get(self.keys.node_epoch)

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

    def has_agent(self, name: str) -> bool:
        """Whether an agent runs the node's tasks (it has beaten, and was not forgotten)."""
        return bool(self.client.sismember(self.keys.agents, name))

    def forget_agent(self, name: str) -> None:
        """The node no longer has an agent: its heartbeat lapsing no longer takes it down."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.srem(self.keys.agents, name)
            pipe.hdel(self.keys.agent_ttls, name)
            pipe.execute()

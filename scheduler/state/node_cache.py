"""A worker's local copy of every node, kept current from a change feed.

Every script that changes a node (registration, commit, release, drain...) bumps
``nodes:seq`` and records the node in the ``nodes:changes`` sorted set with the new
sequence number. A sorted set deduplicates: a node changed a thousand times since we
last looked appears once. So a refresh costs one ``ZRANGEBYSCORE`` plus one ``HGETALL``
per node that changed — O(changed nodes), never O(all nodes) — and a node whose hash is
gone has been removed.

The placement engine writes its own decisions into the cached nodes (SwarmKit's local
state), so after a commit the copy already holds what Redis holds for a node that no one
else changed meanwhile: the commit reports each node's previous change sequence, and
such nodes are not read back (:meth:`committed`). Every other change comes through the
feed and overwrites the copy. Nodes whose placements were refused are re-read
explicitly, since a refusal for an expired lease changes nothing in Redis.

Another worker's commit need not be read back either: the commit records what it did to
each node in ``nodes:deltas`` (the new totals, with the node's previous change sequence;
one member per commit call holds the lines of all its nodes).
When a node's deltas since our copy form an unbroken chain up to its latest change, they
are applied to the copy; any other change in between (a release, a drain, a nomination, a
registration) breaks the chain and the node is read whole, as before.
"""

from __future__ import annotations

from typing import Callable

from redis.client import Pipeline
from redis.exceptions import NoScriptError

from scheduler.model import Node
from scheduler.state.nodes import node_from_hash
from scheduler.state.store import Store


class NodeCache:
    def __init__(self, store: Store):
        self.store = store
        self.nodes: dict[str, Node] = {}
        self.seq = -1
        self._dirty: set[str] = set()
        self._nominated: set[str] = set()  # nodes holding room for a preemptor
        self._own: dict[str, int] = {}  # node -> change sequence of our own commit, already in the copy
        self.reads = 0  # node hashes read, for the benchmark's cost accounting
        self.applied = 0  # other workers' commits applied from their deltas instead
        self.replaced: set[str] = set()  # nodes given a new object since take_replaced()
        self.membership = 0  # bumped whenever a node joins or leaves the copy

    def adopt(self, seq: int, nodes: dict[str, Node]) -> None:
        """Start from a copy of every node read elsewhere, current at change sequence
        ``seq`` (a parent reads them once for all the worker processes it forks); the
        feed brings it up to date from there, as after a load of its own."""
        self.seq, self.nodes = seq, dict(nodes)
        self.membership += 1
        self._dirty.clear()
        self._nominated = {name for name, node in self.nodes.items() if node.nominations}

    def refresh(self, now_ms: int | None = None) -> dict[str, Node]:
        """Bring the copy up to date; returns the name -> Node mapping. With ``now_ms``,
        nominations that have expired by then are dropped from the copy (commit.lua
        ignores them too)."""
        return self.refresh_with(now_ms, None)[0]

    def refresh_with(self, now_ms: int | None, also: Callable[[Pipeline], None] | None) -> tuple[dict[str, Node], list]:
        """:meth:`refresh`, with more commands that ``also`` queues on the pipeline that
        reads the change feed (one round trip for both); returns their replies too. If Redis
        lost the scripts ``also`` calls by SHA (a restart or failover), they are loaded again."""
        try:
            return self._refresh_with(now_ms, also)
        except NoScriptError:
            self.store.scripts.load_all()
            return self._refresh_with(now_ms, also)

    def _refresh_with(self, now_ms, also):
        keys, client = self.store.keys, self.store.client
        replies: list = []
        if self.seq < 0 and also is not None:
            with client.pipeline(transaction=False) as pipe:
                also(pipe)
                replies = pipe.execute()
        if self.seq < 0:
            # Read the sequence first: anything that changes during the full load shows
            # up in the feed again, so the copy can only be too fresh, never stale.
            self.seq = int(client.get(keys.node_seq) or 0)
            self.nodes = {node.name: node for node in self.store.nodes()}
            self.membership += 1
            self.reads += len(self.nodes)
            self._dirty.clear()
            self._nominated = {name for name, node in self.nodes.items() if node.nominations}
        else:
            replies = self._read_changes(also)
        if now_ms is not None and self._nominated:
            for name in list(self._nominated):
                node = self.nodes.get(name)
                if node is not None:
                    node.nominations = {t: n for t, n in node.nominations.items() if n.expires_ms > now_ms}
                if node is None or not node.nominations:
                    self._nominated.discard(name)
        return self.nodes, replies

    def _read_changes(self, also: Callable[[Pipeline], None] | None) -> list:
        """Apply the change feed; returns the replies to what ``also`` queued."""
        keys, client = self.store.keys, self.store.client
        with client.pipeline(transaction=False) as pipe:
            # Sent raw: redis-py's withscores=True re-encodes every score to bytes and back.
            pipe.execute_command("ZRANGEBYSCORE", keys.node_changes, f"({self.seq}", "+inf", "WITHSCORES")
            pipe.zrangebyscore(keys.node_deltas, f"({self.seq}", "+inf")
            if also is not None:
                also(pipe)
            changed, delta_lines, *queued = pipe.execute()
        seen = self.seq
        deltas: dict[str, list[str]] = {}
        for member in delta_lines:  # one member per commit call, one line per node
            for line in member.split(" "):
                deltas.setdefault(line.split("|", 3)[2], []).append(line)
        names = set(self._dirty)
        for name, score in _pairs(changed):
            latest = int(score)
            self.seq = max(self.seq, latest)
            own = self._own.pop(name, None)
            if own == latest or name in names:
                continue
            # The copy holds every change of this node up to our own commit, if it was
            # the last we knew of, else up to the sequence seen before this refresh.
            node = self.nodes.get(name)
            updated = node and self._follow(node, deltas.get(name, ()), own if own is not None else seen, latest)
            if updated:
                self.nodes[name] = updated
                self.replaced.add(name)
                self.applied += 1
            else:
                names.add(name)
        self._dirty.clear()
        self._own.clear()
        if not names:
            return queued
        ordered = sorted(names)
        with client.pipeline(transaction=False) as pipe:
            for name in ordered:
                pipe.hgetall(keys.node(name))
            replies = pipe.execute()
        self.reads += len(ordered)
        for name, fields in zip(ordered, replies):
            if fields:
                if name not in self.nodes:
                    self.membership += 1
                node = self.nodes[name] = node_from_hash(fields)
                self.replaced.add(name)
                if node.nominations:
                    self._nominated.add(name)
            elif self.nodes.pop(name, None) is not None:
                self.membership += 1
        return queued

    @staticmethod
    def _follow(node: Node, lines: list[str], base: int, latest: int) -> Node | None:
        """``node`` with its deltas applied, if they lead without a gap from ``base`` to
        ``latest``; None when they do not (the node must be read)."""
        at = base
        allocated, ports, tasks = None, None, node.tasks
        for line in lines:
            seq, previous, _name, count, allocs, added = line.split("|")
            seq = int(seq)
            if seq <= at:
                continue  # our own commit's, already in the copy
            if int(previous) > at:
                return None  # a change that left no delta came first
            if allocated is None:
                allocated, ports = dict(node.allocated), dict(node.ports)
            tasks = int(count)
            for pair in filter(None, allocs.split(",")):
                resource, amount = pair.split("=")
                allocated[resource] = int(amount)
            for pair in filter(None, added.split(",")):
                port, task_id = pair.split("=")
                ports[int(port)] = task_id
            at = seq
        if at != latest or allocated is None:
            return None
        # A delta is written only for a node without nominations: none to carry over.
        return Node(name=node.name, capacity=node.capacity, allocated=allocated, labels=node.labels,
                    engine_labels=node.engine_labels, hostname=node.hostname, role=node.role, os=node.os,
                    arch=node.arch, plugins=node.plugins, availability=node.availability, status=node.status,
                    ports=ports, tasks=tasks, nominations={})

    def take_replaced(self) -> set[str]:
        """The nodes given a new object since the last call (joins and leaves show in
        :attr:`membership` instead)."""
        replaced, self.replaced = self.replaced, set()
        return replaced

    def committed(self, changes: dict[str, tuple[int, int]], seen: int) -> None:
        """Our commit changed these nodes (node -> (sequence, previous sequence)); the
        placements are already in the copy, which was current at sequence ``seen``. A node
        nobody else changed since then need not be read back."""
        for name, (seq, before) in changes.items():
            if before <= seen and name not in self._dirty:
                self._own[name] = seq

    def invalidate(self, names) -> None:
        """Re-read these nodes on the next refresh, whatever the feed says."""
        self._dirty.update(names)


def _pairs(reply: list) -> list:
    """(member, score) pairs of a raw WITHSCORES reply: nested over RESP3, flat over RESP2."""
    if reply and not isinstance(reply[0], list):
        return list(zip(reply[::2], reply[1::2]))
    return reply

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

Change sequences are handed out one per node change, without gaps, so when the delta
lines since our copy number exactly ``nodes:seq`` minus our sequence, every change since
then left a delta: the refresh then reads the deltas and ``nodes:seq`` alone, not the
feed (about two entries per placement, most of them echoes of this worker's own
commits). When they do not (a release, a drain...), the feed is read too, in a second
round trip, and in the first one of the refreshes after it, until a refresh finds the
deltas complete again. The members of this worker's own commits are not split at all
when the copy already holds every node they name (:meth:`committed`).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

from redis.client import Pipeline
from redis.exceptions import NoScriptError

from scheduler.model import READY, Node
from scheduler.state.nodes import node_from_hash
from scheduler.state.store import Store


class NodeCache:
    def __init__(self, store: Store):
        self.store = store
        self.nodes: dict[str, Node] = {}
        self.seq = -1
        self._dirty: set[str] = set()
        self._nominated: set[str] = set()  # nodes holding room for a preemptor
        self.tainted: set[str] = set()  # nodes with taints (a delta never changes them)
        self._own: dict[str, int] = {}  # node -> change sequence of our own commit, already in the copy
        self._own_members: set[int] = set()  # last change sequences of own commits whose every node is in _own
        self._feed_needed = False  # the last refresh found a change that left no delta: read the feed at once
        self.feed_reads = 0  # refreshes that read the change feed (the others read the deltas alone)
        self.reads = 0  # node hashes read, for the benchmark's cost accounting
        self.applied = 0  # other workers' commits applied from their deltas instead
        self.replaced: set[str] = set()  # nodes given a new object since take_replaced()
        self.changed: set[str] = set()  # nodes changed in place (their deltas) since take_changed()
        self.membership = 0  # bumped whenever a node joins or leaves the copy
        self._stamps: dict[str, int] = {}  # node -> when the copy last took a change of it (see stamp)
        self._stamped = 0
        # The ready nodes' total capacity per resource (the measure of tenants' shares in a
        # claim), kept as nodes are read: deltas change neither capacity nor status.
        self.ready_capacity: dict[str, int] = {}

    def adopt(self, seq: int, nodes: dict[str, Node], ready_capacity: dict[str, int] | None = None) -> None:
        """Start from a copy of every node read elsewhere, current at change sequence
        ``seq`` (a parent reads them once for all the worker processes it forks), with
        their :attr:`ready_capacity` if the reader summed it; the feed brings it up to
        date from there, as after a load of its own. The node objects become this copy's
        (it changes them in place)."""
        self.seq, self.nodes = seq, dict(nodes)
        self.membership += 1
        self._stamps = {}
        for name in self.nodes:
            self._changed(name)
        self._dirty.clear()
        self._nominated = {name for name, node in self.nodes.items() if node.nominations}
        self.tainted = {name for name, node in self.nodes.items() if node.taints}
        self.ready_capacity = dict(ready_capacity) if ready_capacity is not None else _ready_capacity(self.nodes)

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

    def _refresh_with(self, now_ms: int | None, also: Callable[[Pipeline], None] | None) -> tuple[dict[str, Node], list]:
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
            with _collection_paused():
                self.nodes = {node.name: node for node in self.store.nodes()}
            self._stamps = {}
            for name in self.nodes:
                self._changed(name)
            self.ready_capacity = _ready_capacity(self.nodes)
            self.membership += 1
            self.reads += len(self.nodes)
            self._dirty.clear()
            self._nominated = {name for name, node in self.nodes.items() if node.nominations}
            self.tainted = {name for name, node in self.nodes.items() if node.taints}
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
        """Apply what changed since :attr:`seq`: from the deltas alone when they account
        for every change, else from the feed; returns the replies to what ``also`` queued."""
        keys, client = self.store.keys, self.store.client
        seen = self.seq
        feed = self._feed_needed
        with client.pipeline(transaction=False) as pipe:
            if feed:
                self._queue_feed(pipe, seen)
            self._queue_deltas(pipe, seen)
            if not feed:
                pipe.get(keys.node_seq)  # after the deltas: a commit in between only sends us to the feed
            if also is not None:
                also(pipe)
            replies = pipe.execute()
        names: set[str] | None
        if feed:
            changed, members, *queued = replies
            names = self._apply_feed(changed, members, seen)
        else:
            members, horizon, *queued = replies
            names = self._apply_deltas(members, seen, int(horizon or 0))
            if names is None:  # a change without a delta: the feed says which nodes to read
                with client.pipeline(transaction=False) as pipe:
                    self._queue_feed(pipe, seen)
                    self._queue_deltas(pipe, seen)
                    changed, members = pipe.execute()
                names = self._apply_feed(changed, members, seen)
        self._dirty.clear()
        self._own.clear()
        self._own_members.clear()
        if names:
            self._read_nodes(sorted(names))
        return queued

    # Both sent raw: redis-py's withscores=True re-encodes every score to bytes and back.
    def _queue_feed(self, pipe: Pipeline, seen: int) -> None:
        pipe.execute_command("ZRANGEBYSCORE", self.store.keys.node_changes, f"({seen}", "+inf", "WITHSCORES")

    def _queue_deltas(self, pipe: Pipeline, seen: int) -> None:
        pipe.execute_command("ZRANGEBYSCORE", self.store.keys.node_deltas, f"({seen}", "+inf", "WITHSCORES")

    def _split_deltas(self, members: list, horizon: int) -> tuple[dict[str, list[list[str]]], int]:
        """The delta lines of the members up to ``horizon``, by node (each split at its
        first three ``|``), and how many lines those members hold. Members of our own
        commits whose nodes the copy already holds are counted, not split."""
        deltas: dict[str, list[list[str]]] = {}
        count = 0
        own = self._own_members
        for member, score in _pairs(members):  # one member per commit call, one line per node
            last = int(score)
            if last > horizon:
                continue
            count += member.count(" ") + 1
            if last in own:
                continue
            for line in member.split(" "):
                # seq, previous, node, and the rest: split further only if the node is followed
                fields = line.split("|", 3)
                lines = deltas.get(fields[2])
                if lines is None:
                    deltas[fields[2]] = [fields]
                else:
                    lines.append(fields)
        return deltas, count

    def _apply_deltas(self, members: list, seen: int, horizon: int) -> set[str] | None:
        """Bring the copy to ``horizon`` from the deltas, if they hold every change since
        ``seen``; returns the nodes to read, or None (nothing applied) when some change
        left no delta."""
        deltas, count = self._split_deltas(members, horizon)
        if count != horizon - seen:
            self._feed_needed = True
            return None
        self.seq = max(self.seq, horizon)
        names = set(self._dirty)
        for name, lines in deltas.items():
            if name in names:
                continue
            latest = int(lines[-1][0])
            own = self._own.get(name)
            if own is not None and own >= latest:
                continue  # our own commit was the last: already in the copy
            node = self.nodes.get(name)
            if node is not None and _follow(node, lines, own if own is not None else seen, latest):
                self.changed.add(name)
                self._changed(name)
                self.applied += 1
            else:
                names.add(name)
        return names

    def _apply_feed(self, changed: list, members: list, seen: int) -> set[str]:
        """Bring the copy up to date from the feed (and the deltas, where they reach);
        returns the nodes to read. The next refresh reads the deltas alone if they held
        every change this time."""
        self.feed_reads += 1
        pairs = _pairs(changed)
        horizon = seen
        for _, score in pairs:
            horizon = max(horizon, int(score))
        deltas, count = self._split_deltas(members, horizon)
        self._feed_needed = count != horizon - seen
        names = set(self._dirty)
        for name, score in pairs:
            latest = int(score)
            self.seq = max(self.seq, latest)
            own = self._own.get(name)
            if own == latest or name in names:
                continue
            # The copy holds every change of this node up to our own commit, if it was
            # the last we knew of, else up to the sequence seen before this refresh.
            node = self.nodes.get(name)
            if node is not None and _follow(node, deltas.get(name, ()), own if own is not None else seen, latest):
                self.changed.add(name)
                self._changed(name)
                self.applied += 1
            else:
                names.add(name)
        return names

    def _read_nodes(self, ordered: list[str]) -> None:
        """Read these nodes whole (new, changed without a delta, or removed)."""
        keys, client = self.store.keys, self.store.client
        with client.pipeline(transaction=False) as pipe:
            for name in ordered:
                pipe.hgetall(keys.node(name))
            replies = pipe.execute()
        self.reads += len(ordered)
        for name, fields in zip(ordered, replies):
            old = self.nodes.get(name)
            if old is not None:
                _count_ready(self.ready_capacity, old, -1)
            if fields:
                if old is None:
                    self.membership += 1
                node = self.nodes[name] = node_from_hash(fields)
                self._changed(name)
                _count_ready(self.ready_capacity, node, 1)
                self.replaced.add(name)
                if node.nominations:
                    self._nominated.add(name)
                if node.taints:
                    self.tainted.add(name)
                else:
                    self.tainted.discard(name)
            elif old is not None:
                del self.nodes[name]
                self._stamps.pop(name, None)
                self.tainted.discard(name)
                self.membership += 1

    def stamp(self, name: str) -> int:
        """A number that changes whenever the copy takes a change of node ``name`` (a
        delta, a read, our own commit): what was read of the node at one stamp holds
        while its stamp does, even if the node's tally came back to the same figures."""
        return self._stamps.get(name, 0)

    def _changed(self, name: str) -> None:
        self._stamped += 1
        self._stamps[name] = self._stamped

    def take_replaced(self) -> set[str]:
        """The nodes given a new object since the last call (joins and leaves show in
        :attr:`membership` instead)."""
        replaced, self.replaced = self.replaced, set()
        return replaced

    def take_changed(self) -> set[str]:
        """The nodes changed in place by their deltas since the last call."""
        changed, self.changed = self.changed, set()
        return changed

    def committed(self, changes: dict[str, tuple[int, int]], seen: int) -> None:
        """Our commit changed these nodes (node -> (sequence, previous sequence)); the
        placements are already in the copy, which was current at sequence ``seen``. A node
        nobody else changed since then (or since our own previous commit) need not be read
        back, and a commit all of whose nodes are such leaves a delta member that the
        next refresh need not split."""
        held = True
        own = self._own
        for name, (seq, before) in changes.items():
            self._changed(name)
            if (before <= seen or before == own.get(name)) and name not in self._dirty:
                own[name] = seq
            else:
                held = False
        if held and changes:
            self._own_members.add(max(seq for seq, _ in changes.values()))

    def invalidate(self, names) -> None:
        """Re-read these nodes on the next refresh, whatever the feed says."""
        self._dirty.update(names)


def _ready_capacity(nodes: dict[str, Node]) -> dict[str, int]:
    total: dict[str, int] = {}
    for node in nodes.values():
        _count_ready(total, node, 1)
    return total


def _count_ready(total: dict[str, int], node: Node, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) ``node``'s capacity, if it is ready."""
    if node.status == READY:
        for resource, amount in node.capacity.items():
            left = total.get(resource, 0) + sign * amount
            if left:
                total[resource] = left
            else:
                total.pop(resource, None)


@contextmanager
def _collection_paused() -> Iterator[None]:
    """No garbage collection while thousands of nodes are built at once: they are all
    kept, and a full collection among them only walks a heap that is growing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _pairs(reply: list) -> list:
    """(member, score) pairs of a raw WITHSCORES reply: nested over RESP3, flat over RESP2."""
    if reply and not isinstance(reply[0], list):
        return list(zip(reply[::2], reply[1::2]))
    return reply


def _follow(node: Node, lines, base: int, latest: int) -> bool:
    """Apply ``node``'s deltas (each a line split at its first three ``|``) to it in place, if they lead
    without a gap from ``base`` to ``latest``; False, leaving it untouched, when they do
    not (the node must be read). In place rather than a new object: the placer's columns
    and cached static verdicts stay keyed to the same object, and only the changing
    values are rewritten."""
    at = base
    chain = []
    for fields in lines:
        seq = int(fields[0])
        if seq <= at:
            continue  # our own commit's, already in the copy
        if int(fields[1]) > at:
            return False  # a change that left no delta came first
        chain.append(fields)
        at = seq
    if at != latest or not chain:
        return False
    allocated, ports = node.allocated, node.ports
    for fields in chain:
        count, allocs, added = fields[3].split("|")
        node.tasks = int(count)
        if allocs:
            for pair in allocs.split(","):
                resource, _, amount = pair.partition("=")
                allocated[resource] = int(amount)
        if added:
            for pair in added.split(","):
                port, _, task_id = pair.partition("=")
                ports[int(port)] = task_id
    if node.nominations:  # a delta is written only for a node without nominations
        node.nominations = {}
    return True

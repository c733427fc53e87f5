"""The namespace's event stream, ``sched:{ns}:stream`` (docs/events.md).

Every script that announces a change publishes it on the channel ``sched:{ns}:events``
and appends the same JSON to this stream, in the same call (``send`` in lua/_lib.lua),
as the one field ``event`` of an entry whose id Redis gives (``<ms>-<seq>``). The stream
is trimmed to about ``stream_maxlen`` entries (``XADD MAXLEN ~``), a field of the
namespace's ``config`` hash: :data:`STREAM_MAXLEN` when unset, 0 for no stream at all.

Here: the events argument those scripts take, the bound, and reading: after a position,
in a consumer group, and following either across failovers (:class:`Follower`,
:class:`GroupFollower`). A reader that loses Redis waits, finds the master again (on a
cluster by a keyed command, under Sentinel by asking the sentinels) and reads on after
the last entry it returned, so it misses nothing the new master's stream kept and
repeats nothing.
"""

from __future__ import annotations

import time

import orjson
import redis
from redis.exceptions import (ClusterDownError, ConnectionError, ReadOnlyError, RedisClusterException, RedisError,
                              ResponseError, TimeoutError, TryAgainError)

from scheduler.model.errors import SpecError
from scheduler.state.keys import Keys

STREAM_MAXLEN = 100_000  # entries kept when the namespace sets no bound (lua/_lib.lua says the same)
BATCH = 500  # entries per read
# Redis is away, or a cluster is failing over (its layout cannot be read yet, a slot moves).
AWAY = (ConnectionError, TimeoutError, ClusterDownError, ReadOnlyError, TryAgainError, RedisClusterException)
FIRST_WAIT_S, LAST_WAIT_S = 0.05, 1.0  # the backoff between attempts to reach Redis again

Entry = tuple[str, dict]  # (stream id, the event)


def events_argument(keys: Keys, fields: dict | None = None) -> str:
    """The events argument of every script that announces changes: the channel, then, with
    ``fields`` (name -> value, e.g. who made the change), ``|`` and those as JSON members,
    which every event of the call carries before its ``ts``."""
    if not fields:
        return keys.events
    return keys.events + "|" + orjson.dumps(fields).decode()[1:-1]


def _parsed(reply) -> list[tuple[str, dict | None]]:
    """(id, event) of each entry of an XRANGE-shaped reply; the event is None for an entry
    that holds none (written by someone else, or trimmed away while pending)."""
    out = []
    for entry_id, fields in reply or ():
        event = None
        text = (fields or {}).get("event")
        if text is not None:
            try:
                event = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
        out.append((entry_id, event if isinstance(event, dict) else None))
    return out


def _entries(reply) -> list[Entry]:
    return [(entry_id, event) for entry_id, event in _parsed(reply) if event is not None]


def _read_reply(reply) -> list:
    """The entries of an XREAD/XREADGROUP reply for one stream (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()))[0] if reply else []
    return reply[0][1]


class EventStream:
    """Reads of one namespace's stream, and its bound."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys

    # The bound.
    def maxlen(self) -> int:
        value = self.client.hget(self.keys.config, "stream_maxlen")
        return STREAM_MAXLEN if value is None else int(value)

    def set_maxlen(self, entries: int) -> None:
        """Keep about ``entries`` entries from now on (0: no stream), trimming now."""
        if entries < 0:
            raise SpecError(f"the stream's bound must be 0 or more entries, not {entries}.")
        self.client.hset(self.keys.config, "stream_maxlen", entries)
        if entries > 0:
            self.client.xtrim(self.keys.stream, maxlen=entries, approximate=True)

    def length(self) -> int:
        return self.client.xlen(self.keys.stream)

    def memory(self) -> int:
        """Bytes the stream takes (``MEMORY USAGE``, every node counted), 0 when there is none."""
        return int(self.client.memory_usage(self.keys.stream, samples=0) or 0)

    # Reading.
    def last_id(self) -> str:
        """The id of the newest entry ("0-0" when there is none): reading after it gives
        what is announced from now on."""
        newest = self.client.xrevrange(self.keys.stream, count=1)
        return newest[0][0] if newest else "0-0"

    def oldest_id(self) -> str:
        """The id of the oldest entry kept ("" when there is none)."""
        oldest = self.client.xrange(self.keys.stream, count=1)
        return oldest[0][0] if oldest else ""

    def groups(self) -> list[dict]:
        """Each consumer group: name, consumers, entries pending, last id delivered."""
        try:
            infos = self.client.xinfo_groups(self.keys.stream)
        except ResponseError:  # no stream yet
            return []
        return [{"name": i["name"], "consumers": int(i["consumers"]), "pending": int(i["pending"]),
                 "last_delivered": i["last-delivered-id"]} for i in infos]

    def read(self, after: str, count: int = BATCH, block_ms: int | None = None) -> tuple[list[Entry], str]:
        """Up to ``count`` entries after ``after``, oldest first, and the id to read after
        next; with ``block_ms``, waiting that long for one when there is none."""
        return self.read_reply(self.client.xread({self.keys.stream: after}, count=count, block=block_ms), after)

    def queue_read(self, pipe, after: str, count: int = BATCH) -> None:
        """:meth:`read` queued on a pipeline (no wait); its reply goes to :meth:`read_reply`."""
        pipe.xread({self.keys.stream: after}, count=count)

    @staticmethod
    def read_reply(reply, after: str) -> tuple[list[Entry], str]:
        """What :meth:`read` returns, from an ``XREAD`` reply of a read after ``after``."""
        parsed = _parsed(_read_reply(reply))
        return [(i, e) for i, e in parsed if e is not None], parsed[-1][0] if parsed else after

    def newest(self, count: int, before: str = "+") -> list[Entry]:
        """Up to ``count`` entries up to ``before`` ("+": the newest; "(<id>": those before
        that id), newest first."""
        return _entries(self.client.xrevrange(self.keys.stream, max=before, count=count))

    # Consumer groups.
    def join_group(self, group: str, start: str) -> bool:
        """Create ``group`` reading after ``start`` (an id, or "$": from now), unless it
        exists (then it goes on from where it is). True when it was created."""
        try:
            return bool(self.client.xgroup_create(self.keys.stream, group, id=start, mkstream=True))
        except ResponseError as exc:
            if "BUSYGROUP" in str(exc):
                return False
            raise

    def read_group(self, group: str, consumer: str, count: int = BATCH, block_ms: int | None = None) -> list[Entry]:
        """Entries never delivered to the group, now delivered to ``consumer`` (pending
        until acknowledged)."""
        reply = self.client.xreadgroup(group, consumer, {self.keys.stream: ">"}, count=count, block=block_ms)
        return _entries(_read_reply(reply))

    def read_pending(self, group: str, consumer: str, after: str, count: int = BATCH) -> tuple[list[Entry], str | None]:
        """The consumer's own pending entries after ``after`` (given to it and never
        acknowledged, e.g. before it died), and the id to read after next (None: no
        more). Entries trimmed away meanwhile hold nothing to handle: they are
        acknowledged here."""
        parsed = _parsed(_read_reply(self.client.xreadgroup(group, consumer, {self.keys.stream: after}, count=count)))
        self.ack(group, [entry_id for entry_id, event in parsed if event is None])
        return [(i, e) for i, e in parsed if e is not None], parsed[-1][0] if parsed else None

    def ack(self, group: str, ids: list[str]) -> None:
        if ids:
            self.client.xack(self.keys.stream, group, *ids)

    def claim_idle(self, group: str, consumer: str, min_idle_ms: int, count: int = BATCH) -> list[Entry]:
        """Entries pending for other consumers of the group for at least ``min_idle_ms``
        (their consumer died or hangs), now ``consumer``'s (``XAUTOCLAIM``). Entries
        trimmed away meanwhile are dropped from the group's pending list by Redis."""
        claimed: list[Entry] = []
        cursor = "0-0"
        while True:
            reply = self.client.xautoclaim(self.keys.stream, group, consumer, min_idle_ms, start_id=cursor,
                                           count=count)
            cursor, entries = reply[0], reply[1]
            claimed += _entries(entries)
            if cursor in ("0-0", "0") or len(claimed) >= count:
                return claimed


class _Reconnecting:
    """What both followers do when Redis goes away: wait (a growing backoff), then make a
    cluster client learn the new layout; the next read goes to whichever master serves."""

    def __init__(self, stream: EventStream):
        self.stream = stream
        self._wait = FIRST_WAIT_S

    def _away(self, timeout: float) -> None:
        time.sleep(min(self._wait, max(timeout, 0.01)))
        self._wait = min(self._wait * 2, LAST_WAIT_S)
        try:
            self.stream.client.exists(self.stream.keys.stream)  # a keyed command re-reads a cluster's layout
        except (RedisError, RedisClusterException):
            pass

    def _back(self) -> None:
        self._wait = FIRST_WAIT_S


class Follower(_Reconnecting):
    """The entries after a position, batch by batch, across failovers: ``after`` is the
    id of the last entry returned, so a new follower made with it carries on exactly
    after it (as a program that stored it does after a restart)."""

    def __init__(self, stream: EventStream, after: str):
        super().__init__(stream)
        self.after = after

    def next(self, timeout: float) -> list[Entry]:
        """The next entries, or [] when none came within about ``timeout`` seconds (also
        while Redis is away: the follower is then finding it again)."""
        try:
            entries, self.after = self.stream.read(self.after, block_ms=max(1, int(timeout * 1000)))
        except AWAY:
            self._away(timeout)
            return []
        self._back()
        return entries


class GroupFollower(_Reconnecting):
    """One consumer of a consumer group, across failovers and restarts. It first takes
    back its own pending entries (delivered before, never acknowledged), then reads what
    the group has not delivered yet, and every ``claim_every_s`` claims the entries other
    consumers left pending for ``claim_idle_ms`` (XAUTOCLAIM). Each entry is one
    consumer's until acknowledged (:meth:`ack`), so the group shares the events; an entry
    is delivered again only if its consumer died before acknowledging it. A read takes up
    to ``batch`` entries: they are this consumer's (pending) from then on.

    Entries it has returned and not yet had acknowledged are never returned again by
    this follower (a read of its own pending entries after Redis was away skips them),
    and an acknowledgement that did not reach Redis is sent again (XACK is idempotent)."""

    def __init__(self, stream: EventStream, group: str, consumer: str, start: str = "$",
                 claim_idle_ms: int = 60_000, claim_every_s: float | None = None, batch: int = BATCH):
        super().__init__(stream)
        self.group, self.consumer, self.start, self.batch = group, consumer, start, batch
        self.claim_idle_ms = claim_idle_ms
        self.claim_every_s = min(10.0, claim_idle_ms / 2000) if claim_every_s is None else claim_every_s
        self._pending_after: str | None = "0-0"  # reading our own pending entries, after this id
        self._claimed_at = float("-inf")
        self._outstanding: set[str] = set()  # returned, not acknowledged yet
        self._unsent: list[str] = []  # acknowledged by the caller, not yet by Redis
        stream.join_group(group, start)

    def next(self, timeout: float) -> list[Entry]:
        """The next entries for this consumer, or [] when none came within about
        ``timeout`` seconds (or Redis is away)."""
        try:
            if self._unsent:
                self._send_acks()
            entries = self._read(timeout)
        except AWAY:
            self._pending_after = "0-0"  # a reply lost on the way may have delivered entries to us
            self._away(timeout)
            return []
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            try:
                self.stream.join_group(self.group, self.start)  # lost with a failover the stream survived
            except AWAY:
                self._away(timeout)
            return []
        self._back()
        entries = [entry for entry in entries if entry[0] not in self._outstanding]
        self._outstanding.update(entry_id for entry_id, _ in entries)
        return entries

    def _read(self, timeout: float) -> list[Entry]:
        while self._pending_after is not None:
            entries, self._pending_after = self.stream.read_pending(self.group, self.consumer, self._pending_after,
                                                                    self.batch)
            if entries:
                return entries
        if time.monotonic() - self._claimed_at >= self.claim_every_s:
            self._claimed_at = time.monotonic()
            entries = self.stream.claim_idle(self.group, self.consumer, self.claim_idle_ms, self.batch)
            if entries:
                return entries
        return self.stream.read_group(self.group, self.consumer, self.batch, block_ms=max(1, int(timeout * 1000)))

    def ack(self, ids: list[str]) -> None:
        """Acknowledge handled entries (sent again with the next read if Redis is away)."""
        self._unsent += ids
        try:
            self._send_acks()
        except AWAY:
            pass

    def _send_acks(self) -> None:
        self.stream.ack(self.group, self._unsent)
        self._outstanding.difference_update(self._unsent)
        self._unsent = []

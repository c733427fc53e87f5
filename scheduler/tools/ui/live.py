"""Live updates for every open page, from one reader per namespace.

A page's event stream (:mod:`events`) joins its namespace's :class:`Feed`: one thread per
namespace that has listeners, reading the namespace's Redis stream with
:class:`scheduler.state.stream.Follower` (which finds the master again after a failover
and reads on after the last entry it returned) and handing each batch to every
listener's asyncio queue. Nothing polls Redis: the thread waits in a blocking read.

A listener catches up by itself first: from the id its browser saw last (EventSource
sends it again as ``Last-Event-ID`` when it reconnects), or from the stream's end when
it connects. The feed's position is taken before that catch-up, so the two overlap
rather than leave a gap, and entries met twice are dropped by id: a page gets every
event once, in order, across its reconnections and Redis failovers, as far as the
stream kept them. With no stream kept (its bound is 0) the feed follows the channel
instead, which delivers only what is published while it listens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import orjson
from redis.exceptions import RedisClusterException, RedisError

from scheduler.state.app import App
from scheduler.state.stream import Entry, Follower

log = logging.getLogger("sched.ui")
CATCH_UP = 2000  # entries a reconnecting page is sent at most; further behind, it starts from now
RETRY_S = 1.0  # after an unexpected error, the feed tries again this much later


def stream_id_key(entry_id: str) -> tuple[int, int]:
    """A stream id as a pair of numbers, to compare ids (as text "5-10" < "5-9")."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def valid_id(text: str | None) -> str | None:
    """``text`` if it is a stream id (``<ms>-<seq>``), else None."""
    if not text:
        return None
    ms, dash, seq = text.partition("-")
    return text if dash and ms.isdigit() and seq.isdigit() and len(text) <= 41 else None


class Listener:
    """One page's queue of batches of (stream id or None, event)."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop, streaming: bool):
        self.app, self.loop, self.streaming = app, loop, streaming
        self.queue: asyncio.Queue[list[tuple[str | None, dict]]] = asyncio.Queue()
        self.last: str | None = None  # the last stream id handed to the page

    def deliver(self, entries: list) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, entries)

    def catch_up(self, last_seen: str | None) -> list[Entry]:
        """Blocking: the entries after ``last_seen`` (at most :data:`CATCH_UP`; further
        behind, none), or none and the stream's end when there is no ``last_seen``. Sets
        :attr:`last`, from which :meth:`fresh` goes on."""
        stream = self.app.store.stream
        if not self.streaming:
            return []
        if last_seen is None:
            self.last = stream.last_id()
            return []
        entries: list[Entry] = []
        after = last_seen
        while len(entries) < CATCH_UP:
            batch, after = stream.read(after, count=min(500, CATCH_UP - len(entries)))
            if not batch:
                break
            entries += batch
        if len(entries) >= CATCH_UP:
            self.last = stream.last_id()
            return []
        self.last = entries[-1][0] if entries else last_seen
        return entries

    def fresh(self, entries: list[tuple[str | None, dict]]) -> list[tuple[str | None, dict]]:
        """The entries of a batch not handed to the page yet (a catch-up and the feed overlap)."""
        out = []
        for entry_id, event in entries:
            if entry_id is not None and self.last is not None:
                if stream_id_key(entry_id) <= stream_id_key(self.last):
                    continue
                self.last = entry_id
            out.append((entry_id, event))
        return out


class Feed(threading.Thread):
    """The reader of one namespace, while it has listeners."""

    def __init__(self, hub: Hub, app: App):
        super().__init__(name=f"sched-ui-feed-{app.keys.namespace}", daemon=True)
        self.hub, self.app = hub, app
        self.listeners: set[Listener] = set()
        self.stopping = threading.Event()
        stream = app.store.stream
        # Taken here, in the joining thread, before the first listener catches up.
        self.streaming = stream.maxlen() > 0
        self.follower = Follower(stream, stream.last_id()) if self.streaming else None
        self.subscription = None if self.streaming else app.store.subscribe()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    entries = self._next()
                except (RedisError, RedisClusterException) as exc:
                    log.warning("live updates of namespace %s: %s", self.app.keys.namespace, exc)
                    time.sleep(RETRY_S)
                    continue
                if entries:
                    for listener in list(self.listeners):
                        listener.deliver(entries)
        finally:
            if self.subscription is not None:
                self.subscription.close()

    def _next(self) -> list[tuple[str | None, dict]]:
        if self.follower is not None:
            return self.follower.next(1.0)
        text = self.subscription.follower.next(1.0)
        if text is None:
            return []
        try:
            event = orjson.loads(text)
        except orjson.JSONDecodeError:
            return []
        return [(None, event)] if isinstance(event, dict) else []


class Hub:
    """The feeds of one dashboard, by namespace."""

    def __init__(self):
        self._feeds: dict[str, Feed] = {}
        self._lock = threading.Lock()

    def join(self, app: App, loop: asyncio.AbstractEventLoop) -> Listener:
        """Blocking (it may read Redis): a listener of ``app``'s namespace, its feed started
        if it is the first."""
        with self._lock:
            feed = self._feeds.get(app.keys.namespace)
            started = feed is None
            if started:
                feed = self._feeds[app.keys.namespace] = Feed(self, app)
            listener = Listener(app, loop, feed.streaming)
            feed.listeners.add(listener)
        if started:
            feed.start()
        return listener

    def leave(self, listener: Listener) -> None:
        with self._lock:
            feed = self._feeds.get(listener.app.keys.namespace)
            if feed is None:
                return
            feed.listeners.discard(listener)
            if not feed.listeners:
                feed.stopping.set()
                del self._feeds[listener.app.keys.namespace]

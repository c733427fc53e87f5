"""Following a namespace's event channel (``sched:{ns}:events``, see docs/events.md)."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Iterator

import anyio
import orjson
import redis
import redis.asyncio

from scheduler.state.subscribe import Follower


class Subscription:
    """A subscription to the event channel, subscribed again after a failover (see
    :mod:`scheduler.state.subscribe`); use it as a context manager."""

    def __init__(self, client: redis.Redis, channel: str):
        self.follower = Follower(client, channel)

    def lines(self, timeout: float | None = None) -> Iterator[str]:
        """Each event as the JSON text it was published as, until ``timeout`` seconds pass
        without one (never, with None)."""
        quiet_since = time.monotonic()
        while True:
            data = self.follower.next(1.0 if timeout is None else max(0.0, min(1.0, timeout)))
            if data is not None:
                quiet_since = time.monotonic()
                yield data
            elif timeout is not None and time.monotonic() - quiet_since >= timeout:
                return

    def iter(self, timeout: float | None = None) -> Iterator[dict]:
        """Each event as a dict (see :meth:`lines`)."""
        for line in self.lines(timeout):
            yield orjson.loads(line)

    def close(self) -> None:
        self.follower.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncSubscription:
    """The same, for asyncio code (the dashboard's event stream), on a connection of its
    own made on the loop that uses it."""

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

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, channel: str) -> AsyncIterator[AsyncSubscription]:
        """Subscribed to ``channel`` for the duration of the ``async with``; the connection
        is closed on the way out, even when cancelled."""
        client = redis.asyncio.Redis.from_url(url, decode_responses=True)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(channel)
            yield cls(pubsub)
        finally:
            with anyio.CancelScope(shield=True):
                await pubsub.aclose()
                await client.aclose()

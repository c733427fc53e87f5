"""Following a namespace's event channel (``sched:{ns}:events``, see docs/events.md)."""

from __future__ import annotations

import time
from typing import Iterator

import orjson
import redis

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

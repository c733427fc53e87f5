"""Following a namespace's event channel (``sched:{ns}:events``, see docs/events.md)."""

from __future__ import annotations

import time
from typing import Iterator

import orjson
import redis


class Subscription:
    """A subscription to the event channel; use it as a context manager."""

    def __init__(self, client: redis.Redis, channel: str):
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(channel)

    def lines(self, timeout: float | None = None) -> Iterator[str]:
        """Each event as the JSON text it was published as, until ``timeout`` seconds pass
        without one (never, with None)."""
        quiet_since = time.monotonic()
        while True:
            message = self.pubsub.get_message(timeout=1.0 if timeout is None else max(0.0, min(1.0, timeout)))
            if message is not None and message.get("type") == "message":
                quiet_since = time.monotonic()
                yield message["data"]
            elif timeout is not None and time.monotonic() - quiet_since >= timeout:
                return

    def iter(self, timeout: float | None = None) -> Iterator[dict]:
        """Each event as a dict (see :meth:`lines`)."""
        for line in self.lines(timeout):
            yield orjson.loads(line)

    def close(self) -> None:
        self.pubsub.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

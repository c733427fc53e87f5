"""One namespace of one Redis, with everything that works on it, built lazily.

The CLI, workers, agents and the benchmark all start from an :class:`App`, so a
connection, its registered scripts, the key builder, the store and the queue are made
once and shared.
"""

from __future__ import annotations

import os
from functools import cached_property

import redis

from scheduler.state.connection import client_for, connect, resolve_url
from scheduler.state.keys import Keys
from scheduler.state.queue import QueueConfig, SchedulingQueue
from scheduler.state.scripts import Scripts
from scheduler.state.store import Store


def default_namespace() -> str:
    return os.environ.get("SCHED_NAMESPACE") or "default"


class App:
    def __init__(self, redis_url: str | None = None, namespace: str | None = None,
                 client: redis.Redis | None = None, queue_config: QueueConfig | None = None, clock=None):
        self.redis_url = redis_url
        self.keys = Keys(default_namespace() if namespace is None else namespace)
        self._client = client
        self._given_client = client is not None
        self.queue_config = queue_config
        self.clock = clock

    @cached_property
    def url(self) -> str:
        """The server's URL; with none configured, the embedded server's (started if needed)."""
        from scheduler.state.embedded import ensure_embedded

        return resolve_url(self.redis_url) or ensure_embedded()

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self.url)
        return self._client

    @cached_property
    def rq_connection(self) -> redis.Redis:
        """A connection for RQ, which wants bytes rather than decoded strings."""
        return redis.Redis.from_url(self.url)

    @cached_property
    def once_client(self) -> redis.Redis | None:
        """A client that never resends a command, for script calls that must not run twice
        (``scripts.ONCE_SCRIPTS``); None when the App was given its client."""
        if self._given_client:
            return None
        return client_for(self.url, retrying=False)

    @cached_property
    def scripts(self) -> Scripts:
        return Scripts(self.client, self.once_client)

    @cached_property
    def store(self) -> Store:
        return Store(self.client, self.keys, self.scripts)

    @cached_property
    def queue(self) -> SchedulingQueue:
        return SchedulingQueue(self.client, self.keys, self.scripts, self.queue_config, self.clock)

    def close(self) -> None:
        """Close the connection (a new one is made if the App is used again)."""
        if self._client is not None:
            self._client.close()
            self._client = None
            once = self.__dict__.pop("once_client", None)
            if once is not None:
                once.close()
            for name in ("scripts", "store", "queue"):
                self.__dict__.pop(name, None)

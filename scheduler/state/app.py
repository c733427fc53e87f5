"""One namespace of one Redis, with everything that works on it, built lazily.

The CLI, workers, agents and the benchmark all start from an :class:`App`, so a
connection, its registered scripts, the key builder, the store and the queue are made
once and shared. The URL may name any topology (see connection.py); on a Redis Cluster
the namespace lives in the one slot of its hash tag ``{ns}``.
"""

from __future__ import annotations

import os
from functools import cached_property

import redis
from redis.cluster import RedisCluster

from scheduler.model.errors import RedisUnavailable
from scheduler.state.connection import CLUSTER_SCHEMES, SENTINEL_SCHEMES, client_for, connect, mask_url, resolve_url
from scheduler.state.failover import configured_bound_s
from scheduler.state.keys import Keys
from scheduler.state.layout import LayoutStore
from scheduler.state.queue import QueueConfig, SchedulingQueue
from scheduler.state.replication import on_missing_mode
from scheduler.state.scripts import Scripts
from scheduler.state.store import Store


def default_namespace() -> str:
    return os.environ.get("SCHED_NAMESPACE") or "default"


class App:
    def __init__(self, redis_url: str | None = None, namespace: str | None = None,
                 client: redis.Redis | None = None, queue_config: QueueConfig | None = None, clock=None,
                 rq_url: str | None = None, wait_replicas: int | None = None, on_missing_replicas: str | None = None):
        self.redis_url = redis_url
        self._rq_url = rq_url
        if wait_replicas is None:
            wait_replicas = int(os.environ.get("SCHED_WAIT_REPLICAS") or 0)
        self.wait_replicas = wait_replicas
        self.on_missing_replicas = on_missing_mode(on_missing_replicas)  # with fewer replicas than that: write|refuse
        configured_bound_s()  # a bad SCHED_FAILOVER_S is one sentence now, not at the first failover
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
    def display_url(self) -> str:
        """The URL as it may be shown or logged: any password masked."""
        return mask_url(self.url)

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self.url)
            if isinstance(self._client, RedisCluster):
                # Commands without a key (TIME, PING) go to the client's default node, a
                # random master: make it the one serving the namespace, so that TIME read
                # here is the clock the scripts stamp leases with. (After a failover
                # redis-py picks another; clocks in step make that harmless.)
                self._client.set_default_node(self._client.get_node_from_key(self.keys.active))
        return self._client

    @property
    def rq_url(self) -> str:
        """Where node agents run tasks through RQ: ``rq_url``, else ``SCHED_RQ_URL``,
        else the scheduler's own Redis. RQ cannot run on a Redis Cluster (its keys span
        slots, its job ids cannot carry a hash tag, and it needs transactions with WATCH
        that a cluster client gives only within one slot), so a cluster needs another."""
        return self._rq_url or os.environ.get("SCHED_RQ_URL") or self.url

    @cached_property
    def rq_client(self) -> redis.Redis:
        """A client for :attr:`rq_url` with undecoded replies, as RQ wants."""
        url = self.rq_url
        if url.partition("://")[0].lower() in CLUSTER_SCHEMES:
            raise RedisUnavailable(f"RQ cannot run on the Redis Cluster at {mask_url(url)}; give node agents a "
                                   f"Redis of their own (plain or Sentinel) with SCHED_RQ_URL.")
        return client_for(url, decode_responses=False)

    @property
    def replicated(self) -> bool:
        """Whether the URL names a topology with failover (a cluster or Sentinel)."""
        return self.url.partition("://")[0].lower() in (*CLUSTER_SCHEMES, *SENTINEL_SCHEMES)

    @cached_property
    def once_client(self) -> redis.Redis | None:
        """A client that never resends a command, for script calls that must not run twice
        (``scripts.ONCE_SCRIPTS``); None when the App was given its client. It still waits
        out a failover to connect (connection.client_for)."""
        if self._given_client:
            return None
        return client_for(self.url, retrying=False)

    @cached_property
    def scripts(self) -> Scripts:
        scripts = Scripts(self.client, self.once_client, wait_replicas=self.wait_replicas,
                          on_missing=self.on_missing_replicas, label=self.keys.namespace, clock=self.clock)
        # Before the first write: is the namespace of the key layout this sched writes? (layout.py)
        scripts.set_guard(LayoutStore(self.client, self.keys, scripts).check_layout)
        return scripts

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

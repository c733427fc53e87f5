"""The namespace as a whole, and the base of every noun's part of :class:`Store`.

:class:`NamespaceStore` holds the client, the key builder and the scripts of one
namespace, with what belongs to no one noun: the registry of namespaces, Redis time, the
event channel, emptying the namespace, the server's usage, short locks and the workers'
shared counters, and its events (the channel, and the stream: stream.py). The nouns (nodes.py, jobs.py, tasks.py, nominations.py, tallies.py,
quotas.py) build on it, each reading and writing its own keys.
"""

from __future__ import annotations

import redis

from scheduler.state.connection import time_ms
from scheduler.state.events import Subscription
from scheduler.state.keys import Keys
from scheduler.state.scripts import Scripts
from scheduler.state.stream import EventStream, events_argument

NAMESPACE_REGISTRY = "sched:namespaces"  # SET of namespace names, when kept


class NamespaceStore:
    """The client, keys and scripts of one namespace, which every noun's part of
    :class:`Store` builds on."""

    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts | None = None):
        self.client = client
        self.keys = keys
        self.scripts = scripts or Scripts(client)
        self.stream = EventStream(client, keys)
        # Members every event announced through this Store carries (name -> value), after the
        # event's own and before its "ts"; none by default.
        self.event_fields: dict[str, str] = {}
        self._registered = False  # the namespace is in sched:namespaces (as far as this Store knows)

    @property
    def events_arg(self) -> str:
        """The events argument of the scripts that announce changes (stream.events_argument)."""
        return events_argument(self.keys, self.event_fields)

    def now_ms(self) -> int:
        return time_ms(self.client.time())

    def clock_ms(self) -> int:
        """The time the scripts stamp with (``Scripts.now_arg``): the clock the App was given
        (a test's, the simulator's virtual one), else Redis TIME."""
        given = self.scripts.now_arg()
        return int(given) if given else self.now_ms()

    def register_namespace(self) -> None:
        """Add the namespace to the registry ``sched:namespaces`` (once per Store), so that
        workers serving every cell (``sched worker --all-namespaces``) find it. The registry
        is a key of its own slot on a cluster, hence a command of its own, not in a script."""
        if not self._registered:
            self.client.sadd(NAMESPACE_REGISTRY, self.keys.namespace)
            self._registered = True

    def ping(self) -> None:
        self.client.ping()

    def namespaces(self) -> set[str]:
        """The namespaces of this Redis: the registry ``sched:namespaces`` when it exists,
        else those holding jobs or nodes (a SCAN of every key)."""
        client = self.client
        registered = client.smembers(NAMESPACE_REGISTRY) if client.type(NAMESPACE_REGISTRY) == "set" else set()
        if registered:
            return set(registered)
        found = set()
        for pattern in ("sched:{*}:jobs", "sched:{*}:nodes"):
            for key in client.scan_iter(match=pattern, count=1000):
                found.add(key[len("sched:{"):key.rfind("}:")])
        return found

    def subscribe(self) -> Subscription:
        """Follow the namespace's event channel (pub/sub: only what is published from now)."""
        return Subscription(self.client, self.keys.events)

    def namespace_empty(self) -> bool:
        return next(self.client.scan_iter(match=f"{self.keys.prefix}*", count=1000), None) is None

    def clear_namespace(self) -> None:
        """Delete every key of the namespace (and its name from the registry)."""
        self.client.srem(NAMESPACE_REGISTRY, self.keys.namespace)
        self._registered = False
        batch = []
        for key in self.client.scan_iter(match=f"{self.keys.prefix}*", count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)
        self.scripts.rearm()  # its next write records the key layout again (layout.py)

    def server_usage(self) -> dict:
        """The Redis server's memory in use (bytes) and CPU time so far (seconds)."""
        info = self.client.info()
        return {"used_memory": int(info["used_memory"]),
                "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"])}

    def shards_usage(self) -> dict:
        """:meth:`server_usage` summed over every master (of a cluster; else the one server)."""
        from redis.cluster import RedisCluster

        if not isinstance(self.client, RedisCluster):
            return self.server_usage()
        infos = self.client.info(target_nodes=RedisCluster.PRIMARIES)
        infos = list(infos.values()) if isinstance(next(iter(infos.values()), None), dict) else [infos]
        return {"used_memory": sum(int(i["used_memory"]) for i in infos),
                "cpu_s": sum(float(i["used_cpu_sys"]) + float(i["used_cpu_user"]) for i in infos),
                "masters": len(infos)}

    def slot_owner(self) -> str:
        """The server holding this namespace's slot ("" on one server)."""
        from redis.cluster import RedisCluster

        return self.client.get_node_from_key(self.keys.active).name if isinstance(self.client, RedisCluster) else ""

    # Short locks, for work that one process at a time should do.
    def take_lock(self, name: str, ttl_ms: int) -> bool:
        return bool(self.client.set(self.keys.lock(name), "1", nx=True, px=ttl_ms))

    def release_lock(self, name: str) -> None:
        self.client.delete(self.keys.lock(name))

    # Counters the scheduler workers keep.
    def add_stats(self, counts: dict[str, int]) -> None:
        """Add to the shared ``stats`` counters (placed, refused, batches...)."""
        with self.client.pipeline(transaction=False) as pipe:
            for name, value in counts.items():
                pipe.hincrby(self.keys.stats, name, value)
            pipe.execute()

    def stats(self) -> dict[str, int]:
        return {name: int(value) for name, value in self.client.hgetall(self.keys.stats).items()}

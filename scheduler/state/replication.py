"""Writes that wait for replicas (``--wait-replicas N``), and a master that has fewer.

A durable script call (``scripts.DURABLE_SCRIPTS``) is followed by ``WAIT N timeout`` on
the same connection (``scripts.DurableScript``), so it returns once N replicas have its
write. A master with fewer than N connected replicas (after a failover the promoted
replica has none, until the old master comes back as one) would make every such write
wait out the whole timeout. So one :class:`ReplicaWatch` per namespace (per ``Scripts``) learns it from
WAIT's own reply (fewer than N, and ``INFO replication`` then says fewer than N are
connected: not merely slow), says it once (a warning when it starts and one when it
ends; the gauge ``sched_replicas_missing``; ``sched audit`` reads the same count), and
then does as ``--on-missing-replicas`` (``SCHED_ON_MISSING_REPLICAS``) says:

- ``write`` (the default): writes go on without the WAIT, as they would without
  ``--wait-replicas``; ``INFO replication`` rides in the pipeline of a write at most once
  a second, so learning that the replicas are back costs no round trip.
- ``refuse``: writes are refused before they are sent, with one sentence
  (:class:`ReplicasMissing`), as Redis's own ``min-replicas-to-write`` refuses them; the
  master is asked at most once a second whether the replicas are back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

import redis
from redis.cluster import RedisCluster

from scheduler.model.errors import RedisUnavailable, SpecError

log = logging.getLogger("sched.replication")

MODES = ("write", "refuse")
MODE_ENV = "SCHED_ON_MISSING_REPLICAS"
RECHECK_S = 1.0  # while replicas are missing, how often the master is asked whether they are back


def on_missing_mode(value: str | None = None) -> str:
    """``value``, else ``SCHED_ON_MISSING_REPLICAS``, else ``write``; checked."""
    value = value or os.environ.get(MODE_ENV) or "write"
    if value not in MODES:
        raise SpecError(f"--on-missing-replicas ({MODE_ENV}) is {value!r}: use write or refuse.")
    return value


class ReplicasMissing(RedisUnavailable, redis.ConnectionError):
    """A write refused, unsent, because the namespace's master has fewer replicas than
    ``--wait-replicas`` asks for (``--on-missing-replicas refuse``). A command prints its
    sentence; long-running processes take it as Redis being away, and try again."""


class Unreplicated:
    """Durable calls whose write is not known to have reached ``wait_replicas`` replicas:
    WAIT gave up on a slow replica, or replicas were missing and the write went on."""

    count = 0


def connected_replicas(info: dict) -> int:
    """The replicas in sync with a master, from its ``INFO replication``: those whose
    state is ``online`` (one still loading its first copy cannot acknowledge a write)."""
    replicas = [value for name, value in info.items() if name.startswith("slave") and isinstance(value, dict)]
    return sum(1 for replica in replicas if replica.get("state") == "online")


class ReplicaWatch:
    """Whether the master of one namespace has the ``wanted`` replicas, as last read."""

    watching: weakref.WeakSet = weakref.WeakSet()  # every watch of this process, for the gauge

    def __init__(self, wanted: int, on_missing: str = "write", label: str = "", recheck_s: float = RECHECK_S,
                 clock=time.monotonic):
        self.wanted, self.on_missing, self.label = wanted, on_missing_mode(on_missing), label
        self.recheck_s, self.clock = recheck_s, clock
        self.connected: int | None = None
        self.missing_since: float | None = None
        self.blind = False  # the master's INFO may not be read
        self._next_check = 0.0
        self._lock = threading.Lock()  # a worker writes from two threads: each change is said once
        ReplicaWatch.watching.add(self)

    @property
    def missing(self) -> bool:
        return self.missing_since is not None

    def check_due(self) -> bool:
        return not self.blind and self.clock() >= self._next_check

    def look(self, connection) -> None:
        """Read the master's count now (a round trip): ``connection`` is the master's."""
        try:
            info = connection.info("replication")
        except redis.ResponseError as exc:
            info = exc
        self.read(info)

    def read(self, info) -> None:
        """A master's ``INFO replication`` reply, or the error it gave instead: one that
        does not let this user read it (``-info`` in its ACL) leaves the watch blind, said
        once, and every write then waits for WAIT as it would without a watch."""
        if not isinstance(info, Exception):
            return self.saw(connected_replicas(info))
        with self._lock:
            if not self.blind:
                self.blind, self.connected = True, self.wanted
                log.warning("the master's INFO replication cannot be read (%s): a master short of replicas is not "
                            "noticed, and each write waits for WAIT's timeout then", info)

    def saw(self, connected: int) -> None:
        """The master's count of replicas in sync, just read."""
        fields = {"namespace": self.label, "replicas": connected, "wait_replicas": self.wanted}
        where = f"namespace {self.label}: its master" if self.label else "the master"
        with self._lock:
            now = self.clock()
            first, self.connected, self._next_check = self.connected is None, connected, now + self.recheck_s
            if connected < self.wanted and self.missing_since is None:
                self.missing_since = now
                then = "writes go on without waiting for replicas" if self.on_missing == "write" else "writes are refused"
                # News when it happens under this process's writes; otherwise only this
                # process's first look (every RQ work horse takes one), said quietly.
                log.log(logging.INFO if first else logging.WARNING,
                        "%s has %d replica(s) in sync, fewer than the %d that --wait-replicas asks for: %s "
                        "(--on-missing-replicas %s) until they are back", where, connected, self.wanted, then,
                        self.on_missing, extra={"fields": fields})
            elif connected >= self.wanted and self.missing_since is not None:
                lasted, self.missing_since = now - self.missing_since, None
                log.warning("%s has %d replica(s) in sync again (--wait-replicas %d): writes wait for them again, "
                            "after %.1f s without", where, connected, self.wanted, lasted,
                            extra={"fields": {**fields, "lasted_s": round(lasted, 1)}})

    def refusal(self) -> ReplicasMissing:
        where = f"namespace {self.label}'s master" if self.label else "the master"
        return ReplicasMissing(f"write refused: {where} has {self.connected} replica(s) in sync, fewer than the "
                               f"{self.wanted} that --wait-replicas asks for (--on-missing-replicas refuse); "
                               f"nothing was written.")


def missing_count() -> int:
    """How many namespaces served by this process have a master short of replicas."""
    return sum(1 for watch in list(ReplicaWatch.watching) if watch.missing)


def namespace_replicas(store) -> int:
    """The replicas in sync with the master serving ``store``'s namespace (on a cluster,
    its slot's master)."""
    client = store.client
    if isinstance(client, RedisCluster):
        client = client.get_redis_connection(client.get_node_from_key(store.keys.active))
    return connected_replicas(client.info("replication"))

"""Tokens an API server has checked, kept in the process for a few seconds, so that a
request pays no Redis read for its token: the API's own cost per request, not the
token's, is what a busy server spends most on.

A revocation ends a kept token at once: ``ApiTokens.revoke`` deletes the token's key and
then publishes its SHA-256 on ``sched:api:revoked``, which every process keeping tokens
has subscribed to before it keeps any; each request first takes what was published since
the last one (a look at a socket, no round trip). A process that loses that subscription
(Redis restarted or failed over) forgets every token it kept, as it cannot know what it
missed. So revocation is at once wherever it is heard; :data:`KEPT_S` bounds the rest:
a token's key deleted by hand, and an address locked out (``sched:api:failed:``) while a
valid token from it is kept. A token's own expiry is checked on every request.
"""

from __future__ import annotations

import select
import threading
import time

import redis

from scheduler.state.api_tokens import REVOKED_CHANNEL, digest

KEPT_S = 5.0  # how long a checked token is believed without reading it again
MOST = 10_000  # tokens and addresses kept at once (past it, all are forgotten and read again)


class CheckedTokens:
    """(token, address) -> the token's record, for :data:`KEPT_S` after it was read."""

    def __init__(self, client, kept_s: float = KEPT_S, clock=time.monotonic):
        self.client = client
        self.kept_s = kept_s
        self.clock = clock  # seconds, for how long a token is kept
        self._kept: dict[tuple[str, str], tuple[float, dict, str]] = {}  # -> (until, record, sha256)
        self._lock = threading.Lock()  # one thread reads the revocations at a time
        self._revocations = None  # the subscription, made before the first token is kept
        self._reconnected = False  # the subscription's connection was made again: what was missed?

    def get(self, token: str, address: str) -> dict | None:
        """The record of ``token`` from ``address`` while kept, live and not revoked."""
        self._hear_revocations()
        return self._live(token, address)

    def peek(self, token: str, address: str) -> dict | None:
        """:meth:`get` without blocking, for the event loop: None also when a revocation
        may be waiting to be read (the subscription's socket has something to read, or
        another thread is reading it), or there is no subscription: then :meth:`get`."""
        revocations = self._revocations
        if revocations is None or self._reconnected or not self._lock.acquire(blocking=False):
            return None
        try:
            sock = getattr(getattr(revocations, "connection", None), "_sock", None)
            if sock is None or select.select([sock], [], [], 0)[0]:
                return None
            return self._live(token, address)
        except (OSError, ValueError):  # a socket closed meanwhile
            return None
        finally:
            self._lock.release()

    def _live(self, token: str, address: str) -> dict | None:
        kept = self._kept.get((token, address))
        if kept is None:
            return None
        until, record, _ = kept
        expires = record.get("expires")
        if until < self.clock() or (expires is not None and expires <= time.time() * 1000):
            self._kept.pop((token, address), None)
            return None
        return record

    def keep(self, token: str, address: str, record: dict) -> None:
        """Keep a record just read from Redis (when the revocations are heard)."""
        if self._revocations is None:
            return
        if len(self._kept) >= MOST:
            self._kept.clear()
        self._kept[(token, address)] = (self.clock() + self.kept_s, record, digest(token))

    def _hear_revocations(self) -> None:
        with self._lock:
            try:
                if self._revocations is None:
                    self._subscribe()
                while (message := self._revocations.get_message(timeout=0)) is not None:
                    if message["type"] == "message":
                        self._forget(message["data"])
                    elif message["type"] in ("subscribe", "unsubscribe"):
                        self._kept.clear()  # subscribed again after a lost connection
                if self._reconnected:  # redis-py connected again (and subscribed) on its own
                    self._reconnected = False
                    self._kept.clear()
            except (redis.RedisError, OSError):
                self._kept.clear()
                self._close()

    def _subscribe(self) -> None:
        """Subscribe, and wait for Redis to say so: a revocation published before it
        could otherwise be missed by a token read after it."""
        revocations = self.client.pubsub()
        revocations.subscribe(REVOKED_CHANNEL)
        deadline = time.monotonic() + 5
        while (message := revocations.get_message(timeout=0.5)) is None or message["type"] != "subscribe":
            if time.monotonic() > deadline:
                revocations.close()
                raise redis.TimeoutError("no answer to SUBSCRIBE")
        connection = getattr(revocations, "connection", None)
        if connection is not None:
            connection.register_connect_callback(self._connected_again)
        self._revocations = revocations

    def _connected_again(self, _connection) -> None:
        self._reconnected = True

    def _forget(self, sha256: str) -> None:
        for key in [key for key, (_, _, kept) in list(self._kept.items()) if kept == sha256]:
            self._kept.pop(key, None)

    def _close(self) -> None:
        if self._revocations is not None:
            try:
                self._revocations.close()
            except (redis.RedisError, OSError):
                pass
            self._revocations = None

    def close(self) -> None:
        with self._lock:
            self._kept.clear()
            self._close()

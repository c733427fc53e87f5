"""Find the Redis to talk to: ``--redis-url``, then ``SCHED_REDIS_URL``, then ``REDIS_URL``,
and with none of them the embedded server under the state folder (see embedded.py).
"""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from scheduler.model.errors import RedisUnavailable


def resolve_url(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get("SCHED_REDIS_URL") or os.environ.get("REDIS_URL") or None


def connect(url: str | None = None, *, embedded_ok: bool = True) -> redis.Redis:
    """A client for the resolved URL, starting the embedded server when there is none."""
    url = resolve_url(url)
    if url is None:
        if not embedded_ok:
            raise RedisUnavailable("no Redis URL given; pass --redis-url or set SCHED_REDIS_URL.")
        from scheduler.state.embedded import ensure_embedded

        url = ensure_embedded()
    client = client_for(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {str(exc).rstrip('.')}.") from None
    return client


def time_ms(reply) -> int:
    """Redis ``TIME`` (seconds, microseconds) in milliseconds: the one clock of leases,
    backoffs and measurements."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def client_for(url: str, *, retrying: bool = True) -> redis.Redis:
    """A client for ``url``. With ``retrying`` (the default), a command that fails with a
    connection error or a timeout is sent again (up to 5 times, with backoff): right for
    reads and idempotent writes. Without it nothing is resent: for script calls that
    must not run twice (see ``Scripts``), whose callers decide what a failure means."""
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=5) if retrying else Retry(NoBackoff(), retries=0)
    return redis.Redis.from_url(url, decode_responses=True, retry=retry, health_check_interval=30)


def mask_url(url: str) -> str:
    """``url`` with its password (``scheme://user:password@host``) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_redis(url: str, log=_stderr, *, first_s: float = 0.1, cap_s: float = 5.0, stop=None) -> None:
    """Return once Redis at ``url`` answers PING; until then retry with backoff (``first_s``
    doubling to ``cap_s``), calling ``log`` with one line per retry. For the long-running
    processes (workers, agents), which should outlive a Redis that is not there yet; one-shot
    commands fail fast instead (:func:`connect`). ``stop()`` returning true gives up (returns)."""
    delay = first_s
    client = client_for(url, retrying=False)
    try:
        while True:
            try:
                client.ping()
                return
            except redis.RedisError as exc:
                reason = str(exc).rstrip(".") or type(exc).__name__
                log(f"waiting for Redis at {mask_url(url)}: {reason}")
            if stop is not None and stop():
                return
            time.sleep(delay)
            delay = min(delay * 2, cap_s)
    finally:
        client.close()

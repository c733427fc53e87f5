"""Find the Redis to talk to: ``--redis-url``, then ``SCHED_REDIS_URL``, then ``REDIS_URL``,
and with none of them the embedded server under the state folder (see embedded.py).
"""

from __future__ import annotations

import os

import redis
from redis.backoff import ExponentialBackoff
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


def client_for(url: str) -> redis.Redis:
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=5)
    return redis.Redis.from_url(url, decode_responses=True, retry=retry, health_check_interval=30)

"""Find the Redis to talk to: ``--redis-url``, then ``SCHED_REDIS_URL``, then ``REDIS_URL``,
and with none of them the embedded server under the state folder (see embedded.py).
"""

from __future__ import annotations

import os
import re
import sys
import time
from urllib.parse import unquote

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from scheduler.model.errors import RedisUnavailable, SpecError

_QUERY_PASSWORD_RE = re.compile(r"(?i)([?&][^=&#]*password=)[^&#]*")


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
        detail = scrub(str(exc), url).rstrip(".")
        raise RedisUnavailable(f"cannot reach Redis at {mask_url(url)}: {detail}.") from None
    return client


def mask_url(url: str) -> str:
    """``url`` safe to print: the password of ``scheme://[user]:password@host...`` (also
    in multi-host netlocs such as ``redis+sentinel://:pw@h1:1,h2:2/name``, and in
    ``unix://:pw@/path``) and any ``...password=`` query parameter become ``***``.
    A URL without a password comes back unchanged."""
    if not url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo_end = _userinfo_end(rest)
    if userinfo_end >= 0:
        user, colon, password = rest[:userinfo_end].partition(":")
        if colon and password:
            rest = f"{user}:***{rest[userinfo_end:]}"
    rest = _QUERY_PASSWORD_RE.sub(r"\1***", rest)
    return f"{scheme}{sep}{rest}"


def scrub(text: str, url: str | None) -> str:
    """``text`` (an exception's message, say) with ``url``'s passwords, raw or
    percent-decoded, replaced by ``***``, and ``url`` itself masked."""
    if not url:
        return text
    text = text.replace(url, mask_url(url))
    for secret in sorted({s for raw in _passwords(url) for s in (raw, unquote(raw))}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _userinfo_end(rest: str) -> int:
    """Index of the "@" ending the userinfo of a URL without its scheme, or -1: the last
    "@" before the query (so a password may hold "@" or "/")."""
    end = len(rest)
    for mark in "?#":
        if mark in rest:
            end = min(end, rest.index(mark))
    return rest.rfind("@", 0, end)


def _passwords(url: str) -> list[str]:
    rest = url.partition("://")[2] or url
    found = [m.group(2) for m in re.finditer(r"(?i)([?&][^=&#]*password=)([^&#]+)", rest)]
    userinfo_end = _userinfo_end(rest)
    if userinfo_end >= 0:
        password = rest[:userinfo_end].partition(":")[2]
        if password:
            found.append(password)
    return found


def time_ms(reply) -> int:
    """Redis ``TIME`` (seconds, microseconds) in milliseconds: the one clock of leases,
    backoffs and measurements."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


class _Retry(Retry):
    """Retries what a blip explains (a refused or dropped connection, a timeout); a wrong
    password or a missing permission is final, and reported at once."""

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        def retryable(error: Exception) -> bool:
            if isinstance(error, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
                return False
            return is_retryable(error) if is_retryable is not None else True

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def client_for(url: str, *, retrying: bool = True) -> redis.Redis:
    """A client for ``url``. With ``retrying`` (the default), a command that fails with a
    connection error or a timeout is sent again (up to 5 times, with backoff): right for
    reads and idempotent writes. Without it nothing is resent: for script calls that
    must not run twice (see ``Scripts``), whose callers decide what a failure means."""
    retry = _Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=5) if retrying else Retry(NoBackoff(), retries=0)
    try:
        return redis.Redis.from_url(url, decode_responses=True, retry=retry, health_check_interval=30)
    except (ValueError, TypeError) as exc:
        detail = scrub(str(exc), url).rstrip(".")
        raise SpecError(f"the Redis URL {mask_url(url)} is not valid: {detail}.") from None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_redis(url: str, log=_stderr, *, first_s: float = 0.1, cap_s: float = 5.0, stop=None) -> None:
    """Return once Redis at ``url`` answers PING; until then retry with backoff (``first_s``
    doubling to ``cap_s``), calling ``log`` with one line per retry. For the long-running
    processes (workers, agents), which should outlive a Redis that is not there yet; one-shot
    commands fail fast instead (:func:`connect`). A refused password is final: it raises
    :class:`RedisUnavailable` at once. ``stop()`` returning true gives up (returns)."""
    delay = first_s
    client = client_for(url, retrying=False)
    try:
        while True:
            try:
                client.ping()
                return
            except (redis.AuthenticationError, redis.exceptions.AuthorizationError) as exc:
                # A wrong password does not fix itself: say so once, as one-shot commands do.
                detail = scrub(str(exc), url).rstrip(".")
                raise RedisUnavailable(f"cannot reach Redis at {mask_url(url)}: {detail}.") from None
            except redis.RedisError as exc:
                reason = scrub(str(exc), url).rstrip(".") or type(exc).__name__
                log(f"waiting for Redis at {mask_url(url)}: {reason}")
            if stop is not None and stop():
                return
            time.sleep(delay)
            delay = min(delay * 2, cap_s)
    finally:
        client.close()

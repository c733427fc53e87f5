"""Find the Redis to talk to: ``--redis-url``, then ``SCHED_REDIS_URL``, then ``REDIS_URL``,
and with none of them the embedded server under the state folder (see embedded.py).

Every topology is one URL:

``redis://[[user]:pass@]host[:port][/db]``, ``rediss://...`` (TLS)
    one server (redis-py's own URL syntax and query options).
``unix://[[user]:pass@]/path/to/redis.sock[?db=N]``
    one server on a unix socket (the embedded server is one).
``redis+cluster://[[user]:pass@]host:port[,host:port...][/][?options]``, ``rediss+cluster://...``
    a Redis Cluster, from one or more seed nodes (the rest are discovered).
``redis+sentinel://[[user]:pass@]host:port[,host:port...]/master-name[?db=N][&sentinel_password=...]``
    the master that Sentinel names ``master-name``, found again after a failover. The
    URL's credentials are the master's; sentinels that require a password of their own
    take it from ``sentinel_password`` (and ``sentinel_username``), which may repeat the
    master's.

A URL without a password takes ``SCHED_REDIS_PASSWORD`` when that is set. Passwords
never appear in what this module says: :func:`mask_url` replaces them with ``***``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from functools import cache
from urllib.parse import parse_qsl, unquote, urlencode

import redis
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY, ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import AuthenticationError, AuthorizationError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from scheduler.model.errors import RedisUnavailable, SpecError
from scheduler.state.failover import (BRIEF_S, CLUSTER_NODE_TIMEOUT_MS, SENTINEL_DOWN_AFTER_MS, BoundedRetry,
                                      bound_from_detection, configured_bound_s, patient_connections, retry_within)
from scheduler.state.tls import with_tls_env

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel",)
PLAIN_SCHEMES = ("redis", "rediss", "unix")
PASSWORD_ENV = "SCHED_REDIS_PASSWORD"
_QUERY_PASSWORD_RE = re.compile(r"(?i)([?&][^=&#]*password=)[^&#]*")
CONNECT_TIMEOUT_S = 5  # a machine that is gone must not hang a connect for the OS's minutes
# What a call may raise when Redis is away or failing over, on any topology.
REDIS_ERRORS = (redis.RedisError, RedisClusterException, RedisUnavailable)


@cache
def _driver() -> dict:
    """redis-py's ``driver_info`` (what ``CLIENT SETINFO`` sends), made once per process and
    shared by its clients: without it each client reads redis-py's version from the
    installed package's metadata again (about 1 ms each, a few per worker process). Empty
    for a redis-py that does not take it."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


def resolve_url(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get("SCHED_REDIS_URL") or os.environ.get("REDIS_URL") or None


def connect(url: str | None = None, *, embedded_ok: bool = True) -> redis.Redis:
    """A client for the resolved URL, starting the embedded server when there is none.
    (For a cluster URL the client is a ``redis.cluster.RedisCluster``.)"""
    url = resolve_url(url)
    if url is None:
        if not embedded_ok:
            raise RedisUnavailable("no Redis URL given; pass --redis-url or set SCHED_REDIS_URL.")
        from scheduler.state.embedded import ensure_embedded

        url = ensure_embedded()
    try:
        client = client_for(url)
        client.ping()
    except (redis.RedisError, RedisClusterException) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {mask_url(url)}: {_reason(exc, url)}.") from None
    return client


def time_ms(reply) -> int:
    """Redis ``TIME`` (seconds, microseconds) in milliseconds: the one clock of leases,
    backoffs and measurements."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def client_for(url: str, *, decode_responses: bool = True, retrying: bool = True, wait_s: float | None = None):
    """A client for ``url`` (any of the forms above), with replies decoded to ``str``
    unless ``decode_responses`` is False (RQ wants bytes).

    Every client waits out a failover (see failover.py): for ``wait_s`` seconds, by default
    the topology's failover bound (:func:`failover_bound_s`); 0 waits for nothing. With
    ``retrying`` (the default) any call that meets a connection error or a timeout is
    resent with backoff within that time: right for reads and idempotent writes. Without
    it nothing is resent, for script calls that must not run twice (see ``Scripts``),
    whose callers decide what a failure means; such a client still waits to *connect*
    (nothing has been sent then).

    A plain or Sentinel client connects on first use; a cluster client reads the
    cluster's layout and command table here (from whichever node answers, waiting within
    the same time), so it may raise for an unreachable cluster."""
    url = with_tls_env(url)  # TLS files from SCHED_REDIS_CA, _CERT, _KEY (tls.py)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    bound = (lambda: wait_s) if wait_s is not None else (lambda: failover_bound_s(url))
    try:
        if scheme in CLUSTER_SCHEMES:
            return _cluster_client(url, decode_responses, retrying, bound)
        if scheme in SENTINEL_SCHEMES:
            client = _sentinel_client(url, decode_responses, retrying, bound)
        elif scheme in PLAIN_SCHEMES:
            extra = {} if scheme == "unix" else {"socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_keepalive": True}
            if _split(url)[2] is None and os.environ.get(PASSWORD_ENV):
                extra["password"] = os.environ[PASSWORD_ENV]
            client = redis.Redis.from_url(url, decode_responses=decode_responses, retry=_retry(retrying, bound),
                                          health_check_interval=30, **extra, **_driver())
        else:
            client = None
    except (ValueError, TypeError) as exc:  # a malformed URL: parse_url's words, without the URL
        raise SpecError(f"the Redis URL {mask_url(url)} is not valid: {_reason(exc, url)}.") from None
    if client is None:
        raise SpecError(f"the Redis URL {mask_url(url)} is not valid: use redis://, rediss://, unix://, "
                        f"redis+cluster://, rediss+cluster:// or redis+sentinel://.")
    if not retrying:
        patient_connections(client, bound)
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


# ----------------------------------------------------------------------------- the clients
def _retry(retrying: bool, bound) -> Retry:
    return BoundedRetry(bound) if retrying else Retry(NoBackoff(), retries=0)


class BackoffCluster(RedisCluster):
    """redis-py's RedisCluster, waiting between attempts at a command, and reading the
    command table from whichever node answers.

    After a connection error or a cluster that is down, redis-py re-reads the cluster's
    layout and tries again at once, as often as its retry object says (it takes only the
    count from it): a failover takes seconds (the node timeout, then an election), so
    every attempt would be spent within milliseconds. Here a command that still fails
    is tried again with backoff within the failover bound, as on the other topologies.
    (Pipelines keep redis-py's immediate retries: their queue is emptied when they fail.)"""

    def __init__(self, *args, backoff: Retry, **kwargs):
        self.backoff = backoff  # first: the constructor already sends commands
        super().__init__(*args, **kwargs)

    def execute_command(self, *args, **kwargs):
        return self.backoff.call_with_retry(lambda: super(BackoffCluster, self).execute_command(*args, **kwargs),
                                            lambda _error: None)

    def command(self, **kwargs):
        """``COMMAND`` from the first node that answers, masters first. redis-py's
        constructor asks its default node, the master of slot 0, which may be the master
        that is down; a master that answers becomes the default node instead."""
        nodes = sorted(self.get_nodes(), key=lambda node: node.server_type != PRIMARY)
        error: Exception = RedisClusterException("the cluster has no node")
        for node in nodes:
            try:
                table = self.get_redis_connection(node).command()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = exc
                continue
            if node.server_type == PRIMARY:
                self.nodes_manager.default_node = node
            return table
        raise error


def _split(url: str) -> tuple[str, str | None, str | None, list[tuple[str, int]], str, str]:
    """(scheme, username, password, [(host, port)...], path, query) of a URL whose
    host part may list several ``host:port``. Username and password are None when
    absent (unquoted when present)."""
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    at = rest.rfind("@")
    userinfo, rest = (rest[:at], rest[at + 1:]) if at >= 0 else ("", rest)
    hostlist, slash, path = rest.partition("/")
    username = password = None
    if at >= 0:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon and secret else None
    hosts = []
    for item in filter(None, hostlist.split(",")):
        if item.startswith("["):  # [ipv6]:port
            host, _, port = item[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
        if not host:
            raise ValueError(f"host {item!r} has no name")
        if port and not port.isdigit():
            raise ValueError(f"port {port!r} is not a number")
        hosts.append((host, int(port or 6379)))
    return scheme.lower(), username, password, hosts, slash + path, query


def _options(query: str, secure: bool) -> dict:
    """Connection options from a query string, typed by redis-py's own URL parser
    (``socket_timeout``, ``ssl_cert_reqs``...); with ``secure``, TLS."""
    options = parse_url(f"{'rediss' if secure else 'redis'}://localhost/?{query}" if query
                        else f"{'rediss' if secure else 'redis'}://localhost")
    for name in ("host", "port", "db"):
        options.pop(name, None)
    if secure:
        options.pop("connection_class", None)
        options["ssl"] = True
    return options


def _credentials(username: str | None, password: str | None) -> dict:
    if password is None:
        password = os.environ.get(PASSWORD_ENV) or None
    return {name: value for name, value in (("username", username), ("password", password)) if value is not None}


def _cluster_client(url: str, decode_responses: bool, retrying: bool, bound) -> RedisCluster:
    scheme, username, password, hosts, path, query = _split(url)
    if not hosts:
        raise ValueError("a cluster URL names at least one host:port")
    if path not in ("", "/", "/0"):
        raise ValueError("a Redis Cluster has only database 0")
    options = {"socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_keepalive": True,
               **_options(query, scheme.startswith("rediss"))}
    # redis-py re-reads the layout and tries again at once up to 3 times; BackoffCluster
    # waits and tries all that again within the failover bound (a worker's loop waits
    # longer on its own). Without retrying, nothing is resent.
    backoff = (BoundedRetry(bound, RedisCluster.ERRORS_ALLOW_RETRY) if retrying
               else Retry(NoBackoff(), retries=0, supported_errors=RedisCluster.ERRORS_ALLOW_RETRY))

    def build() -> BackoffCluster:
        # The constructor reads the layout from the first seed that answers and the
        # command table from the first node that answers: nothing that could run twice,
        # so a cluster in the middle of a failover is waited for, whether or not retrying.
        return BackoffCluster(startup_nodes=[ClusterNode(host, port) for host, port in hosts],
                              retry=Retry(NoBackoff(), 3 if retrying else 0), backoff=backoff,
                              decode_responses=decode_responses, **_credentials(username, password), **options)

    return retry_within(bound, build)


class SentinelConnection(SentinelManagedConnection):
    """redis-py's connection to the master Sentinel names, asking the sentinels again
    whenever it reconnects. redis-py asks only when a connection is taken from the pool,
    so a call retried on its connection after a failover went back to the dead master
    for as long as the retries lasted."""

    def connect_check_health(self, *args, **kwargs):
        if self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        return super().connect_check_health(*args, **kwargs)


def _sentinel_client(url: str, decode_responses: bool, retrying: bool, bound) -> redis.Redis:
    _, username, password, hosts, master, options, sentinel_kwargs = _sentinel_parts(url)
    db = options.pop("db")
    sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(master, redis_class=redis.Redis, db=db, decode_responses=decode_responses,
                               retry=_retry(retrying, bound), health_check_interval=30,
                               connection_class=SentinelConnection, **_credentials(username, password), **options)


def _sentinel_parts(url: str):
    """(scheme, username, password, hosts, master name, the master's connection options
    with its ``db``, the sentinels' own connection options) of a Sentinel URL."""
    scheme, username, password, hosts, path, query = _split(url)
    master = path.strip("/")
    if not hosts or not master or "/" in master:
        raise ValueError("a Sentinel URL is redis+sentinel://host:port[,host:port...]/master-name")
    params = dict(parse_qsl(query, keep_blank_values=True))
    db = params.pop("db", "0")
    if not db.isdigit():
        raise ValueError(f"db {db!r} is not a number")
    sentinel_auth = {name: value for name, value in (("username", params.pop("sentinel_username", None)),
                                                     ("password", params.pop("sentinel_password", None))) if value}
    options = {"socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_keepalive": True,
               **_options(urlencode(params), secure=False)}
    # Sentinels are asked in turn: one that does not answer is passed over at once
    # rather than retried (the master's connections retry; each retry asks again).
    sentinel_kwargs = {**{k: v for k, v in options.items() if k.startswith("socket_")}, **sentinel_auth,
                       "retry": Retry(NoBackoff(), 0), "decode_responses": True}
    return scheme, username, password, hosts, master, {**options, "db": int(db)}, sentinel_kwargs


# ----------------------------------------------------------------------------- the failover bound
PROBE_TIMEOUT_S = 1.0
_learned: dict[str, float] = {}  # URL -> bound, once its topology has said


def failover_bound_s(url: str) -> float:
    """How long a client of ``url`` waits out a failover (failover.py): ``SCHED_FAILOVER_S``,
    else learned from the topology the first time it is asked (a call has just failed),
    and remembered once the topology has answered."""
    configured = configured_bound_s()
    if configured is not None:
        return configured
    if url in _learned:
        return _learned[url]
    scheme = url.partition("://")[0].lower()
    try:
        if scheme in CLUSTER_SCHEMES:
            detection = _cluster_node_timeout_ms(url)
        elif scheme in SENTINEL_SCHEMES:
            detection = _sentinel_down_after_ms(url)
        else:
            return BRIEF_S
    except (ValueError, TypeError):
        return BRIEF_S
    if detection is not None:
        _learned[url] = bound_from_detection(detection)
    return bound_from_detection(detection)


def _probe(host: str, port: int, **options) -> redis.Redis:
    options.update(socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S,
                   retry=Retry(NoBackoff(), 0), decode_responses=True)
    return redis.Redis(host=host, port=port, **options, **_driver())


def _cluster_node_timeout_ms(url: str) -> int | None:
    """``cluster-node-timeout`` from the first seed that answers as a cluster node (Redis's
    default if it will not say); None if none does."""
    scheme, username, password, hosts, _, query = _split(url)
    for host, port in hosts:
        with _probe(host, port, **_credentials(username, password), **_options(query, scheme.startswith("rediss"))) as probe:
            try:
                with probe.pipeline(transaction=False) as pipe:
                    pipe.execute_command("CLUSTER", "INFO")
                    pipe.config_get("cluster-node-timeout")
                    info, config = pipe.execute(raise_on_error=False)
            except redis.RedisError:
                continue
        if isinstance(info, Exception):
            continue  # not a cluster node: no failover to wait for
        if isinstance(config, dict) and str(config.get("cluster-node-timeout", "")).isdigit():
            return int(config["cluster-node-timeout"])
        return CLUSTER_NODE_TIMEOUT_MS
    return None


def _sentinel_down_after_ms(url: str) -> int | None:
    """``down-after-milliseconds`` of the master from the first sentinel that knows it
    (Redis's default if it does not say); None if none does."""
    _, _, _, hosts, master, _, sentinel_kwargs = _sentinel_parts(url)
    options = {k: v for k, v in sentinel_kwargs.items() if k in ("username", "password")}
    for host, port in hosts:
        with _probe(host, port, **options) as probe:
            try:
                state = probe.sentinel_master(master)
            except redis.RedisError:
                continue
        value = state.get("down-after-milliseconds")
        return int(value) if isinstance(value, int) or str(value).isdigit() else SENTINEL_DOWN_AFTER_MS
    return None


def _reason(exc: BaseException, url: str) -> str:
    """The error's own words, with no password in them and no final full stop.
    (A cluster wraps the cause in a sentence of its own: the cause is what matters.)"""
    if isinstance(exc, RedisClusterException) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip().rstrip(".") or type(exc).__name__
    if isinstance(exc, AuthenticationError) and ("HELLO must be called" in text or "required" in text):
        text = f"it requires a password and none was given (in the URL or {PASSWORD_ENV})"
    # Sentinel lists what each sentinel said after the repr of its client: keep its address.
    text = re.sub(r"<redis\.client\.Redis\(<.*?,host=([^,>]+),port=(\d+),.*?>\)>\)>", r"sentinel \1:\2", text)
    text = scrub(text, url)
    if os.environ.get(PASSWORD_ENV):
        text = text.replace(os.environ[PASSWORD_ENV], "***")
    return " ".join(text.split())


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_redis(url: str, log=_stderr, *, first_s: float = 0.1, cap_s: float = 5.0, stop=None) -> None:
    """Return once Redis at ``url`` answers PING; until then retry with backoff (``first_s``
    doubling to ``cap_s``), calling ``log`` with one line per retry. For the long-running
    processes (workers, agents), which should outlive a Redis that is not there yet; one-shot
    commands fail fast instead (:func:`connect`). A refused password is final: it raises
    :class:`RedisUnavailable` at once. ``stop()`` returning true gives up (returns)."""
    delay = first_s
    while True:
        client = None
        try:
            client = client_for(url, retrying=False, wait_s=0)  # a cluster client reads the layout here
            client.ping()
            return
        except (AuthenticationError, AuthorizationError) as exc:
            # A wrong password does not fix itself: say so once, as one-shot commands do.
            raise RedisUnavailable(f"cannot reach Redis at {mask_url(url)}: {_reason(exc, url)}.") from None
        except (redis.RedisError, RedisClusterException) as exc:
            log(f"waiting for Redis at {mask_url(url)}: {_reason(exc, url)}")
        finally:
            if client is not None:
                client.close()
        if stop is not None and stop():
            return
        time.sleep(delay)
        delay = min(delay * 2, cap_s)

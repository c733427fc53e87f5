"""How long a client waits out a failover, and the retries that keep to it.

A failover takes the topology's own detection time and an election: a Redis Cluster
declares a master failed after ``cluster-node-timeout`` (15 s by default), Sentinel after
``down-after-milliseconds`` (30 s by default), and then promotes a replica within a
second or two. A client that gives up sooner turns every failover into errors, so every
client of ``sched`` waits a failing call out for the **failover bound**:

- ``SCHED_FAILOVER_S`` seconds, when set (any topology);
- otherwise, on a cluster or under Sentinel, ``2 x`` that detection time ``+ 5 s``, the
  detection time read from the topology itself when a call first fails (``CONFIG GET
  cluster-node-timeout`` from a cluster node, ``SENTINEL MASTER`` from a sentinel), or
  Redis's default when the topology answers but will not say;
- on one server, or when nothing of the topology answers (an outage, not a failover),
  2.5 s: a restart's blink, and a one-shot command still fails fast.

What may be retried within the bound: a retrying client resends any call (right for reads
and idempotent writes, see connection.py); a client that must not resend still waits to
*connect* (nothing has been sent yet, so nothing can run twice), through
:func:`patient_connections`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Callable

from redis.backoff import ExponentialBackoff
from redis.exceptions import (AuthenticationError, AuthorizationError, ConnectionError, RedisClusterException,
                              TimeoutError)
from redis.retry import Retry

from scheduler.model.errors import SpecError

BOUND_ENV = "SCHED_FAILOVER_S"
BRIEF_S = 2.5  # one server, or a topology of which nothing answers
CLUSTER_NODE_TIMEOUT_MS = 15_000  # Redis's defaults, for a topology that will not say its own
SENTINEL_DOWN_AFTER_MS = 30_000
FIRST_S, CAP_S = 0.05, 1.0  # the backoff between attempts: 50 ms doubling to 1 s


def configured_bound_s() -> float | None:
    """``SCHED_FAILOVER_S`` as seconds, or None when it is not set."""
    value = os.environ.get(BOUND_ENV)
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise SpecError(f"{BOUND_ENV} is {value!r}: give a number of seconds between 0 and 3600.")
    return seconds


def bound_from_detection(detection_ms: int | None) -> float:
    """The bound for a topology that detects a dead master in ``detection_ms`` (None: it
    did not answer, so this is no failover)."""
    if detection_ms is None:
        return BRIEF_S
    return 2 * detection_ms / 1000 + 5.0


def lasting(error: BaseException) -> bool:
    """Whether ``error`` will not go away by waiting: a refused password or permission.
    (A cluster client wraps the cause in an exception of its own: the chain is looked at.)"""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (AuthenticationError, AuthorizationError)):
            return True
        error = error.__cause__ or error.__context__
    return False


class BoundedRetry(Retry):
    """redis-py's Retry, bounded by time rather than by a count: a call that fails is tried
    again, with a backoff of 50 ms doubling to 1 s, until ``bound_s()`` seconds have passed
    since its first failure (``bound_s`` is asked then, so that learning the topology's
    failover time costs nothing while all goes well). A refused password is not retried."""

    def __init__(self, bound_s: Callable[[], float],
                 supported_errors: tuple = (ConnectionError, TimeoutError, socket.timeout)):
        super().__init__(ExponentialBackoff(cap=CAP_S, base=FIRST_S), retries=-1, supported_errors=supported_errors)
        self.bound_s = bound_s

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        failures, deadline = 0, None
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if lasting(error) or (is_retryable is not None and not is_retryable(error)):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.bound_s()
                if now >= deadline:
                    raise error
                time.sleep(min(CAP_S, FIRST_S * 2 ** (failures - 1), deadline - now))  # a last try at the bound

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__


def retry_within(bound_s: Callable[[], float], attempt: Callable,
                 retryable: tuple = (ConnectionError, TimeoutError, socket.timeout, RedisClusterException)):
    """``attempt()``, called again with backoff while it raises one of ``retryable`` (and
    the error is not :func:`lasting`), until the bound has passed since its first failure;
    then its last error is raised. For steps that send nothing that could run twice, such
    as building a cluster client (it reads the layout and the command table)."""
    return BoundedRetry(bound_s, retryable).call_with_retry(attempt, lambda _error: None)


class PatientConnect:
    """Mixed into a connection class: ``connect()`` is retried within the failover bound.
    Nothing is sent before a connection is made, so this is safe for a client that must
    never resend a command; its commands keep the client's own retry (none)."""

    failover_bound_s: Callable[[], float] = staticmethod(lambda: BRIEF_S)

    def connect(self):
        return BoundedRetry(self.failover_bound_s).call_with_retry(super().connect, lambda _error: self.disconnect())


def patient_connections(client, bound_s: Callable[[], float]) -> None:
    """Make ``client``'s pool open its connections with :class:`PatientConnect`: a Sentinel
    that has no master to give yet (``MasterNotFoundError``), or a master not answering,
    is waited for within ``bound_s()``. Done before the pool has opened any connection."""
    pool = client.connection_pool
    base = pool.connection_class
    pool.connection_class = type(f"Patient{base.__name__}", (PatientConnect, base),
                                 {"failover_bound_s": staticmethod(bound_s)})

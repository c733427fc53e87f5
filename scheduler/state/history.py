"""Who did what: the audit trail of jobs, nodes and the namespace.

Each action a person or a tool takes (submit, scale, stop, revert, drain, pause,
activate, quota and tenant changes...) is recorded once it has succeeded: one JSON entry
``{ts, action, by, details}`` at the end of a bounded list (``job:<id>:history``,
``node:<name>:history``, or the namespace's ``history``) and one ``audit`` event, in one
atomic step. ``by`` is the caller's: the Redis user this connection signed in as (``ACL
WHOAMI``, asked once per Store), or what the caller acts for (``ui:<name>`` from the
dashboard).

A submit that creates tasks is recorded by the script call that makes it
(``enqueue.lua``, ``enqueue_many.lua``: :class:`Submitted` says how), so the record and
the submit happen together or not at all, for no extra call. Every other action is
recorded after it, by ``history.lua`` (:meth:`HistoryStore.record_history`), on the
client that never resends (a resent ``RPUSH`` would record the action twice); its
failure does not undo or hide the action: it is logged, and the action's result stands.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import orjson
import redis
from redis.exceptions import NoPermissionError, NoScriptError, RedisClusterException

from scheduler.state.namespace import NamespaceStore

log = logging.getLogger("sched.history")

HISTORY_KEEP = 200  # entries kept per job, node and namespace (the oldest go)
_RECORDS_PER_ROUND_TRIP = 500
_EVENT_FIELDS = frozenset({"type", "action", "job", "node", "by", "ts"})  # the event's own fields


@dataclass(frozen=True)
class Record:
    """One action to record: on a job (``job``), a node (``node``), or the namespace
    (neither), done ``by`` someone (None: the connection's Redis user). ``details`` hold
    strings, whole numbers and booleans."""

    action: str
    by: str | None
    job: str = ""
    node: str = ""
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Submitted:
    """How to record a submit: as ``action`` (``submit``, or ``revert``), done ``by``
    someone (None: the connection's Redis user), with ``details`` beyond what every submit
    records (``version``, ``change``, ``tasks``, ``deployment``), and whether a submit that
    changed nothing is recorded too (``unchanged``)."""

    action: str = "submit"
    by: str | None = None
    details: dict = field(default_factory=dict)
    unchanged: bool = True

    def record(self, job: str, by: str | None, version: int, change: str, tasks: int,
               deployment: str | None = None) -> Record:
        details = {"version": version, "change": change, "tasks": tasks}
        if deployment and "deployment" not in self.details:
            details["deployment"] = deployment
        return Record(self.action, by, job=job, details={**details, **self.details})


def record_args(record: Record, by: str) -> list:
    """The record as the scripts read it (``record_at`` in ``lua/_lib.lua``)."""
    clash = _EVENT_FIELDS & record.details.keys()
    if clash:
        raise ValueError(f"history details may not be named {', '.join(sorted(clash))}")
    scope, name = ("job", record.job) if record.job else ("node", record.node) if record.node else ("", "")
    details = orjson.dumps(record.details).decode()
    return [HISTORY_KEEP, record.action, by, scope, name, details, len(record.details), *record.details]


class HistoryStore(NamespaceStore):
    def redis_user(self) -> str:
        """The Redis user of this Store's connection (``ACL WHOAMI``, asked once):
        ``default`` for a server without ACL users, or one too old to say; ``unknown`` for
        a user that may not ask (one not made by ``sched acl create``)."""
        user = getattr(self, "_redis_user", None)
        if user is None:
            try:
                user = self.client.execute_command("ACL", "WHOAMI")
            except NoPermissionError:
                user = "unknown"
            except redis.ResponseError:  # a Redis before 6 has no ACL: everyone is its default user
                user = "default"
            self._redis_user = user
        return user

    def record_history(self, records: list[Record]) -> int:
        """Write ``records`` (each an entry in its history list and an ``audit`` event),
        many per round trip. Returns how many were written; a Redis error is logged, not
        raised: the actions were done, and saying otherwise would mislead."""
        written = 0
        try:
            user = self.redis_user() if any(record.by is None for record in records) else ""
            for start in range(0, len(records), _RECORDS_PER_ROUND_TRIP):
                chunk = records[start:start + _RECORDS_PER_ROUND_TRIP]
                calls = [self._history_call(record, record.by or user) for record in chunk]
                for reloaded in (False, True):
                    pipe = self.scripts.once_client.pipeline(transaction=False)
                    for keys, args in calls:
                        self.scripts.queue(pipe, "history", keys, args)
                    try:
                        pipe.execute()
                        break
                    except NoScriptError:  # Redis lost its scripts (a restart): nothing of these ran
                        if reloaded:
                            raise
                        self.scripts.load_all()
                written += len(chunk)
        except (redis.RedisError, RedisClusterException) as exc:
            log.warning("%d action(s) done but not recorded in their history (%s)", len(records) - written, exc)
        return written

    def who(self, by: str | None) -> str:
        """``by``, or (None) this Store's Redis user: who an action is recorded as done by."""
        return by or self.redis_user()

    def _history_call(self, record: Record, by: str) -> tuple[list[str], list]:
        k = self.keys
        key = k.job_history(record.job) if record.job else k.node_history(record.node) if record.node else k.history
        return [key, k.stream, k.config], [self.events_arg, *record_args(record, by)]

    def read_history(self, *, job: str | None = None, node: str | None = None) -> list[dict]:
        """The history of a job, a node, or (neither given) the namespace: entries
        ``{ts, action, by, details}``, oldest first."""
        k = self.keys
        key = k.job_history(job) if job else k.node_history(node) if node else k.history
        return [orjson.loads(entry) for entry in self.client.lrange(key, 0, -1)]

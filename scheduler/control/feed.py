"""Following a namespace's events from its stream (docs/events.md): from a position or
in a consumer group, filtered by type, job and node, and one job's task states from a
consistent snapshot. ``Client.events``, ``Client.watch``, ``sched events`` and the
dashboard's activity page are built on it.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterator

from scheduler.model.errors import SpecError
from scheduler.state.store import Store
from scheduler.state.stream import BATCH, Entry, Follower, GroupFollower

EVENT_TYPES = ("task", "node", "job", "move", "capacity")
_ID = re.compile(r"^\d+-\d+$")
_AGE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LAST_SEQ = 18446744073709551615  # the largest sequence number of a stream id


def after_id(since: str, now_ms: int) -> str:
    """The stream id to read after, for ``since``: ``start`` (everything kept), ``now``
    (what comes next), an entry id (``1795305669501-0``: exactly what came after it), a
    time (ISO 8601, local unless it has an offset) or an age (``90s``, ``10m``, ``2h``,
    ``1d``: what came since then). Raises SpecError (one sentence) for anything else."""
    text = since.strip()
    if text == "start":
        return "0-0"
    if text == "now":
        return "$"
    if _ID.match(text):
        return text
    age = _AGE.match(text)
    if age:
        at_ms = now_ms - int(float(age.group(1)) * _UNIT_MS[age.group(2)])
    else:
        try:
            at_ms = int(datetime.fromisoformat(text).timestamp() * 1000)
        except ValueError:
            raise SpecError(f"since {since!r} is not start, now, an event id (such as 1795305669501-0), a time "
                            f"(such as 2026-11-22T10:00:00) or an age (such as 10m).") from None
    return "0-0" if at_ms <= 0 else f"{at_ms - 1}-{_LAST_SEQ}"  # the last id before that millisecond


def job_of(event: dict) -> str | None:
    """The job an event is about: a job event's id, a task event's job (from its id when the
    event has no ``job`` field: a task id is ``<job>.<index>``), a move's job; None for a
    node event."""
    kind = event.get("type")
    if kind == "job":
        return event.get("id")
    if kind == "move":
        return event.get("job")
    if kind == "task":
        return event.get("job") or str(event.get("id", "")).rpartition(".")[0] or None
    return None


def nodes_of(event: dict) -> set[str]:
    """The nodes an event names: a node event's node, a task event's node or nominated node,
    the nodes a move leaves and goes to."""
    if event.get("type") == "node":
        return {event.get("name", "")}
    if event.get("type") == "move":
        return {name for name in (event.get("from"), event.get("to")) if name}
    return {name for name in (event.get("node"), event.get("nominated_node")) if name}


@dataclass(frozen=True)
class EventFilter:
    """Which events to keep: of these types, about these jobs, naming these nodes (each
    empty: any)."""

    types: frozenset[str] = frozenset()
    jobs: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, types=(), jobs=(), nodes=()) -> EventFilter:
        if isinstance(types, str):
            types = (types,)
        if isinstance(jobs, str):
            jobs = (jobs,)
        if isinstance(nodes, str):
            nodes = (nodes,)
        unknown = sorted(set(types) - set(EVENT_TYPES))
        if unknown:
            raise SpecError(f"event type {unknown[0]!r} is not one of {', '.join(EVENT_TYPES)}.")
        return cls(frozenset(types), frozenset(jobs), frozenset(nodes))

    def matches(self, event: dict) -> bool:
        return ((not self.types or event.get("type") in self.types)
                and (not self.jobs or job_of(event) in self.jobs)
                and (not self.nodes or not self.nodes.isdisjoint(nodes_of(event))))


class EventFeed:
    """(stream id, event) pairs as they come: an iterator, ending after ``timeout``
    seconds without one (never, with None), and a context manager.

    In a consumer group an event is acknowledged once it is handled, that is once the
    next one is asked for (in batches, before each read); the one being handled when the
    loop is left is acknowledged only when a ``with`` block around it ends without an
    exception. Anything not acknowledged is delivered again (at least once). Events the
    filter leaves out count as handled."""

    def __init__(self, follower: Follower | GroupFollower, wanted: EventFilter, timeout: float | None = None):
        self.follower, self.wanted, self.timeout = follower, wanted, timeout
        self._batch: deque[Entry] = deque()
        self._handed: str | None = None  # the id of the event the caller is handling
        self._handled: list[str] = []  # handled, not yet acknowledged
        self._quiet_since = time.monotonic()

    def __iter__(self) -> EventFeed:
        return self

    def __next__(self) -> Entry:
        if self._handed is not None:
            self._handled.append(self._handed)
            self._handed = None
        while True:
            while self._batch:
                entry = self._batch.popleft()
                if self.wanted.matches(entry[1]):
                    self._handed = entry[0]
                    self._quiet_since = time.monotonic()
                    return entry
                self._handled.append(entry[0])
            self._acknowledge()
            wait = 1.0
            if self.timeout is not None:
                left = self.timeout - (time.monotonic() - self._quiet_since)
                if left <= 0:
                    raise StopIteration
                wait = min(wait, left)
            self._batch.extend(self.follower.next(wait))

    def _acknowledge(self) -> None:
        if self._handled and isinstance(self.follower, GroupFollower):
            self.follower.ack(self._handled)
        self._handled = []

    def close(self, handled: bool = False) -> None:
        """Acknowledge what was handled (with ``handled``, the event being handled too)."""
        if handled and self._handed is not None:
            self._handled.append(self._handed)
            self._handed = None
        self._acknowledge()

    def __enter__(self) -> EventFeed:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(handled=exc_type is None)


def follow(store: Store, since: str | None = None, group: str | None = None, consumer: str | None = None,
           wanted: EventFilter = EventFilter(), timeout: float | None = None, claim_idle_s: float = 60.0,
           batch: int = BATCH) -> EventFeed:
    """The namespace's events from its stream: after ``since`` (see :func:`after_id`; by
    default from now), or as ``consumer`` of the consumer group ``group`` (made, if new,
    to start after ``since``), taking up to ``batch`` entries per read."""
    if (group is None) != (consumer is None):
        raise SpecError("a consumer group needs both a group name and a consumer name.")
    if store.stream.maxlen() == 0:
        raise SpecError(f"the event stream of namespace {store.keys.namespace} is off (its bound is 0); "
                        f"keep events with `sched events keep N`.")
    start = after_id(since, store.now_ms()) if since is not None else "$"
    if group is not None:
        follower = GroupFollower(store.stream, group, consumer, start=start, claim_idle_ms=int(claim_idle_s * 1000),
                                 batch=batch)
    else:
        follower = Follower(store.stream, store.stream.last_id() if start == "$" else start)
    return EventFeed(follower, wanted, timeout)


@dataclass(frozen=True)
class TaskState:
    """One task of a watched job as it is now: its state, its node ("" while pending),
    and the stream id of the change (for the first of each task, the snapshot's)."""

    id: str
    state: str
    node: str
    stream_id: str = field(compare=False)


def watch(store: Store, job_id: str, timeout: float | None = None) -> Iterator[TaskState]:
    """Each task of the job as it is now, from one consistent snapshot (the tasks and the
    stream's position, read in one step), then each change of a task's state or node as
    it comes, new tasks included: nothing between the snapshot and the changes is missed
    or seen twice. Ends after ``timeout`` seconds without a change (never, with None)."""
    store.get_job(job_id)  # NotFound, in one sentence
    if store.stream.maxlen() == 0:
        raise SpecError(f"the event stream of namespace {store.keys.namespace} is off (its bound is 0); "
                        f"keep events with `sched events keep N` to watch a job.")
    position, tasks = store.job_snapshot(job_id)
    current: dict[str, tuple[str, str]] = {}
    for task_id, (state, node) in tasks.items():
        if state:
            current[task_id] = (state, node)
            yield TaskState(task_id, state, node, position)
    feed = EventFeed(Follower(store.stream, position), EventFilter(frozenset({"task"}), frozenset({job_id})), timeout)
    for stream_id, event in feed:
        now = (event.get("state", ""), event.get("node", ""))
        if current.get(event["id"]) != now:
            current[event["id"]] = now
            yield TaskState(event["id"], now[0], now[1], stream_id)

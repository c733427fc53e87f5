"""Events: following the namespace's events, watching a job's tasks, and the stream
that keeps them."""

from __future__ import annotations

from typing import Iterable, Iterator

from scheduler.client.base import ClientBase
from scheduler.control import feed
from scheduler.control.feed import EventFilter, TaskState


class EventClient(ClientBase):
    """Follow events and watch jobs; size the event stream."""

    def events(self, timeout: float | None = None, *, since: str | None = None, group: str | None = None,
               consumer: str | None = None, types: Iterable[str] | str = (), job: Iterable[str] | str = (),
               node: Iterable[str] | str = (), claim_idle: float = 60.0, batch: int = 500):
        """Follow the namespace's events (see ``docs/events.md``), until ``timeout`` seconds
        pass without one (forever with None).

        Called with neither ``since`` nor ``group`` (nor a filter), it yields each event as a
        dict, from the moment of the call, as it always has. Otherwise it reads the
        namespace's stream and yields ``(stream id, event)`` pairs, so that a program can
        store the id and carry on exactly after it (``since=id``) after a restart or a
        failover:

        - ``since``: ``"start"`` (everything the stream keeps), ``"now"`` (the default), an
          id, a time (ISO 8601) or an age (``"10m"``).
        - ``group`` and ``consumer``: read as one consumer of a consumer group (created to
          start after ``since`` if it does not exist): each event goes to one consumer of
          the group and is acknowledged once handled (when the next one is asked for; use
          ``with`` around the loop so that the last one is, too); a consumer's events left
          pending for ``claim_idle`` seconds (it died) are claimed by another. A read
          takes up to ``batch`` events for this consumer.
        - ``types`` (``task``, ``node``, ``job``), ``job`` and ``node`` keep only the events
          of those types, about those jobs, naming those nodes.

        The stream form returns an :class:`scheduler.control.feed.EventFeed`."""
        wanted = EventFilter.of(types, job, node)
        if since is None and group is None and wanted == EventFilter():
            subscription = self.store.subscribe()

            def follow() -> Iterator[dict]:
                with subscription:
                    yield from subscription.iter(timeout=timeout)

            return follow()
        return feed.follow(self.store, since=since, group=group, consumer=consumer, wanted=wanted, timeout=timeout,
                           claim_idle_s=claim_idle, batch=batch)

    def watch(self, job: str, timeout: float | None = None) -> Iterator[TaskState]:
        """The job's tasks as :class:`TaskState` (id, state, node, stream id): each as it is
        now, from one consistent snapshot, then each change of a task's state or node as it
        comes (new tasks too), none missed or repeated; until ``timeout`` seconds pass
        without a change (forever with None)."""
        return feed.watch(self.store, job, timeout)

    def stream_info(self) -> dict:
        """The event stream: entries kept now, the bound, bytes in memory, the ids of its
        oldest and newest entries ("" when empty), and its consumer groups."""
        stream = self.store.stream
        oldest, newest = stream.oldest_id(), stream.last_id()
        return {"namespace": self.namespace, "key": self.app.keys.stream, "entries": stream.length(),
                "maxlen": stream.maxlen(), "memory_bytes": stream.memory(),
                "oldest": oldest, "newest": "" if newest == "0-0" else newest, "groups": stream.groups()}

    def keep_events(self, entries: int) -> None:
        """Keep about ``entries`` events in the stream from now on (0: no stream)."""
        self.store.stream.set_maxlen(entries)

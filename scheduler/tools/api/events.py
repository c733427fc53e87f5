"""``/v1/events``: the namespace's events as server-sent events, with the filters of
``sched events`` (type, job, node) and its ``since``, resumable with ``Last-Event-ID``;
the stream's figures, and its bound (``sched events info``, ``sched events keep``).

The events are read as ``sched events`` reads them (``Client.events``): from the
namespace's stream after a position, filtered, across failovers. Each read waits about a
second (:mod:`sse`); a feed that met nothing for that long is opened again after the
last entry it read, so nothing is missed or repeated. A namespace that keeps no stream
(its bound is 0) is followed on its channel instead, which has no ids: only what is
published while the client listens, and neither ``since`` nor filters.
"""

from __future__ import annotations

import orjson

from scheduler.control.feed import EVENT_TYPES, after_id
from scheduler.model.errors import SpecError
from scheduler.tools.api import schemas as s
from scheduler.tools.api import sse
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import JOB_ID, NODE_NAME, OPERATOR, Call, Param, get, put
from scheduler.tools.ui.live import valid_id

POLL_S = 1.0


class EventSource:
    """The events of one client's stream (see the module's docstring)."""

    def __init__(self, sched, since: str | None, types=(), jobs=(), nodes=()):
        self.sched, self.filters = sched, {"types": types, "job": jobs, "node": nodes}
        self.feed = self.subscription = None
        if since is None and not (types or jobs or nodes) and sched.store.stream.maxlen() == 0:
            self.subscription = sched.store.subscribe()
            self.position = None
        else:
            self.feed = sched.events(since=since or "now", timeout=POLL_S, **self.filters)
            self.position = self.feed.follower.after

    def next(self) -> list[tuple[str | None, dict]]:
        if self.subscription is not None:
            text = self.subscription.follower.next(POLL_S)
            event = orjson.loads(text) if text is not None else None
            return [(None, event)] if isinstance(event, dict) else []
        try:
            return [next(self.feed)]
        except StopIteration:  # quiet for a while: go on after the last entry read
            self.feed = self.sched.events(since=self.feed.follower.after, timeout=POLL_S, **self.filters)
            return []

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()


def follow_events(call: Call):
    since = valid_id(call.headers.get("last-event-id")) or call.query["since"]
    if since is not None:
        try:
            after_id(since, 0)
        except SpecError as exc:
            raise Problem(400, str(exc)) from None
    source = EventSource(call.sched, since, call.query["type"], call.query["job"], call.query["node"])
    return sse.Stream(source, {"namespace": call.sched.namespace, "since": source.position})


def stream_info(call: Call):
    return call.sched.stream_info()


def keep_events(call: Call):
    with unprocessable():
        call.sched.keep_events(call.body["entries"])
    return call.sched.stream_info()


ROUTES = [
    get("/v1/events", follow_events, "Follow the namespace's events (server-sent events)", None, refusals=(409,),
        query=(Param("since", {"type": "string"}, "start (everything kept), now (the default), an event id, a "
                                                  "time (2026-11-22T10:00:00) or an age (10m); Last-Event-ID, "
                                                  "when sent, wins"),
               Param("type", {"type": "array", "items": {"type": "string", "enum": list(EVENT_TYPES)}},
                     "only events of this type (repeat it for several)"),
               Param("job", {"type": "array", "items": JOB_ID}, "only events about this job"),
               Param("node", {"type": "array", "items": NODE_NAME}, "only events naming this node")),
        description="`text/event-stream`: first `event: ready` (its `id:` the position the stream starts "
                    "after), then one `data:` line of JSON per event (docs/events.md) with its stream id as "
                    "`id:`. Reconnect with `Last-Event-ID` to go on exactly after the last one seen."),
    get("/v1/events/info", stream_info, "The event stream: entries, bound, memory, oldest and newest ids",
        s.STREAM_INFO),
    put("/v1/events/keep", keep_events, "Keep about this many events in the stream from now on", s.STREAM_INFO,
        role=OPERATOR, body=s.obj({"entries": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000}},
                   additionalProperties=False),
        refusals=(422,)),
]

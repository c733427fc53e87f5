"""Live updates: one server-sent-events stream per page, ``GET /api/events?ns=NAME``.

Each stream listens to its namespace's feed (:mod:`live`: one reader of the namespace's
Redis stream for every open page) and forwards every event as one SSE ``data:`` line,
with the event's stream id as its SSE ``id:``, so that a browser reconnecting (it sends
``Last-Event-ID``) gets what it missed, once, from the stream. Nothing polls Redis, and
when nothing has come for ``KEEPALIVE_S`` the stream sends an SSE comment so that proxies
keep the connection open and a client that went away is noticed. A page may name the
newest event it was rendered with (``?after=ID``): the stream goes on right after it.
The first message,
``event: ready`` (its ``id:`` the stream's position), says that everything announced
after it will arrive.

Streams never end by themselves, so a server that stops ends them first
(:func:`end_streams`, called by :mod:`server`): each closes as a complete response.
"""

from __future__ import annotations

import asyncio

import anyio
import orjson
from starlette.responses import StreamingResponse

from scheduler.tools.ui import inputs, live

KEEPALIVE_S = 15.0
RETRY_MS = 3000  # how long a browser waits before reconnecting a dropped stream


async def stream(request):
    app = inputs.scoped_app(request)  # a bad namespace is refused before the stream starts
    hub = request.app.state.live
    # Where the page's stream goes on from: what the browser saw last when it reconnects, or
    # the newest event a page was rendered with (?after=, the activity page).
    last_seen = live.valid_id(request.headers.get("last-event-id")) or live.valid_id(request.query_params.get("after"))

    async def messages():
        listener = await anyio.to_thread.run_sync(hub.join, app, asyncio.get_running_loop())
        try:
            backlog = await anyio.to_thread.run_sync(listener.catch_up, last_seen)
            since = last_seen if backlog else listener.last  # where a reconnection would start
            position = f"id: {since}\n" if since else ""
            yield (f"retry: {RETRY_MS}\nevent: ready\n{position}"
                   f"data: {orjson.dumps({'namespace': app.keys.namespace}).decode()}\n\n")
            for entry in backlog:
                yield _message(*entry)
            while True:
                try:
                    batch = await asyncio.wait_for(listener.queue.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                for entry in listener.fresh(batch):
                    yield _message(*entry)
        finally:
            hub.leave(listener)

    return EventStreamResponse(request.app.state.streams, messages(), media_type="text/event-stream",
                               headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def _message(entry_id: str | None, event: dict) -> str:
    head = "" if entry_id is None else f"id: {entry_id}\n"
    return f"{head}data: {orjson.dumps(event).decode()}\n\n"  # orjson escapes newlines: one data line


class EventStreamResponse(StreamingResponse):
    """A stream that :func:`end_streams` can end: it then finishes its response properly."""

    def __init__(self, streams: set, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.streams = streams

    async def __call__(self, scope, receive, send):
        complete = False

        async def tracked(message):
            nonlocal complete
            complete |= message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        with anyio.CancelScope() as scope_of_stream:
            self.streams.add(scope_of_stream)
            try:
                await super().__call__(scope, receive, tracked)
            finally:
                self.streams.discard(scope_of_stream)
        if scope_of_stream.cancelled_caught and not complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def end_streams(web) -> None:
    """End every open event stream of the dashboard ``web`` (on its event loop)."""
    for scope in list(web.state.streams):
        scope.cancel()

"""Live updates: one server-sent-events stream per namespace, ``GET /api/events?ns=NAME``.

Each stream SUBSCRIBEs to the namespace's ``sched:{ns}:events`` channel on a connection
of its own and forwards every message as one SSE ``data:`` line, as it arrives. Nothing
polls Redis: the stream waits on the subscribed socket, and when nothing has come for
``KEEPALIVE_S`` it sends an SSE comment so that proxies keep the connection open and a
client that went away is noticed. The first message, ``event: ready``, says the
subscription is in place (anything published after it will arrive).

Streams never end by themselves, so a server that stops ends them first
(:func:`end_streams`, called by :mod:`server`): each closes as a complete response.
"""

from __future__ import annotations

import anyio
import orjson
from starlette.responses import StreamingResponse

from scheduler.tools.ui import data, inputs

KEEPALIVE_S = 15.0
RETRY_MS = 3000  # how long a browser waits before reconnecting a dropped stream


async def stream(request):
    app = inputs.scoped_app(request)  # a bad namespace is refused before the stream starts

    async def messages():
        async with data.subscribe(app) as events:
            yield f"retry: {RETRY_MS}\nevent: ready\ndata: {orjson.dumps({'namespace': app.keys.namespace}).decode()}\n\n"
            while True:
                event = await events.next(KEEPALIVE_S)
                # orjson escapes newlines, so one event is always one data line
                yield ": keepalive\n\n" if event is None else f"data: {orjson.dumps(event).decode()}\n\n"

    return EventStreamResponse(request.app.state.streams, messages(), media_type="text/event-stream",
                               headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


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

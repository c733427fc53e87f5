"""Live updates: one server-sent-events stream per namespace, ``GET /api/events?ns=NAME``.

Each stream SUBSCRIBEs to the namespace's ``sched:{ns}:events`` channel on a connection
of its own and forwards every message as one SSE ``data:`` line, as it arrives. Nothing
polls Redis: the stream waits on the subscribed socket, and when nothing has come for
``KEEPALIVE_S`` it sends an SSE comment so that proxies keep the connection open and a
client that went away is noticed. The first message, ``event: ready``, says the
subscription is in place (anything published after it will arrive).
"""

from __future__ import annotations

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

    return StreamingResponse(messages(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

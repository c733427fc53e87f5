"""Server-sent events: a route whose ``answer`` is None returns a :class:`Source`, opened
in a worker thread (so that a bad request is still a problem document), and is answered
with ``text/event-stream``.

The stream opens with ``event: ready`` (``id:`` the position it starts after, when there
is one), then one ``data:`` line of JSON per event, with its stream id as ``id:``: a
client that reconnects sends the last one back as ``Last-Event-ID`` and goes on exactly
after it. A comment every :data:`KEEPALIVE_S` without events keeps proxies from closing
the connection and tells a client that went away. Each read waits at most a second, in a
thread of the streams' own pool, so that a client that left, or a server that stops,
costs at most that long, and open streams never hold the threads requests are served in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import anyio
import orjson

from scheduler.tools.ui.events import EventStreamResponse

KEEPALIVE_S = 15.0
RETRY_MS = 3000
STREAM_THREADS = 256  # streams reading at once; more wait their turn


class Source(Protocol):
    position: str | None  # where the stream starts (after this stream id), if it has ids

    def next(self) -> list[tuple[str | None, dict]]:
        """Blocking: the next (stream id, event) pairs, or none within about a second."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Stream:
    """What a streaming route's ``run`` returns: the source, and the ``ready`` message's data."""

    source: Source
    ready: dict


def limiter(app) -> anyio.CapacityLimiter:
    """The threads the streams of ``app`` (a Starlette app) read in, made on first use."""
    found = getattr(app.state, "stream_threads", None)
    if found is None:
        found = app.state.stream_threads = anyio.CapacityLimiter(STREAM_THREADS)
    return found


def response(request, source: Source, ready: dict) -> EventStreamResponse:
    threads = limiter(request.app)

    async def messages():
        try:
            position = f"id: {source.position}\n" if source.position else ""
            yield f"retry: {RETRY_MS}\nevent: ready\n{position}data: {orjson.dumps(ready).decode()}\n\n"
            quiet_since = time.monotonic()
            while True:
                batch = await anyio.to_thread.run_sync(source.next, limiter=threads, abandon_on_cancel=True)
                for entry_id, event in batch:
                    head = "" if entry_id is None else f"id: {entry_id}\n"
                    yield f"{head}data: {orjson.dumps(event).decode()}\n\n"  # orjson escapes newlines
                if batch:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= KEEPALIVE_S:
                    yield ": keepalive\n\n"
                    quiet_since = time.monotonic()
        finally:
            source.close()

    return EventStreamResponse(request.app.state.streams, messages(), media_type="text/event-stream",
                               headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

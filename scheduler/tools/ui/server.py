"""Running the dashboard, the HTTP API, or both (``scheduler/tools/web.py`` puts them on one
server) with uvicorn: the server, which ends the event streams as it stops, and the Host
headers it admits."""

from __future__ import annotations

import uvicorn

from scheduler.tools.ui import events

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
GRACE_S = 2.0  # how long stopping waits for requests in progress (event streams are ended at once)


class Server(uvicorn.Server):
    """uvicorn's server, ending the dashboard's event streams as it begins to stop: they
    would otherwise hold the graceful shutdown until its timeout."""

    def __init__(self, web, **options):
        super().__init__(uvicorn.Config(web, log_level="warning", timeout_graceful_shutdown=GRACE_S, **options))
        self.web = web

    async def shutdown(self, sockets=None) -> None:
        events.end_streams(self.web)
        await super().shutdown(sockets)


def allowed_hosts(host: str) -> list[str] | None:
    """The Host headers admitted when serving on ``host``: on loopback, only the loopback
    names, so that a page of another site cannot reach it by DNS rebinding; else any."""
    return list(LOOPBACK_NAMES) if host in LOOPBACK_NAMES else None


def run(web, host: str, port: int) -> None:
    """Serve ``web`` in the foreground until SIGINT or SIGTERM."""
    Server(web, host=host, port=port).run()

"""Running the dashboard, the HTTP API, or both (``scheduler/tools/web.py`` puts them on one
server) with uvicorn: the server, which ends the event streams as it stops, the Host
headers it admits, and the proxies whose forwarded headers it believes."""

from __future__ import annotations

import gc

import anyio.to_thread
import uvicorn

from scheduler.tools.ui import events

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
GRACE_S = 2.0  # how long stopping waits for requests in progress (event streams are ended at once)
REQUEST_THREADS = 32  # requests running their work at once in one process; more wait their turn
# The cyclic garbage collector of a serving process: a page of jobs makes a few thousand
# short-lived lists and dicts, none in a cycle, and fifty such requests at once keep enough
# of them alive that the default thresholds (700, 10, 10) walk them, and every object
# the process made at start, again and again: a quarter of the API's CPU under fifty
# clients (benchmarks-history.md). What was made before serving is frozen out of the collections,
# and they run less often (dead cycles still wait for at most one young collection).
COLLECTOR_THRESHOLDS = (50_000, 50, 50)


class Server(uvicorn.Server):
    """uvicorn's server, ending the dashboard's event streams as it begins to stop: they
    would otherwise hold the graceful shutdown until its timeout."""

    def __init__(self, web, forwarded_allow_ips: str = "", serving_process: bool = False, **options):
        # X-Forwarded-For and -Proto are believed only from the proxies named (none by
        # default: uvicorn's own default trusts 127.0.0.1, so any local process could
        # claim any address and walk around the API's lockout of an address).
        super().__init__(uvicorn.Config(web, log_level="warning", timeout_graceful_shutdown=GRACE_S,
                                        proxy_headers=bool(forwarded_allow_ips),
                                        forwarded_allow_ips=forwarded_allow_ips or None, **options))
        self.web = web
        self.serving_process = serving_process  # the process does nothing else (not a test's thread)

    async def startup(self, sockets=None) -> None:
        # The threads requests run their Redis calls in: the connections a process opens
        # to Redis stay within these and the event streams' (scheduler/tools/api/sse.py).
        anyio.to_thread.current_default_thread_limiter().total_tokens = REQUEST_THREADS
        if self.serving_process:
            gc.freeze()
            gc.set_threshold(*COLLECTOR_THRESHOLDS)
        await super().startup(sockets)

    async def shutdown(self, sockets=None) -> None:
        events.end_streams(self.web)
        await super().shutdown(sockets)


def allowed_hosts(host: str) -> list[str] | None:
    """The Host headers admitted when serving on ``host``: on loopback, only the loopback
    names, so that a page of another site cannot reach it by DNS rebinding; else any."""
    return list(LOOPBACK_NAMES) if host in LOOPBACK_NAMES else None


def run(web, host: str, port: int, forwarded_allow_ips: str = "") -> None:
    """Serve ``web`` in the foreground until SIGINT or SIGTERM."""
    Server(web, forwarded_allow_ips, serving_process=True, host=host, port=port).run()


def check_forwarded_allow_ips(text: str) -> str:
    """``--forwarded-allow-ips``: addresses or networks, comma-separated, or ``*``."""
    import ipaddress

    from scheduler.model.errors import SpecError

    for part in (p.strip() for p in text.split(",")):
        if part == "*":
            continue
        try:
            ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise SpecError(f"--forwarded-allow-ips {part!r} is not an address or network; give addresses such as "
                            f"10.0.0.5,10.1.0.0/16 (the proxies in front of the server), or *.") from None
    return text

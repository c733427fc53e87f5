"""The dashboard with the HTTP API under ``/v1/`` on one server (``sched ui``, the demo), or
the API alone: built, then served in the foreground or on a thread (tests and
``scripts/dashboard_screenshot.py``). It sits above both ``ui/`` and ``api/`` (the API
builds on the dashboard's web plumbing; neither builds the other's app)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

from scheduler.state.app import App
from scheduler.tools.api.app import WithDashboard, create_api
from scheduler.tools.ui.app import create_app
from scheduler.tools.ui.auth import AuthSettings
from scheduler.tools.ui.server import Server, allowed_hosts, run


def build(app: App, host: str, auth: AuthSettings | None = None, api_auth: bool = True, dashboard: bool = True):
    """The ASGI app for serving on ``host``: the dashboard with the HTTP API under
    ``/v1/`` (or, without ``dashboard``, the API alone). On loopback, the Host header
    must name loopback too, so that a page of another site cannot reach it by DNS
    rebinding. ``auth``: the dashboard's sign-in and metrics token (see auth.py);
    ``api_auth``: whether the API takes tokens (see scheduler/tools/api/access.py)."""
    hosts = allowed_hosts(host)
    if not dashboard:
        return create_api(app, auth=api_auth, allowed_hosts=hosts)
    web = create_app(app, allowed_hosts=hosts, auth=auth)
    return WithDashboard(create_api(app, auth=api_auth, allowed_hosts=hosts, streams=web.state.streams), web)


def serve(app: App, host: str, port: int, auth: AuthSettings | None = None, forwarded_allow_ips: str = "",
          **options) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (``options``: :func:`build`'s;
    ``forwarded_allow_ips``: the proxies whose forwarded headers are believed)."""
    run(build(app, host, auth, **options), host, port, forwarded_allow_ips)


def serve_workers(app: App, host: str, port: int, workers: int, forwarded_allow_ips: str = "",
                  **options) -> None:
    """Serve with ``workers`` processes on one listening socket (each its own event loop
    and Redis connections; the kernel hands each new connection to one of them), until
    SIGINT or SIGTERM, which go to every worker. A worker that dies stops the others:
    whatever runs ``sched api`` (systemd, a container) starts it again."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: redis-py opens its own connections after a fork
            code = 0
            try:
                Server(build(app, host, **options), forwarded_allow_ips, serving_process=True).run(sockets=[sock])
            except BaseException:  # noqa: BLE001 - a worker reports through its exit code
                code = 1
            os._exit(code)
        children.append(pid)

    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    code = 0
    while children:
        pid, status = os.wait()
        children.remove(pid)
        # uvicorn ends a worker it stopped on a signal by that signal again: not a failure
        if os.waitstatus_to_exitcode(status) not in (0, *(-s for s in stopping)) and not stopping:
            code = 1
            forward(signal.SIGTERM, None)
    sock.close()
    if code:
        raise SystemExit(code)


class Background:
    """The dashboard on a free loopback port, on a thread: ``with Background(app) as url:``
    (``options``: :func:`build`'s)."""

    def __init__(self, app: App, host: str = "127.0.0.1", auth: AuthSettings | None = None,
                 forwarded_allow_ips: str = "", **options):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.server = Server(build(app, host, auth, **options), forwarded_allow_ips, lifespan="off")
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="sched-ui")

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard server did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

"""The embedded default: a private ``redis-server`` under a state folder, on a unix socket.

With no Redis URL configured, ``sched`` starts one (AOF on, ``noeviction``) or reuses the
one it started before. It never stops a server it did not start, and ``sched`` itself
never stops it either: it keeps the cluster's state between commands, like a daemon.
The state folder is ``$SCHED_HOME``, else ``$XDG_STATE_HOME/sched``, else ``~/.local/state/sched``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import redis

from scheduler.model.errors import RedisUnavailable

INSTALL_HINT = (
    "no redis-server is installed; install it (for example 'apt-get install redis-server') "
    "or point sched at a running server with --redis-url or SCHED_REDIS_URL."
)


def state_dir() -> Path:
    if os.environ.get("SCHED_HOME"):
        return Path(os.environ["SCHED_HOME"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "sched"


def server_args(directory: Path, socket: Path, port: int = 0) -> list[str]:
    """The settings every server this project starts runs with (embedded, tests, bench)."""
    return [
        "--port", str(port),
        "--unixsocket", str(socket),
        "--unixsocketperm", "700",
        "--dir", str(directory),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--maxmemory-policy", "noeviction",
        "--save", "",
        "--protected-mode", "yes",
    ]


def start_server(directory: Path, socket: Path, *, port: int = 0, daemonize: bool = True) -> subprocess.Popen | None:
    """Start redis-server with :func:`server_args`; wait until it answers on the socket."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailable(INSTALL_HINT)
    directory.mkdir(parents=True, exist_ok=True)
    args = [binary, *server_args(directory, socket, port)]
    log = directory / "redis.log"
    if daemonize:
        args += ["--daemonize", "yes", "--pidfile", str(directory / "redis.pid"), "--logfile", str(log)]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        process = None
    else:
        args += ["--logfile", str(log)]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _answers(socket):
            return process
        if process is not None and process.poll() is not None:
            break
        time.sleep(0.02)
    raise RedisUnavailable(f"redis-server did not start; see {log}.")


def _answers(socket: Path) -> bool:
    if not socket.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(socket), socket_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def ensure_embedded() -> str:
    """The URL of the embedded server, starting it if it is not already running."""
    directory = state_dir()
    socket = directory / "redis.sock"
    if not _answers(socket):
        if shutil.which("redis-server") is None:
            raise RedisUnavailable(INSTALL_HINT)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two commands starting at once start one server
            if not _answers(socket):
                start_server(directory, socket)
    return f"unix://{socket}"


def embedded_status() -> dict:
    """Whether the embedded server answers, with its URL, folder and pid (``sched server status``)."""
    directory = state_dir()
    socket = directory / "redis.sock"
    running = _answers(socket)
    pid = None
    if running:
        try:
            pid = int(redis.Redis(unix_socket_path=str(socket), socket_timeout=5).info("server")["process_id"])
        except (redis.RedisError, OSError, KeyError, ValueError):
            pass
    return {"running": running, "url": f"unix://{socket}", "directory": str(directory), "pid": pid}


def stop_embedded(timeout_s: float = 10.0) -> bool:
    """Stop the embedded server if it runs (its AOF is written first, so the cluster's
    state is there next time); returns whether it was running. Never touches any other
    server: only the one on the state folder's socket."""
    status = embedded_status()
    if not status["running"]:
        return False
    socket = state_dir() / "redis.sock"
    try:
        redis.Redis(unix_socket_path=str(socket), socket_timeout=timeout_s).shutdown()
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the server closes the connection as it exits
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _answers(socket) and (status["pid"] is None or not _pid_alive(status["pid"])):
            return True
        time.sleep(0.02)
    raise RedisUnavailable(f"the embedded redis-server (pid {status['pid']}) did not stop within {timeout_s:g} s.")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

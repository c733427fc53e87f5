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

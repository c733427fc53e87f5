"""A redis-server of a test's own that the test may pause, kill and start again from its
append-only file, on the same unix socket (so every client finds it again).

It runs with ``appendfsync always``: a write it acknowledged is on disk before the
reply, so a SIGKILL loses nothing acknowledged, as the fault tests assume.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from scheduler.state.embedded import server_args

START_TIMEOUT_S = 30.0


class RestartableRedis:
    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.socket = directory / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        """Start it (again: from its append-only file) and wait until it answers."""
        args = [shutil.which("redis-server"), *server_args(self.directory, self.socket),
                "--appendfsync", "always", "--logfile", str(self.directory / "redis.log")]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.answers():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"redis-server did not start; see {self.directory / 'redis.log'}")

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1).ping())
        except (redis.RedisError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL: everything it acknowledged is in its append-only file."""
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def signal(self, sig) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

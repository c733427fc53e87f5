"""``sched simulate``: replay a workload through the production scheduler on a virtual clock
and report how well it placed (docs/simulate.md).

``trace.py`` (the JSON-lines format), ``google.py`` and ``alibaba.py`` (public traces),
``generate.py`` (synthetic traces), ``replay.py`` (one replay), ``measure.py`` (what it
records), ``report.py`` (the figures), ``compact.py`` (the fewest nodes), ``page.py``
(the HTML page and its plots).
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from scheduler.tools.simulate.replay import Replay, Settings
from scheduler.tools.simulate.report import summarise
from scheduler.tools.simulate.trace import Trace

__all__ = ["Settings", "private_redis", "simulate"]


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of the replay's own (a temporary folder, a unix socket), stopped after."""
    from scheduler.state.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="sched-simulate-"))
    process = start_server(directory, directory / "redis.sock", daemonize=False)
    try:
        yield f"unix://{directory / 'redis.sock'}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


class Simulator:
    """Replays on one server, one after another, each in the namespace ``namespace``,
    emptied after each: its name is in what some explanations say (a quota's), so every
    replay of a trace reads the same."""

    def __init__(self, url: str, namespace: str = "simulate", progress=None):
        self.url, self.namespace, self.progress = url, namespace, progress
        self.runs = 0

    def replay(self, trace: Trace, settings: Settings) -> dict:
        self.runs += 1
        replay = Replay(trace, settings, self.url, self.namespace)
        try:
            replay.run(self.progress)
            return summarise(replay)
        finally:
            replay.store.clear_namespace()
            replay.app.close()


def simulate(trace: Trace, settings: Settings | None = None) -> dict:
    """Replay ``trace`` once, on a private server, and report."""
    with private_redis() as private:
        return Simulator(private).replay(trace, settings or Settings())

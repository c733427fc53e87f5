"""What every ``sched bench`` run does around its scenario: a private ``redis-server`` (or
the one given), an empty namespace, nodes registered in pipelined chunks, gated worker
processes (the supervisor of ``sched worker --concurrency``) and reading Redis's clock,
counters, memory and CPU (``INFO``) and the workers' first claim.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from scheduler import native
from scheduler.control.processes import process
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.model import Node
from scheduler.model.errors import SpecError
from scheduler.state.app import App

DEFAULT_NAMESPACE = "bench"
REGISTER_CHUNK = 500  # node_put calls per pipeline round trip
LEASE_MS = 30_000


def register_nodes(app: App, nodes: list[Node], advance: Callable[[int], None] | None = None,
                   chunk: int = REGISTER_CHUNK) -> None:
    """Register new nodes, ``chunk`` per round trip (:meth:`Store.put_new_nodes`)."""
    app.store.put_new_nodes(nodes, chunk, advance)


# ----------------------------------------------------------------------------- redis
@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    """``url`` as given, or a private redis-server for the duration of the block."""
    if url:
        yield url
        return
    from scheduler.state.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="sched-bench-"))
    socket = directory / "redis.sock"
    process = start_server(directory, socket, daemonize=False)
    try:
        yield f"unix://{socket}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def prepare_namespace(app: App, clear: bool) -> None:
    """Make sure the namespace is empty: cleared when the bench owns it, else refused."""
    if app.store.namespace_empty():
        return
    if not clear:
        raise SpecError(f"namespace {app.keys.namespace!r} is not empty; the benchmark needs an empty "
                        f"namespace (its own, {DEFAULT_NAMESPACE!r}, is cleared before each run).")
    app.store.clear_namespace()


def redis_info(app: App) -> dict:
    return app.store.server_usage()


def machine() -> dict:
    """What the numbers were measured on: CPUs, the load (other processes compete for them)
    and whether the hot path ran compiled (:mod:`scheduler.native`)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2), "hot_path": native.STATE}


def redis_now_ms(app: App) -> int:
    return app.store.now_ms()


# ----------------------------------------------------------------------------- workers
def worker_processes(url: str, namespace: str, count: int, batch_size: int, until_idle: bool, seed: int,
                     percentage_of_nodes: int | None = None, fair_window: int | None = None):
    """``count`` gated worker processes (the supervisor of ``sched worker --concurrency``),
    each with its own tie-breaking seed."""
    extra = {} if fair_window is None else {"fair_window": fair_window}
    configs = [WorkerConfig(batch_size=batch_size, lease_ms=LEASE_MS, until_idle=until_idle,
                            placement=PlacementOptions(seed=seed * 1000 + i,
                                                       percentage_of_nodes_to_score=percentage_of_nodes), **extra)
               for i in range(count)]
    return process("worker-processes")(url, namespace, configs, gated=True, name="bench-worker")


def read_stats(app: App) -> dict[str, int]:
    return app.store.stats()


class ClaimWatch:
    """Notices the first claim: the earliest lease deadline in ``q:inflight`` minus the
    lease length is when it was taken (exact while its tasks are still in flight, and
    never later than the poll's own Redis TIME). If every claimed task was committed
    before the first poll, all that is known is that the claim came after the workers'
    release (``released_ms``), which then stands for it."""

    def __init__(self, app: App, released_ms: int):
        self.app = app
        self.base = app.queue.claim_probe()[0]
        self.released_ms = released_ms
        self.first_ms: int | None = None

    def poll(self) -> bool:
        if self.first_ms is not None:
            return True
        cycle, earliest, now = self.app.queue.claim_probe()
        if cycle <= self.base:
            return False
        self.first_ms = min(now, earliest - LEASE_MS) if earliest is not None else self.released_ms
        return True

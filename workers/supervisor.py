"""Scheduler worker processes: start N of them, hold them at a gate if asked, stop them
with SIGTERM, and collect what each reports (its stats and its CPU time).

``sched worker --concurrency N``, ``sched demo`` and ``sched bench`` all run their
workers through :class:`WorkerProcesses`. A parent that runs no other thread forks its
children: they start at once with everything imported (a spawned child spends about
0.3 s importing the scheduler, numpy and redis), and with one thread there is no lock
another thread could hold across the fork. A parent with threads spawns them instead,
so that each starts clean. Either way a child opens its own connections.

A forking parent reads every node once and its children start from that copy (as
kube-scheduler's informers sync one cache): N workers starting together cost Redis one
read of the cluster instead of N. Anything that changes meanwhile (a repair on start
included) is on the change feed, which each child follows from the copy's sequence.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections import defaultdict
from dataclasses import replace

from redis.exceptions import RedisError

from scheduler.control.worker_config import WorkerConfig
from scheduler.model.errors import RedisUnavailable, SchedError
from scheduler.state.acl import is_refusal
from scheduler.state.app import App
from scheduler.state.node_cache import NodeCache
from scheduler.tools import logs
from scheduler.state.queue import QueueConfig
from workers.run import run_one


def _child(url: str, namespace: str, config: WorkerConfig, queue_config: QueueConfig | None, results,
           gate, nodes) -> None:
    """One worker process: say it has started, wait at the gate, run a worker loop, then
    report its stats and its own CPU time."""
    # Forked: what came from the parent is never garbage here; frozen, the collector
    # neither walks it nor writes to its pages (each write copies a page).
    gc.freeze()
    if os.environ.get(logs.ENV_LEVEL):  # `sched worker` chose how to log; bench and demo keep children quiet
        logs.configure()
    results.put({"started": os.getpid()})
    if gate is not None:
        gate.wait()
    before = _cpu_s()
    try:
        stats = run_one(url, namespace, config, queue_config, nodes)
    except Exception as exc:
        if not isinstance(exc, SchedError) and not is_refusal(exc):
            raise
        results.put({"pid": os.getpid(), "error": exc})  # the user's to fix (a password, a role): said once
        sys.exit(1)
    results.put({"pid": os.getpid(), "stats": stats, "cpu_s": _cpu_s() - before})


def _cpu_s() -> float:
    """User and system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _context():
    """Fork while this process runs no other thread (see the module's docstring), else spawn."""
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _read_nodes(url: str, namespace: str) -> tuple[tuple[int, dict, dict] | None, float]:
    """Every node of the namespace with its change sequence and the ready nodes' capacity,
    read once here for all the children to fork with (each would otherwise read them all
    itself), and the CPU it took; None when Redis does not answer yet (each child then
    waits and reads)."""
    before = _cpu_s()
    try:
        app = App(redis_url=url, namespace=namespace)
        try:
            cache = NodeCache(app.store)
            cache.refresh()
            nodes = cache.seq, cache.nodes, cache.ready_capacity
        finally:
            app.close()
    except (RedisError, RedisUnavailable):
        nodes = None
    return nodes, _cpu_s() - before


class WorkerProcesses:
    """One process per config (forked or spawned: :func:`_context`). With ``gated``, the
    worker loops wait for :meth:`release` after starting (so that none has a head start)."""

    def __init__(self, url: str, namespace: str, configs: list[WorkerConfig],
                 queue_config: QueueConfig | None = None, gated: bool = False, name: str = "sched-worker"):
        self._ctx = _context()
        self.start_method = self._ctx.get_start_method()
        self._launch = (url, namespace, configs, queue_config, name)
        self.read_cpu_s = 0.0
        self.results = self._ctx.Queue()
        self.gate = self._ctx.Event() if gated else None
        self.reports: list[dict] = []
        self.errors: list[Exception] = []  # what children that could not run said (one sentence each)
        self.started: set[int] = set()
        self.processes: list = []

    def start(self) -> None:
        """Start the processes (a forking parent reads the nodes for them first: part of
        starting, timed with it)."""
        url, namespace, configs, queue_config, name = self._launch
        nodes = None
        if self.start_method == "fork" and isinstance(namespace, str):  # one cell (see workers/cells.py)
            nodes, self.read_cpu_s = _read_nodes(url, namespace)
        self.processes = [self._ctx.Process(target=_child, args=(url, namespace, config, queue_config, self.results,
                                                                 self.gate, nodes), name=f"{name}-{i}", daemon=False)
                          for i, config in enumerate(configs)]
        for process in self.processes:
            process.start()

    def release(self) -> None:
        """Let every gated worker loop run, all at once."""
        if self.gate is not None:
            self.gate.set()

    def alive(self) -> bool:
        self._drain()
        return any(p.is_alive() for p in self.processes)

    def _drain(self, timeout: float = 0.0) -> None:
        while len(self.reports) + len(self.errors) < len(self.processes):
            try:
                message = self.results.get(timeout=timeout) if timeout else self.results.get_nowait()
            except queue.Empty:
                return
            if "started" in message:
                self.started.add(message["started"])
            elif "error" in message:
                self.errors.append(message["error"])
            else:
                self.reports.append(message)

    def wait_started(self, timeout: float = 60.0) -> None:
        """Until every process has started (imported everything, about to run)."""
        deadline = time.monotonic() + timeout
        while len(self.started) < len(self.processes) and time.monotonic() < deadline and self.alive():
            self._drain(timeout=0.05)

    def stop(self) -> None:
        """Ask every worker to finish or hand back its batch and exit (SIGTERM)."""
        self.release()
        for process in self.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the processes to exit; after ``timeout`` seconds, kill what is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.alive() and (deadline is None or time.monotonic() < deadline):
            self._drain(timeout=0.2)
        self._drain(timeout=1.0)
        for process in self.processes:
            if process.pid is None:
                continue  # never started
            process.join(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self._drain()

    @property
    def crashed(self) -> int:
        """Processes that exited abnormally."""
        return sum(1 for p in self.processes if p.exitcode not in (0, None))

    def totals(self) -> tuple[dict[str, int], float]:
        """The summed stats of the workers that reported, and their CPU seconds (with
        what reading the nodes for them took this process)."""
        stats: dict[str, int] = defaultdict(int)
        cpu = self.read_cpu_s
        for report in self.reports:
            cpu += report["cpu_s"]
            for name, value in report["stats"].items():
                stats[name] += value
        return dict(stats), cpu

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.join(timeout=30)


def run_workers(url: str, namespace: str, concurrency: int, config: WorkerConfig,
                queue_config: QueueConfig | None = None) -> dict[str, int]:
    """Run ``concurrency`` workers (one in this process, or that many child processes) until
    they stop; SIGTERM or Ctrl-C lets each finish its batch. Returns their summed stats,
    with ``crashed``: how many processes exited abnormally."""
    if concurrency == 1:
        return run_one(url, namespace, config, queue_config)
    # Each child has its own counters: with --metrics-port P, child i serves on P + i.
    configs = [replace(config, metrics_port=config.metrics_port + i) if config.metrics_port else config
               for i in range(concurrency)]
    processes = WorkerProcesses(url, namespace, configs, queue_config)
    processes.start()
    previous = {sig: signal.signal(sig, lambda *_: processes.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        processes.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if processes.errors:
        raise processes.errors[0]
    totals, _cpu = processes.totals()
    totals["crashed"] = processes.crashed
    return totals

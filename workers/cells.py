"""One worker process serving several cells (namespaces), fairly.

``sched worker --namespace a --namespace b`` or ``--all-namespaces``: a
:class:`SchedulerWorker` per cell, each with its own :class:`App` (its own connection:
on a Redis Cluster a client's default node, where ``TIME`` is read, is its cell's
master), stepped in turn: one batch per cell that has work, round-robin, so a busy cell
cannot starve the others (each gets at most one batch per turn, whatever its queue).
With ``--all-namespaces`` the cells are those of the registry ``sched:namespaces``,
read again every ``follow_every_s`` seconds, so a cell created later is served too.
"""

from __future__ import annotations

import gc
import logging
import signal
import time

import redis

from scheduler.control.worker_config import WorkerConfig
from scheduler.state.app import App
from scheduler.state.queue import QueueConfig
from workers.scheduler_worker import SchedulerWorker
from workers.startup import redis_answered, repair_on_start
from workers.stats import WorkerStats

log = logging.getLogger("sched.worker")

FOLLOW_EVERY_S = 3.0


class CellWorkers:
    """Scheduler workers for several cells in one process. ``namespaces`` empty = every
    namespace of the registry, followed as it grows."""

    def __init__(self, url: str, namespaces: list[str] | tuple[str, ...], config: WorkerConfig,
                 queue_config: QueueConfig | None = None, follow_every_s: float = FOLLOW_EVERY_S):
        self.url, self.config, self.queue_config = url, config, queue_config
        self.follow_all = not namespaces
        self.follow_every_s = follow_every_s
        self.workers: dict[str, SchedulerWorker] = {}
        self._registry = App(redis_url=url) if self.follow_all else None
        self._last_follow = 0.0
        self._stopping = False
        for namespace in namespaces:
            self._add(namespace)

    def _add(self, namespace: str) -> None:
        app = App(redis_url=self.url, namespace=namespace, queue_config=self.queue_config,
                  wait_replicas=self.config.wait_replicas)
        repair_on_start(app, self.config)
        worker = SchedulerWorker(app, self.config, name=f"{namespace}/worker")
        worker._load_nodes()
        self.workers[namespace] = worker
        log.info("serving cell %s", namespace)

    def follow(self, force: bool = False) -> None:
        """With every namespace: start serving the cells registered since the last look."""
        now = time.monotonic()
        if not self.follow_all or (not force and now - self._last_follow < self.follow_every_s):
            return
        self._last_follow = now
        for namespace in sorted(self._registry.store.namespaces() - set(self.workers)):
            self._add(namespace)

    def stop(self, *_args) -> None:
        self._stopping = True
        for worker in self.workers.values():
            worker.stop()

    def run(self) -> dict[str, int]:
        idle = 0.001
        while not self._stopping:
            try:
                self.follow()
            except (redis.RedisError, OSError) as exc:
                log.warning("could not read the namespace registry: %s", exc)
            claimed = 0
            for worker in list(self.workers.values()):  # one batch per cell per turn
                if self._stopping:
                    break
                claimed += self._turn(worker)
            if claimed:
                idle = 0.001
                continue
            if self.config.until_idle and self._all_idle():
                break
            if not self._wait_for_work():
                time.sleep(idle)
                idle = min(idle * 2, self.config.idle_sleep_max_s)
        for worker in self.workers.values():
            try:
                worker._release_ahead()
                worker.report()
            except Exception:
                log.exception("%s: could not hand back its next batch or report its last counts", worker.name)
        return self.stats()

    def _wait_for_work(self) -> bool:
        """Nothing claimed in any cell: on one server, wait on every cell's ``q:wake`` at
        once (one ``BLPOP``) until the next upkeep, and say so; False on a Redis Cluster,
        where the cells' lists are in different slots (the caller polls instead)."""
        queues = [worker.app.queue for worker in self.workers.values()]
        if not queues or not queues[0].on_one_server:
            return False
        try:
            queues[0].wait_for_work(self.config.maintain_every_s, others=queues[1:])
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("waiting for work: Redis did not answer (%s)", exc)
            return False
        return True

    def _turn(self, worker: SchedulerWorker) -> int:
        try:
            worker.maintain()
            claimed = worker.step()
            if not claimed:
                worker.report()
            return claimed
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # this cell's shard away: the others go on
            log.warning("%s: Redis did not answer (%s)", worker.name, exc)
        except Exception:  # what was claimed comes back when its lease expires
            log.exception("%s: batch failed", worker.name)
        return 0

    def _all_idle(self) -> bool:
        try:
            self.follow(force=True)
            return all(worker.idle() for worker in self.workers.values())
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    def stats(self) -> dict[str, int]:
        total = WorkerStats().as_dict()
        for worker in self.workers.values():
            for name, value in worker.stats.as_dict().items():
                total[name] += value
        total["cells"] = len(self.workers)
        return total


def run_cells(url: str, namespaces, config: WorkerConfig, queue_config: QueueConfig | None = None) -> dict:
    """Serve ``namespaces`` (every namespace when empty) in this process until SIGTERM or
    Ctrl-C (or idle, if configured); returns the summed stats."""
    if not redis_answered(url):
        return WorkerStats().as_dict()
    cells = CellWorkers(url, list(namespaces), config, queue_config)
    signal.signal(signal.SIGTERM, cells.stop)
    signal.signal(signal.SIGINT, cells.stop)
    gc.freeze()
    return cells.run()

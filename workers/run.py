"""What a worker process serves: one cell (a :class:`SchedulerWorker`) or several
(workers/cells.py), until SIGTERM or Ctrl-C (or idle, if configured). Each process of
workers/supervisor.py runs :func:`run_one`."""

from __future__ import annotations

import gc
import logging
import os
import signal

from scheduler.control.worker_config import WorkerConfig
from scheduler.model import Node, SchedError
from scheduler.state.app import App
from scheduler.state.queue import QueueConfig
from workers import metrics
from workers.cells import run_cells
from workers.scheduler_worker import SchedulerWorker
from workers.startup import redis_answered, repair_on_start
from workers.stats import WorkerStats

log = logging.getLogger("sched.worker")


def run_one(url: str, namespace: str, config: WorkerConfig, queue_config: QueueConfig | None = None,
            nodes: tuple[int, dict[str, Node], dict[str, int]] | None = None) -> dict:
    """One worker loop in this process (several cells when ``namespace`` is a list) until
    SIGTERM or Ctrl-C (or idle, if configured); returns its stats. ``nodes``: every node as read by the parent, the change
    sequence that copy is current at and the ready nodes' capacity (see :meth:`NodeCache.adopt`)."""
    if not isinstance(namespace, str):  # several cells (a list; empty = every namespace): workers/cells.py
        return run_cells(url, namespace, config, queue_config)
    if not redis_answered(url):
        return WorkerStats().as_dict()
    app = App(redis_url=url, namespace=namespace, queue_config=queue_config, wait_replicas=config.wait_replicas)
    repair_on_start(app, config)
    worker = SchedulerWorker(app, config)
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    log.info("%s started: namespace %s, Redis %s, %s", worker.name, namespace, app.display_url,
             f"metrics on :{config.metrics_port}/metrics" if config.metrics_port else "no metrics port",
             extra={"fields": {"namespace": namespace, "redis": app.display_url, "metrics_port": config.metrics_port,
                               "batch_size": config.batch_size, "pid": os.getpid()}})
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    try:
        app.store.check_layout()
    except SchedError as exc:  # a namespace of another key layout: say so once and serve nothing
        log.error("%s: %s", worker.name, exc)
        return WorkerStats().as_dict()
    if nodes is not None:
        worker.cache.adopt(*nodes)
    worker._load_nodes()
    # The process is the worker's own: what exists now (modules, the copy of the nodes) lives
    # as long as it does, and a full collection walking it stalls a batch for ~30 ms.
    gc.freeze()
    return worker.run().as_dict()

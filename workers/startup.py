"""What a worker process does before it serves: wait for Redis (one not up yet is waited
for, not a crash), and repair a namespace's bookkeeping when ``--repair-on-start`` asks."""

from __future__ import annotations

import logging
import signal

from scheduler.control.worker_config import WorkerConfig
from scheduler.state.app import App
from scheduler.state.connection import wait_for_redis

log = logging.getLogger("sched.worker")


def redis_answered(url: str) -> bool:
    """Wait until Redis answers at ``url``; False when SIGTERM or Ctrl-C came first."""
    stopped: list[int] = []  # SIGTERM while still waiting for Redis
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.append(1))
    wait_for_redis(url, stop=lambda: bool(stopped))  # a Redis not up yet is waited for, not a crash
    return not stopped


def repair_on_start(app: App, config: WorkerConfig) -> None:
    """``--repair-on-start``: make the namespace's bookkeeping agree with its tasks
    (``sched audit --repair``) before serving it. Off unless asked: the repair is not atomic
    with the commits of other workers already running (see docs/reliability.md)."""
    if not config.repair_on_start:
        return
    from scheduler.control.audit import repair

    try:
        done = repair(app.store)
    except Exception:
        log.exception("%s: the repair on start failed", app.keys.namespace)
        return
    if done["problems"]:
        log.warning("%s: repaired %d problem(s) on start: %s", app.keys.namespace, len(done["problems"]),
                    "; ".join(done["problems"][:5]))

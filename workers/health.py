"""Health checks of the tasks running on one node, run by its agent (docs/deployments.md).

A thread of the agent looks at the node's running tasks a few times a second. A task
whose job has a ``health`` block is checked every ``interval``: a command (healthy on exit
0), an HTTP GET of ``http://127.0.0.1:<port><path>`` (2xx or 3xx) or a TCP connect, each
within ``timeout``. It is ``starting`` until a check passes, then ``healthy``; after
``failures`` failures in a row (failures during ``grace`` after it started do not count)
it is ``unhealthy`` and ends as failed, so its job replaces it as it replaces any failed
task. A task without checks is healthy once it runs (a deployment counts it after
``min_healthy_time``). Health is written with ``task_health.lua`` and published.

Checks run in a small pool of threads, so one slow check does not hold up the others.
A run frozen for want of its agent's heartbeat (``disconnect``) cannot answer: it is not
checked while frozen, and a check it was frozen during (the node's journal says so) is
forgotten rather than counted.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import redis

from scheduler.control import reconcile
from scheduler.control.journal import Journal
from scheduler.model import RUNNING, SchedError, Task
from scheduler.model.update import HEALTHY, STARTING, UNHEALTHY, HealthCheck
from scheduler.state.app import App

log = logging.getLogger("sched.agent")

POLL_S = 0.1


def check(health: HealthCheck, task_id: str) -> tuple[bool, str]:
    """Run one check; (passed, what it said)."""
    try:
        if health.kind == "command":
            done = subprocess.run(health.command, capture_output=True, timeout=health.timeout,
                                  env=dict(os.environ, SCHED_TASK_ID=task_id))
            tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:] or [""]
            return done.returncode == 0, f"exited with code {done.returncode}" + (f": {tail[0][:200]}" if tail[0] else "")
        if health.kind == "http":
            url = f"http://127.0.0.1:{health.port}{health.path}"
            with urllib.request.urlopen(url, timeout=health.timeout) as reply:  # 3xx are followed
                return reply.status < 400, f"GET {health.path} answered {reply.status}"
        with socket.create_connection(("127.0.0.1", health.port), timeout=health.timeout):
            return True, f"port {health.port} accepted a connection"
    except subprocess.TimeoutExpired:
        return False, f"the check took longer than {health.timeout:g} s"
    except FileNotFoundError:
        return False, f"command not found: {health.command[0]}"
    except urllib.error.HTTPError as exc:
        return False, f"GET {health.path} answered {exc.code}"
    except OSError as exc:
        return False, f"{health.kind} check failed: {exc}"


@dataclass
class _Watch:
    seen: float  # monotonic time the task was first seen running
    due: float = 0.0
    failures: int = 0
    running: Future | None = field(default=None, repr=False)
    frozen_s: float = 0.0  # how long the run had been frozen when the running check began


class HealthChecks:
    """The checks of one node's running tasks, in a daemon thread until ``stop`` is set."""

    def __init__(self, app: App, node: str, stop: threading.Event, journal: Journal | None = None):
        self.app, self.node, self.stop = app, node, stop
        self.journal = journal  # the node's journal (this thread's connection): which runs are frozen
        self.watches: dict[str, _Watch] = {}
        self.specs: dict[tuple[str, int], HealthCheck | None] = {}
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")

    def start(self) -> HealthChecks:
        threading.Thread(target=self.run, name="health-checks", daemon=True).start()
        return self

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.tick()
            except (redis.RedisError, SchedError) as exc:
                log.warning("agent %s: health checks: %s", self.node, exc)
            self.stop.wait(POLL_S)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _health_of(self, task: Task) -> HealthCheck | None:
        key = (task.job, task.version)
        if key not in self.specs:
            self.specs[key] = self.app.store.job_spec(task.job, task.version).health
        return self.specs[key]

    def tick(self) -> None:
        store = self.app.store
        running = [t for t in store.tasks(store.node_task_ids(self.node)) if t.state == RUNNING and t.node == self.node]
        for task_id in set(self.watches) - {t.id for t in running}:
            del self.watches[task_id]
        now = time.monotonic()
        for task in running:
            health = self._health_of(task)
            if health is None:
                if task.health != HEALTHY:
                    store.set_task_health(task.id, self.node, HEALTHY)
                continue
            watch = self.watches.get(task.id)
            if watch is None:
                watch = self.watches[task.id] = _Watch(seen=now)
                if not task.health:
                    store.set_task_health(task.id, self.node, STARTING)
            frozen = self._frozen(task.id)
            if watch.running is not None and watch.running.done():
                passed, said = watch.running.result()
                began_frozen, watch.running = watch.frozen_s, None
                if frozen is None or frozen == began_frozen:  # (else it was frozen meanwhile: forgotten)
                    self._record(task, health, watch, passed, said, now)
            if watch.running is None and now >= watch.due and task.id in self.watches and frozen is not None:
                watch.due = now + health.interval
                watch.frozen_s = frozen
                watch.running = self.pool.submit(check, health, task.id)

    def _frozen(self, task_id: str) -> float | None:
        """Seconds the task's run was frozen before now (each freeze adds to them once it
        ends), or None while it is frozen."""
        execution = self.journal.get(task_id) if self.journal is not None else None
        if execution is None:
            return 0.0
        return None if execution.frozen else execution.frozen_s

    def _record(self, task: Task, health: HealthCheck, watch: _Watch, passed: bool, said: str, now: float) -> None:
        store = self.app.store
        if passed:
            watch.failures = 0
            if task.health != HEALTHY:
                store.set_task_health(task.id, self.node, HEALTHY, said)
            return
        if now - watch.seen < health.grace:
            return
        watch.failures += 1
        if watch.failures < health.failures:
            return
        del self.watches[task.id]
        message = f"health check failed {watch.failures} time(s) in a row: {said}"
        if store.set_task_health(task.id, self.node, UNHEALTHY, said):
            log.warning("agent %s: task %s is unhealthy: %s", self.node, task.id, said,
                        extra={"fields": {"node": self.node, "task": task.id}})
            reconcile.task_ended(store, store.get_task(task.id), False, message)

"""What the disruption-budget tests share: a job placed by a real worker and its tasks
started and made healthy as an agent would (start.lua, task_health.lua), and a sampler of
a job's healthy count."""

from __future__ import annotations

import threading
import time

from scheduler.control import reconcile
from scheduler.control.budgets import count, counted_healthy
from scheduler.model import make_node, parse_job
from scheduler.model.update import HEALTHY

from worker_harness import run_worker_until_idle


def add_nodes(app, names, cpu=4, **kw):
    for name in names:
        app.store.put_node(make_node(name, cpu=cpu, memory="8GiB", **kw))


def start_all(app, job_id, health=HEALTHY):
    """Start every assigned task of the job on its node and give it ``health``, as its agent would."""
    store = app.store
    started = []
    for task in store.tasks(store.job_task_ids(job_id)):
        if task.state == "assigned":
            assert store.start_task(task.id, task.node)
            started.append(task.id)
        if task.state in ("assigned", "running") and health:
            store.set_task_health(task.id, task.node, health)
    return started


def running_job(app, job_id="web", replicas=4, budget=None, task_health=HEALTHY, **extra):
    """Submit a job, place it with a worker, start its tasks healthy; returns the spec.
    ``replicas`` None: none given (a global job)."""
    raw = {"id": job_id, **({} if replicas is None else {"replicas": replicas}), "resources": {"cpu": 1}, **extra}
    if budget is not None:
        raw["disruption_budget"] = budget
    spec = parse_job(raw)
    reconcile.submit(app.store, spec)
    run_worker_until_idle(app)
    start_all(app, job_id, task_health)
    if budget is not None:
        count(app.store, job_id)  # as the upkeep would, now that they run
    return spec


def healthy_count(app, job_id, checked=False) -> int:
    store = app.store
    return sum(1 for _, state, health in store.task_health_states(store.job_task_ids(job_id))
               if counted_healthy(state, health, checked))


class Sampler:
    """Samples a job's healthy count continuously in a thread; ``low`` is the lowest seen."""

    def __init__(self, app, job_id, checked=False, every_s=0.005):
        self.app, self.job_id, self.checked, self.every_s = app, job_id, checked, every_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(healthy_count(self.app, self.job_id, self.checked))
            time.sleep(self.every_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def low(self) -> int:
        return min(self.samples)

"""The rebalance measures of docs/benchmarks.md.

    python scripts/rebalance_bench.py measure [--json]
    python scripts/rebalance_bench.py plan [--nodes 1000] [--tasks 10000] [--new 100] [--repeat 5]
                                           [--strategy spread|pack] [--json]

Each starts its own redis-server (the settings sched gives every server it starts).

``measure``: 12 nodes, 3 of them new and empty, services crowded on the 9 old ones
(:data:`SERVICES`: replicas and disruption budgets). A real scheduler worker loop runs in
a thread (it places the moves' new tasks through commit.lua and advances the moves in
its upkeep), and so do the nodes, in process: what an agent does for a task without a
command (start it, then report it healthy once its check passes, ``HEALTHY_AFTER_S``
after it started). ``sched rebalance`` (``Client.rebalance``) is applied once; a sampler
reads every task of the services every few milliseconds until the moves have ended,
keeping per service the fewest healthy tasks it saw and every sample where more were
unavailable than the budget allows. Prints the moves, the time, each service's skew
before and after, and the samples.

``plan``: a cluster of ``--nodes`` nodes, ``--new`` of them new and empty, with
``--tasks`` running service tasks on the others (half in 5 services of many replicas,
half in services of 5; each task a quarter of a 4-cpu node), placed by the scheduler
worker. Times ``sched rebalance
--dry-run`` (``rebalance.plan``: reading the cluster, copying it and planning) and the read
alone, ``--repeat`` times (``--strategy``: what it plans; ``spread`` by default).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from scheduler.client import Client
from scheduler.control import cluster_read, rebalance
from scheduler.engine.budgets import desired_healthy
from scheduler.model import RUNNING, make_node, parse_job
from scheduler.model.update import HEALTHY, STARTING
from scheduler.state.app import App
from scheduler.state.embedded import start_server
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

HEALTHY_AFTER_S = 0.3
# (id, replicas, disruption budget): 59 tasks crowded on 9 nodes of 12.
SERVICES = (("web", 24, {"max_unavailable": 1}), ("api", 18, {"max_unavailable": "25%"}),
            ("cache", 8, {"min_available": 6}), ("search", 9, None))


class Nodes(threading.Thread):
    """Every node of the namespace, run in process: assigned tasks start (start.lua) and
    turn healthy ``healthy_after_s`` later (task_health.lua), as an agent reports them."""

    def __init__(self, app: App, healthy_after_s: float = HEALTHY_AFTER_S):
        super().__init__(daemon=True)
        self.app, self.delay = app, healthy_after_s
        self.started: dict[str, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        store = self.app.store
        while not self.halt.wait(0.02):
            for node in store.node_names():
                for task in store.tasks(store.node_task_ids(node)):
                    if task.state == "assigned" and task.node == node and store.start_task(task.id, node):
                        self.started[task.id] = time.monotonic()
                        store.set_task_health(task.id, node, STARTING)
                    elif task.state == RUNNING and task.health != HEALTHY and \
                            time.monotonic() - self.started.setdefault(task.id, time.monotonic()) >= self.delay:
                        store.set_task_health(task.id, node, HEALTHY)


class Worker(threading.Thread):
    """The scheduler worker's loop, in a thread."""

    def __init__(self, app: App):
        super().__init__(daemon=True)
        self.worker = SchedulerWorker(app, WorkerConfig())

    def run(self) -> None:
        self.worker.run()


class Sampler(threading.Thread):
    """Reads every task of the services every few ms: the fewest healthy per service, and
    the samples where a service had more unavailable than its budget allows."""

    def __init__(self, app: App, services):
        super().__init__(daemon=True)
        self.app, self.services = app, services
        self.fewest = {job: replicas for job, replicas, _ in services}
        self.floor = {job: desired_healthy(parse_job({"id": job, "replicas": replicas, "resources": {"cpu": 0.1},
                                                      "disruption_budget": budget}).disruption_budget, replicas)
                      if budget else 0 for job, replicas, budget in services}
        self.samples, self.exceeded = 0, []
        self.halt = threading.Event()

    def run(self) -> None:
        store = self.app.store
        while not self.halt.wait(0.005):
            for job, replicas, _ in self.services:
                healthy = sum(t.state == RUNNING and t.health == HEALTHY for t in store.tasks(store.job_task_ids(job)))
                self.fewest[job] = min(self.fewest[job], healthy)
                if healthy < self.floor[job]:
                    self.exceeded.append((job, healthy))
            self.samples += 1


def node_counts(store, job: str) -> dict[str, int]:
    counts = {name: 0 for name in store.node_names()}
    for task in store.tasks(store.job_task_ids(job)):
        if task.live:
            counts[task.node] += 1
    return counts


def skew(counts: dict[str, int]) -> int:
    return max(counts.values()) - min(counts.values())


def wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.05)


def measure(app: App, services=SERVICES, old: int = 9, new: int = 3, timeout_s: float = 300.0) -> dict:
    """The 12-node measure on ``app``'s namespace (empty); returns its figures."""
    client = Client(app=app)
    for i in range(1, old + 1):
        app.store.put_node(make_node(f"n{i:02d}", cpu=8, memory="16GiB"))
    for job, replicas, budget in services:
        raw = {"id": job, "replicas": replicas, "resources": {"cpu": 0.25, "memory": "128MiB"},
               "health": {"command": ["true"], "interval": 0.2}}
        if budget:
            raw["disruption_budget"] = budget
        client.submit(raw)
    worker, nodes = Worker(app), Nodes(app)
    worker.start()
    nodes.start()
    try:
        total = sum(replicas for _, replicas, _ in services)
        wait(lambda: sum(n for n in _healthy(app).values()) == total, timeout_s, "every service healthy")
        for i in range(old + 1, old + new + 1):
            app.store.put_node(make_node(f"n{i:02d}", cpu=8, memory="16GiB"))
        before = {job: skew(node_counts(app.store, job)) for job, _, _ in services}
        sampler = Sampler(app, services)
        sampler.start()
        began = time.monotonic()
        done = client.rebalance()
        ids = done["applied"]["moves"]
        ended = client.wait_moves(ids, timeout_s)
        took = time.monotonic() - began
        sampler.halt.set()
        sampler.join()
    finally:
        worker.worker.stop()
        nodes.halt.set()
        worker.join(timeout=30)
        nodes.join(timeout=30)
    return {"nodes": old + new, "new_nodes": new, "tasks": total, "moves_planned": len(done["moves"]),
            "moves_done": sum(m["state"] == "done" for m in ended),
            "moves_abandoned": sum(m["state"] == "abandoned" for m in ended), "planned_ms": done["planned_ms"],
            "seconds": round(took, 2), "skew_before": before,
            "skew_after": {job: skew(node_counts(app.store, job)) for job, _, _ in services},
            "fewest_healthy": sampler.fewest, "floor": sampler.floor, "samples": sampler.samples,
            "samples_over_budget": len(sampler.exceeded)}


def _healthy(app: App) -> dict[str, int]:
    out: dict[str, int] = {}
    for task in app.store.tasks(app.store.all_task_ids()):
        if task.state == RUNNING and task.health == HEALTHY:
            out[task.job] = out.get(task.job, 0) + 1
    return out


def build_large(app: App, nodes: int = 1000, tasks: int = 10_000, new: int = 100) -> None:
    """The large cluster, in ``app``'s namespace: ``--new`` nodes joined after the tasks ran."""
    store = app.store
    store.put_new_nodes([make_node(f"n{i:04d}", cpu=4, memory="16GiB") for i in range(nodes - new)])
    big, small = 5, (tasks // 2) // 5
    jobs = [{"id": f"big{i}", "replicas": tasks // 2 // big, "resources": {"cpu": 0.25, "memory": "256MiB"}}
            for i in range(big)]
    jobs += [{"id": f"svc{i}", "replicas": 5, "resources": {"cpu": 0.25, "memory": "256MiB"}} for i in range(small)]
    Client(app=app).submit_many(jobs)
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    for name in store.node_names():
        for task_id in store.node_task_ids(name):
            store.start_task(task_id, name)
    store.put_new_nodes([make_node(f"n{i:04d}", cpu=4, memory="16GiB") for i in range(nodes - new, nodes)])


def plan_timing(app: App, nodes: int = 1000, tasks: int = 10_000, new: int = 100, repeat: int = 5,
                strategy: str = "spread") -> dict:
    """Time a rebalance plan on a large cluster built in ``app``'s namespace."""
    store = app.store
    build_large(app, nodes, tasks, new)
    live = sum(len(store.node_task_ids(n)) for n in store.node_names())
    reads, plans, moves = [], [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        cluster_read.read(store, rebalance.movable({}))
        reads.append(time.perf_counter() - began)
        began = time.perf_counter()
        planned = rebalance.plan(store, strategy)
        plans.append(time.perf_counter() - began)
        moves = len(planned["moves"])
    return {"nodes": nodes, "new_nodes": new, "running_tasks": live, "strategy": strategy, "moves": moves,
            "read_s": {"median": round(statistics.median(reads), 3), "max": round(max(reads), 3)},
            "plan_s": {"median": round(statistics.median(plans), 3), "max": round(max(plans), 3)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("measure", "plan"))
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--new", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--strategy", default="spread")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        socket = Path(folder) / "redis.sock"
        server = start_server(Path(folder), socket, daemonize=False)
        try:
            app = App(redis_url=f"unix://{socket}", namespace="bench")
            result = measure(app) if args.what == "measure" else plan_timing(app, args.nodes, args.tasks, args.new,
                                                                             args.repeat, args.strategy)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

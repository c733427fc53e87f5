"""What the rebalance tests share: nodes that run what is assigned to them, in process
(``Runner``: what an agent does for a task without a command: start it through
``start.lua``, then report it healthy through ``task_health.lua`` once its check would
pass), a cluster crowded on its old nodes, and a sampler of healthy tasks per job."""

from __future__ import annotations

import threading
import time

from scheduler.control import reconcile
from scheduler.model import RUNNING, make_node, parse_job
from scheduler.model.update import HEALTHY, STARTING


class Runner:
    """Starts every task assigned to the nodes, and turns each healthy ``healthy_after_s``
    after it started (unless it runs on a node of ``sick``: then it stays starting)."""

    def __init__(self, app, healthy_after_s: float = 0.0, sick: tuple[str, ...] = ()):
        self.app, self.delay, self.sick = app, healthy_after_s, set(sick)
        self.started: dict[str, float] = {}

    def step(self) -> None:
        store = self.app.store
        for node in store.node_names():
            for task in store.tasks(store.node_task_ids(node)):
                if task.state == "assigned" and task.node == node:
                    if store.start_task(task.id, node):
                        self.started[task.id] = time.monotonic()
                        store.set_task_health(task.id, node, STARTING)
                elif task.state == RUNNING and task.health != HEALTHY and node not in self.sick:
                    began = self.started.setdefault(task.id, time.monotonic())
                    if time.monotonic() - began >= self.delay:
                        store.set_task_health(task.id, node, HEALTHY)


class Loop(threading.Thread):
    """Calls ``step`` every ``interval_s`` until stopped (a worker, the runner, a sampler)."""

    def __init__(self, step, interval_s: float = 0.02):
        super().__init__(daemon=True)
        self.step_fn, self.interval = step, interval_s
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.step_fn()
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
                return
            self.halt.wait(self.interval)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def healthy_by_job(app) -> dict[str, int]:
    """Running tasks counted healthy, per job."""
    store = app.store
    out: dict[str, int] = {}
    for task in store.tasks(store.all_task_ids()):
        if task.state == RUNNING and task.health == HEALTHY:
            out[task.job] = out.get(task.job, 0) + 1
    return out


def per_node(app, job: str) -> dict[str, int]:
    store = app.store
    out = {name: 0 for name in store.node_names()}
    for task in store.tasks(store.job_task_ids(job)):
        if task.live:
            out[task.node] += 1
    return out


def add_nodes(app, names, cpu: str = "8", memory: str = "16GiB") -> None:
    for name in names:
        app.store.put_node(make_node(name, cpu=cpu, memory=memory))


def service(job_id: str, replicas: int, *, budget: dict | None = None, health: bool = True, cpu: float = 0.5,
            **extra) -> dict:
    raw = {"id": job_id, "replicas": replicas, "resources": {"cpu": cpu, "memory": "128MiB"}, **extra}
    if health:
        raw["health"] = {"command": ["true"], "interval": 0.2}
    if budget is not None:
        raw["disruption_budget"] = budget
    return raw


def submit(app, raw: dict) -> dict:
    return reconcile.submit(app.store, parse_job(raw))


def api_calls(api, app) -> None:
    """Each /v1/rebalance route called for real, in a namespace of its own (made crowded:
    web's 4 tasks running on n1, n2 empty), then cleared: for the API's route-by-route test."""
    from scheduler.state.app import App
    from worker_harness import run_worker_until_idle

    scratch = App(client=app.client, namespace=f"{app.keys.namespace}-rb")
    try:
        add_nodes(scratch, ["n1"])
        submit(scratch, service("web", 4, health=False))
        run_worker_until_idle(scratch)
        Runner(scratch).step()
        add_nodes(scratch, ["n2"])
        ns = f"?namespace={scratch.keys.namespace}"
        plan = api("POST", f"/v1/rebalance/plan{ns}", json={"job": "web"}).json()
        assert [m["from"] for m in plan["moves"]] == ["n1", "n1"] and "applied" not in plan
        applied = api("POST", f"/v1/rebalance{ns}", json={"plan": plan}).json()["applied"]
        assert applied["moves"] == [f"{applied['plan']}-1", f"{applied['plan']}-2"]
        assert api("POST", f"/v1/rebalance{ns}", json={"plan": plan}).status_code == 409  # its tasks are moving
        assert [m["id"] for m in api("GET", f"/v1/rebalance/moves{ns}").json()] == applied["moves"]
        assert api("GET", f"/v1/rebalance/moves/{applied['moves'][0]}{ns}").json()["to"] == "n2"
        assert api("POST", f"/v1/rebalance/plan{ns}", json={"strategy": "sprd"}).status_code == 422
        assert api("GET", f"/v1/rebalance/moves/9-9{ns}").status_code == 404
    finally:
        scratch.store.clear_namespace()

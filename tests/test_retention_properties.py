"""Retention never removes anything live or needed, whatever runs around it: a hypothesis
state machine against the real Redis the suite starts interleaves submits, scales, stops,
new versions rolled out by deployments, task ends, node loss and retention passes with
random settings and clocks; and real worker processes remove finished work while jobs
are submitted and end beside them.

Checked after every step: the namespace audits clean; every task that was pending or live
before a retention pass still exists; the task every open task replaces still exists
(the chain is one link long); while a deployment rolls, the failed tasks of the version
it rolls out still exist; and a job retention removed was finished before the pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from scheduler import Client
from scheduler.control import deployer, reconcile
from scheduler.control.audit import audit
from scheduler.control.retention import collect
from scheduler.model import BATCH, DOWN, READY
from scheduler.model.retention import Retention
from scheduler.state.app import App

NODES = ("n1", "n2", "n3")
UPDATE = {"max_parallel": 1, "min_healthy_time": 0, "healthy_deadline": 600, "max_failure_ratio": 1}


def finished(client: Client, job_id: str) -> bool:
    """Stopped, or a batch job with tasks, none of them open: what may be removed."""
    job = client.store.get_job(job_id)
    tasks = client.tasks(job=job_id)
    if any(not t.terminal for t in tasks):
        return False
    return job["status"] == "stopped" or (job["spec"]["type"] == BATCH and bool(tasks))


class Retained(RuleBasedStateMachine):
    url = ""

    def __init__(self):
        super().__init__()
        self.namespace = f"p{time.monotonic_ns()}"
        self.client = Client(app=App(redis_url=self.url, namespace=self.namespace))
        for name in NODES:
            self.client.add_node(name, cpu=4, memory="8GiB")
        self.jobs = 0
        self.clock = 0  # ms added to Redis TIME for the retention passes' decisions

    @initialize()
    def two_jobs(self):
        self.client.submit({"id": "svc", "replicas": 2, "restart_delay": 0, "update": UPDATE,
                            "resources": {"cpu": 0.5}})
        self.client.submit({"id": "bat", "type": "batch", "replicas": 2, "max_retries": 2, "restart_delay": 0})

    def teardown(self):
        self.client.store.clear_namespace()
        self.client.close()

    def _job_ids(self) -> list[str]:
        return self.client.store.job_ids()

    @rule(kind=st.sampled_from(["batch", "service"]), replicas=st.integers(1, 3), retries=st.integers(0, 2),
          ttl=st.sampled_from([None, 0, 3600]), rolling=st.booleans())
    def submit(self, kind, replicas, retries, ttl, rolling):
        spec = {"id": f"j{self.jobs}", "type": kind, "replicas": replicas, "max_retries": retries,
                "restart_delay": 0, "resources": {"cpu": 0.5}}
        if ttl is not None:
            spec["ttl_after_finished"] = ttl
        if rolling and kind == "service":
            spec["update"] = UPDATE
        self.jobs += 1
        self.client.submit(spec)

    @rule(data=st.data())
    def new_version(self, data):
        services = [j for j in self._job_ids() if self.client.store.get_job(j)["spec"]["type"] == "service"]
        if services:
            job = self.client.store.get_job(data.draw(st.sampled_from(services)))
            self.client.submit({**job["spec"], "priority": job["spec"]["priority"] % 100 + 1})

    @rule(data=st.data(), replicas=st.integers(0, 3))
    def scale(self, data, replicas):
        running = [j for j in self._job_ids() if self.client.store.get_job(j)["status"] == "running"]
        if running:
            self.client.scale(data.draw(st.sampled_from(running)), replicas)

    @rule(data=st.data())
    def stop(self, data):
        if ids := self._job_ids():
            self.client.stop(data.draw(st.sampled_from(ids)))

    @rule()
    def place(self):
        self.client.run_workers(until_idle=True)
        deployer.advance_all(self.client.store)

    @rule(data=st.data(), succeeded=st.booleans())
    def end_a_task(self, data, succeeded):
        self.client.run_workers(until_idle=True)
        live = [t for t in self.client.tasks() if t.live]
        if live:
            task = data.draw(st.sampled_from(live))
            reconcile.task_ended(self.client.store, task, succeeded, "ok" if succeeded else "exited with code 1")

    @rule(node=st.sampled_from(NODES))
    def lose_a_node(self, node):
        if self.client.store.set_status(node, DOWN) == READY:
            reconcile.node_lost(self.client.store, node)

    @rule(node=st.sampled_from(NODES))
    def node_back(self, node):
        self.client.store.set_status(node, READY)

    @rule(task_s=st.sampled_from([0, 60, 3600]), per_job=st.integers(0, 3), job_s=st.sampled_from([0, 60, 3600]),
          later_s=st.sampled_from([0, 61, 4000]))
    def retention_pass(self, task_s, per_job, job_s, later_s):
        self.clock += later_s * 1000; print("PASS", len(self.client.tasks()), sum(1 for t in self.client.tasks() if t.replaces))
        store = self.client.store
        before = {t.id: t for t in self.client.tasks()}
        open_ids = {i for i, t in before.items() if not t.terminal}
        jobs_before = set(self._job_ids())
        was_finished = {j for j in jobs_before if finished(self.client, j)}
        rolling = {}
        for d in self.client.deployments():
            if d["state"] in ("running", "paused", "awaiting_promotion"):
                rolling[d["job"]] = d["to"]
        failures = {i for i, t in before.items() if t.state == "failed" and rolling.get(t.job) == t.version}
        collect(store, retention=Retention(task_retention=task_s, ended_tasks_per_job=per_job, job_retention=job_s),
                now_ms=store.now_ms() + self.clock)
        after = {t.id: t for t in self.client.tasks()}
        assert open_ids <= set(after), f"open tasks removed: {sorted(open_ids - set(after))}"
        assert all(after[i].state == before[i].state for i in open_ids)
        removed_jobs = jobs_before - set(self._job_ids())
        assert removed_jobs <= was_finished, f"unfinished jobs removed: {sorted(removed_jobs - was_finished)}"
        still_rolling = {d["job"] for d in self.client.deployments()
                         if d["state"] in ("running", "paused", "awaiting_promotion")}
        lost = {i for i in failures if i not in after and before[i].job in still_rolling}
        assert not lost, f"failures of a rolling deployment removed: {sorted(lost)}"

    @invariant()
    def chains_and_bookkeeping_hold(self):
        tasks = {t.id: t for t in self.client.tasks()}
        for task in tasks.values():
            if not task.terminal and task.replaces:
                assert task.replaces in tasks, f"{task.id} replaces {task.replaces}, which is gone"
        report = audit(self.client.store)
        assert report.ok, report.problems


def test_retention_removes_nothing_live_or_needed(redis_url):
    Retained.url = redis_url
    run_state_machine_as_test(Retained, settings=settings(max_examples=60, stateful_step_count=25, deadline=None,
                                                          suppress_health_check=list(HealthCheck)))


SCHED = str(Path(sys.executable).parent / "sched")


def test_worker_processes_remove_finished_work_while_work_goes_on(redis_url, namespace, app):
    """Two real worker processes, retention at zero, while this process submits batch and
    service jobs and ends their tasks: every job removed was finished, no open task is
    ever missing, and at the end the finished work is gone and the rest audits clean."""
    client = Client(app=app)
    for name in NODES:
        client.add_node(name, cpu=8, memory="16GiB")
    client.set_config(job_retention=0, task_retention=0, ended_tasks_per_job=0)
    workers = subprocess.Popen([SCHED, "--redis-url", redis_url, "--namespace", namespace, "worker",
                                "--concurrency", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        seen_open: set[str] = set()
        ended_here: set[str] = set()  # the only way a task ends in this test
        for round_ in range(40):
            client.submit({"id": f"b{round_}", "type": "batch", "replicas": 2, "max_retries": 1, "restart_delay": 0})
            if round_ % 10 == 0:
                client.submit({"id": f"s{round_}", "replicas": 2, "restart_delay": 0})
            for task in client.tasks():
                if task.live and task.job.startswith("b"):
                    reconcile.task_ended(client.store, task, round_ % 3 != 0, "done")
                    ended_here.add(task.id)
            now = {t.id: t for t in client.tasks()}
            gone = seen_open - set(now)
            assert gone <= ended_here, f"open tasks removed: {sorted(gone - ended_here)}"
            seen_open = {t.id for t in now.values() if not t.terminal}
            for task in now.values():
                if not task.terminal and task.replaces:
                    assert task.replaces in now, f"{task.id} replaces {task.replaces}, which is gone"
            time.sleep(0.05)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for task in client.tasks():
                if task.live and task.job.startswith("b"):
                    reconcile.task_ended(client.store, task, True, "done")
            if all(j.startswith("s") for j in client.store.job_ids()):
                break
            time.sleep(0.2)
        assert all(j.startswith("s") for j in client.store.job_ids()), client.store.job_ids()
        for job in client.store.job_ids():
            assert len([t for t in client.tasks(job=job) if not t.terminal]) == 2
        report = audit(client.store)
        assert report.ok, report.problems
    finally:
        os.killpg(workers.pid, signal.SIGTERM)
        workers.wait(timeout=30)

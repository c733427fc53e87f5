"""Task lifecycle and reconciliation without agents: static nodes, an in-process scheduler
worker run until idle, and ``execution.run_task`` (the RQ job an agent would run) called
directly, so every step is deterministic. Scale, drain, stop, global jobs following node
changes, node loss through lapsed heartbeats, restarts, retries and faulty nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.control import heartbeat
from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model.errors import SpecError
from scheduler.control.execution import execute, run_task
from scheduler.model import LIVE_STATES, make_node, parse_job
from scheduler.state.tallies import FAULT_WINDOW_MS
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

SCHED = str(Path(sys.executable).parent / "sched")
SMALL = {"cpu": 0.5, "memory": "64MiB"}


# ----------------------------------------------------------------------------- helpers
def add_nodes(app, *names, cpu="2", memory="1GiB", labels=None):
    for name in names:
        app.store.put_node(make_node(name, cpu=cpu, memory=memory, labels=labels or {}))


def submit(app, raw: dict) -> str:
    return reconcile.submit(app.store, parse_job(raw))["id"]


def settle(app) -> None:
    """Place everything placeable (waiting out backoffs) with one in-process worker."""
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()


def tasks_of(app, job_id: str) -> list[dict]:
    return sorted(app.store.tasks(app.store.job_task_ids(job_id)), key=lambda t: int(t.index))


def live(app, job_id: str) -> list[dict]:
    return [t for t in tasks_of(app, job_id) if t.state in LIVE_STATES]


def by_state(app, job_id: str, state: str) -> list[str]:
    return [t.id for t in tasks_of(app, job_id) if t.state == state]


def run_assigned(app, redis_url: str, namespace: str, job_id: str) -> list[dict]:
    """Do what the agents would: run every assigned task of the job on its node."""
    return [run_task(redis_url, namespace, t.node, t.id)
            for t in tasks_of(app, job_id) if t.state == "assigned"]


def assert_audit_ok(app) -> None:
    report = audit(app.store)
    assert report.ok, report.problems
    assert report.overcommits == 0


def assert_released(app) -> None:
    """Nothing is allocated anywhere: node fields, tallies, queues."""
    k, client = app.keys, app.client
    for node in app.store.nodes():
        assert node.tasks == 0 and not any(node.allocated.values()) and not node.ports, node
        assert app.store.node_task_ids(node.name) == []
    for job_id in app.store.job_ids():
        assert all(score == 0 for _, score in client.zrange(k.tally_job(job_id), 0, -1, withscores=True)), job_id
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert_audit_ok(app)


def cli(redis_url: str, namespace: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([SCHED, "--redis-url", redis_url, "--namespace", namespace, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


# ----------------------------------------------------------------------------- running one task
def test_execute_reports_success_and_failure_of_funcs_and_commands():
    assert execute({"func": "scheduler.tools.demo_tasks:crunch", "args": [0, "x"]})[0] is True
    ok, message = execute({"func": "scheduler.tools.demo_tasks:flaky", "args": [0, "/nonexistent/dir", "y"]})
    assert not ok and "raised" in message
    assert execute({"command": ["true"]}) == (True, "exited with code 0")
    assert execute({"command": ["sh", "-c", "echo why >&2; exit 3"]}) == (False, "exited with code 3: why")
    assert execute({"command": ["false"]}) == (False, "exited with code 1")
    assert execute({"command": ["/no/such/binary"]}) == (False, "command not found: /no/such/binary")
    assert execute({"command": ["sleep", "5"], "timeout": 0.2}) == (False, "command timed out after 0.2 s")


def test_run_task_moves_assigned_to_running_to_completed_and_releases(app, redis_url, namespace):
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "one", "type": "batch", "resources": SMALL,
                          "run": {"func": "scheduler.tools.demo_tasks:crunch", "args": [0, "x"]}})
    settle(app)
    (task,) = tasks_of(app, job_id)
    assert task.state == "assigned" and task.node == "n1"
    assert app.store.get_node("n1").allocated["cpu"] == 500

    result = run_task(redis_url, namespace, "n1", task.id)
    assert result["ran"] and result["succeeded"] and result["state"] == "completed"
    assert result["replacement"] == []
    assert result["message"].startswith("scheduler.tools.demo_tasks:crunch returned 'x done after 0s")
    done = app.store.get_task(task.id)
    assert done.state == "completed"
    assert int(done.assigned_ms) <= int(done.started_ms) <= int(done.ended_ms)
    assert_released(app)

    # An RQ job delivered twice does not run the task again.
    assert run_task(redis_url, namespace, "n1", task.id) == {"task": task.id, "ran": False}
    assert app.store.get_task(task.id).state == "completed"
    assert len(app.store.job_task_ids(job_id)) == 1


def test_a_task_that_is_no_longer_its_nodes_does_not_run(app, redis_url, namespace, tmp_path):
    add_nodes(app, "n1", "n2")
    marker = tmp_path / "ran"
    job_id = submit(app, {"id": "touch", "replicas": 2, "max_per_node": 1, "resources": SMALL,
                          "run": {"command": ["touch", str(marker)]}})
    settle(app)
    first, second = tasks_of(app, job_id)
    other = "n2" if first.node == "n1" else "n1"
    # Queued on the wrong node (a stale RQ job): refused, and the task is untouched.
    assert run_task(redis_url, namespace, other, first.id) == {"task": first.id, "ran": False}
    assert app.store.get_task(first.id).state == "assigned"
    # Stopped while it waited in its node's RQ queue: refused.
    reconcile.stop(app.store, job_id)
    for task in (first, second):
        assert run_task(redis_url, namespace, task.node, task.id) == {"task": task.id, "ran": False}
        assert app.store.get_task(task.id).state == "stopped"
    assert not marker.exists()
    assert_released(app)


# ----------------------------------------------------------------------------- what comes after a task
def test_batch_failures_are_retried_up_to_max_retries(app, redis_url, namespace):
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "flaky", "type": "batch", "max_retries": 2, "restart_delay": 0,
                          "resources": SMALL, "run": {"command": ["sh", "-c", "exit 3"]}})
    once = submit(app, {"id": "once", "type": "batch", "max_retries": 0, "resources": SMALL,
                        "run": {"command": ["false"]}})
    for _ in range(10):
        settle(app)
        if not run_assigned(app, redis_url, namespace, job_id) + run_assigned(app, redis_url, namespace, once):
            break
    tasks = tasks_of(app, job_id)
    assert [t.state for t in tasks] == ["failed"] * 3
    assert [int(t.retries) for t in tasks] == [0, 1, 2]
    assert all(t.message == "exited with code 3" for t in tasks)
    assert [t.state for t in tasks_of(app, once)] == ["failed"]
    # Every failure is recorded for faulty-node detection, with the node, the task and its version.
    assert sorted(app.client.zrange(app.keys.faults(job_id), 0, -1)) == sorted(f"n1|{t.id}|{t.version}" for t in tasks)
    assert app.client.zrange(app.keys.faults(once), 0, -1) == ["n1|once.0|1"]
    assert_released(app)


def test_a_failure_is_counted_in_the_step_that_ends_the_task(app):
    """finish.lua and replace.lua record a live task's failure themselves: no second call
    that a crash in between could lose. Nothing else counts, and old entries are dropped."""
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "svc", "replicas": 3, "restart_delay": 0, "resources": SMALL})
    settle(app)
    first, second, third = tasks_of(app, job_id)
    old = f"n1|{job_id}.99|1"  # a failure from before the window
    app.client.zadd(app.keys.faults(job_id), {old: app.store.now_ms() - FAULT_WINDOW_MS - 1_000})
    pending = submit(app, {"id": "later", "replicas": 1, "resources": {"cpu": 64}})  # never fits

    assert app.store.finish([first], "failed", "exited with code 1") == ["assigned"]  # finish.lua alone
    assert app.store.finish([second], "stopped", "stopped") == ["assigned"]
    assert app.store.finish(app.store.tasks([f"{pending}.0"]), "failed", "gave up") == ["pending"]
    ended = int(app.store.get_task(first.id).ended_ms)
    assert app.client.zrange(app.keys.faults(job_id), 0, -1, withscores=True) == [(f"n1|{first.id}|1", ended)]
    assert app.client.zcard(app.keys.faults(pending)) == 0

    result = reconcile.task_ended(app.store, third, False, "exited with code 2")  # replace.lua
    assert result["state"] == "failed" and len(result["replacement"]) == 1
    assert sorted(app.client.zrange(app.keys.faults(job_id), 0, -1)) == [f"n1|{first.id}|1", f"n1|{third.id}|1"]
    assert_audit_ok(app)


def test_ends_of_the_infrastructures_doing_count_neither_as_retries_nor_as_faults(app):
    """A batch task with max_retries 1 fails once (a retry, a fault), then its retry's run is
    lost with its agent, its node goes down, its node is drained, it is preempted: each time
    a replacement comes with the same retries and no fault is recorded; one more failure
    then ends the job, as max_retries says."""
    store = app.store
    add_nodes(app, "n1", "n2", "n3", "n4", cpu="4")
    job_id = submit(app, {"id": "crunch", "type": "batch", "max_retries": 1, "restart_delay": 0, "resources": SMALL})
    settle(app)

    def current():
        return next(t for t in tasks_of(app, job_id) if not t.terminal)

    assert reconcile.task_ended(store, current(), False, "exited with code 1")["state"] == "failed"
    settle(app)
    assert current().retries == 1
    ends = [("lost with its agent", lambda t: reconcile.task_ended(store, t, False, "stopped after 3.1 s", lost=True)),
            ("its node down", lambda t: reconcile.node_lost(store, t.node)),
            ("its node drained", lambda t: reconcile.drain_tasks(store, t.node)),
            ("preempted", lambda t: (store.finish([t], "preempted", "preempted by x"),
                                     reconcile.preempted(store, [(t.id, job_id, t.node)])))]
    for cause, end in ends:
        before = current()
        assert before.state == "assigned", (cause, before)
        end(before)
        after = current()
        assert after.id != before.id and after.retries == 1, (cause, after)
        assert store.get_task(before.id).state in ("lost", "stopped", "preempted"), cause
        settle(app)
    assert app.client.zcard(app.keys.faults(job_id)) == 1  # the one failure
    assert reconcile.task_ended(store, current(), False, "exited with code 1") == {"state": "failed",
                                                                                 "replacement": []}
    assert [t.state for t in tasks_of(app, job_id)] == ["failed", "lost", "lost", "stopped", "preempted", "failed"]
    assert app.client.zcard(app.keys.faults(job_id)) == 2
    assert_released(app)


def test_batch_task_that_succeeds_on_retry_is_done(app, redis_url, namespace, tmp_path):
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "report", "type": "batch", "max_retries": 5, "restart_delay": 0,
                          "resources": SMALL,
                          "run": {"func": "scheduler.tools.demo_tasks:flaky", "args": [0, str(tmp_path), "r"]}})
    for _ in range(10):
        settle(app)
        if not run_assigned(app, redis_url, namespace, job_id):
            break
    assert [t.state for t in tasks_of(app, job_id)] == ["failed", "completed"]
    assert app.client.zcard(app.keys.faults(job_id)) == 1
    assert_released(app)


def test_service_task_is_replaced_after_its_restart_delay(app, redis_url, namespace):
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "svc", "replicas": 1, "restart_delay": 0.3, "resources": SMALL,
                          "run": {"command": ["true"]}})
    settle(app)
    (first,) = tasks_of(app, job_id)
    result = run_task(redis_url, namespace, "n1", first.id)
    # A service keeps its replicas even when a task ends well.
    assert result["state"] == "completed" and len(result["replacement"]) == 1
    replacement = app.store.get_task(result["replacement"][0])
    assert replacement.state == "pending" and int(replacement.retries) == 1
    assert app.client.zscore(app.keys.backoff, replacement.id) == int(app.client.hget(app.keys.task(replacement.id), "backoff_until"))
    assert app.client.zscore(app.keys.active, replacement.id) is None
    ended = int(app.store.get_task(first.id).ended_ms)
    assert int(app.client.hget(app.keys.task(replacement.id), "backoff_until")) >= ended + 300
    settle(app)
    placed = app.store.get_task(replacement.id)
    assert placed.state == "assigned" and int(placed.assigned_ms) >= int(app.client.hget(app.keys.task(placed.id), "backoff_until"))
    assert app.client.zcard(app.keys.faults(job_id)) == 0  # nothing failed

    # A failing task is replaced too, and the failure is recorded (a new version of the
    # spec replaces the live task first).
    reconcile.submit(app.store, parse_job({"id": "svc", "replicas": 1, "restart_delay": 0, "resources": SMALL,
                                          "run": {"command": ["false"]}}))
    assert app.store.get_task(placed.id).state == "stopped"
    settle(app)
    (current,) = live(app, job_id)
    assert current.version == 2
    result = run_task(redis_url, namespace, "n1", current.id)
    assert result["state"] == "failed" and len(result["replacement"]) == 1
    assert app.client.zrange(app.keys.faults(job_id), 0, -1) == [f"n1|{current.id}|2"]
    settle(app)
    assert [t.id for t in live(app, job_id)] == result["replacement"]
    reconcile.stop(app.store, job_id)
    assert_released(app)


def test_global_task_that_ends_is_restarted_on_its_own_node(app, redis_url, namespace):
    add_nodes(app, "n1", "n2", "n3")
    job_id = submit(app, {"id": "agent", "type": "global", "restart_delay": 0, "resources": SMALL,
                          "run": {"command": ["false"]}})
    settle(app)
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2", "n3"]
    on_n2 = next(t for t in live(app, job_id) if t.node == "n2")
    result = run_task(redis_url, namespace, "n2", on_n2.id)
    assert result["state"] == "failed"
    (replacement_id,) = result["replacement"]
    assert app.store.get_task(replacement_id).pin == "n2"
    settle(app)
    assert app.store.get_task(replacement_id).node == "n2"
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2", "n3"]
    assert_audit_ok(app)


def test_a_node_where_a_job_keeps_failing_loses_to_a_healthy_one(app, redis_url, namespace):
    add_nodes(app, "n1", "n2")
    # A filler on n1 makes n1 the fuller node, which binpack prefers while n1 is healthy.
    submit(app, {"id": "filler", "resources": {"cpu": 1, "memory": "64MiB"}, "constraints": ["node.id==n1"]})
    job_id = submit(app, {"id": "bad", "type": "batch", "strategy": "binpack", "max_retries": 20,
                          "restart_delay": 0, "resources": SMALL, "run": {"command": ["false"]}})
    nodes = []
    for _ in range(7):
        settle(app)
        (task,) = [t for t in tasks_of(app, job_id) if t.state == "assigned"]
        nodes.append(task.node)
        run_task(redis_url, namespace, task.node, task.id)
    threshold = WorkerConfig().placement.faulty_threshold
    assert nodes[:threshold] == ["n1"] * threshold
    assert nodes[threshold:] == ["n2"] * (7 - threshold), nodes
    assert app.client.zcard(app.keys.faults(job_id)) == 7


def test_task_ending_while_its_job_is_stopped_gets_no_replacement(app, redis_url, namespace, monkeypatch):
    """The job is stopped after task_ended read it running but before the task's end and
    its replacement are written (the window between reading the job and the one step that
    ends the task and queues the replacement): nothing may be left open in a stopped job."""
    add_nodes(app, "n1")
    job_id = submit(app, {"id": "svc", "replicas": 1, "restart_delay": 0, "resources": SMALL,
                          "run": {"command": ["true"]}})
    settle(app)
    (task,) = live(app, job_id)
    store = app.store
    real_job_fields = store.job_fields

    def read_then_stop(*args, **kwargs):
        monkeypatch.setattr(store, "job_fields", real_job_fields)
        fields = real_job_fields(*args, **kwargs)
        reconcile.stop(store, job_id)  # another client stops the job right after it was read
        return fields

    monkeypatch.setattr(store, "job_fields", read_then_stop)
    reconcile.task_ended(store, store.get_task(task.id), True, "done")
    assert store.get_job(job_id)["status"] == "stopped"
    assert reconcile.open_tasks(store, job_id) == []
    assert_released(app)


# ----------------------------------------------------------------------------- node loss
def test_lapsed_heartbeat_takes_the_node_down_once_and_replaces_its_tasks(app):
    store = app.store
    add_nodes(app, "n1", "n2", cpu="4")
    web = submit(app, {"id": "web", "replicas": 4, "max_per_node": 2, "resources": SMALL})
    batch = submit(app, {"id": "crunch", "type": "batch", "replicas": 2, "max_per_node": 1, "resources": SMALL})
    glob = submit(app, {"id": "agent", "type": "global", "resources": SMALL})
    settle(app)
    heartbeat.beat(store, "n1", interval_s=0.05)  # n1 is now run by an agent; n2 stays static
    on_n1 = {t.id: t for t in store.tasks(store.node_task_ids("n1"))}
    assert sorted(t.job for t in on_n1.values()) == ["agent", "crunch", "web", "web"]

    deadline = time.monotonic() + 10
    while app.client.exists(app.keys.heartbeat("n1")) and time.monotonic() < deadline:
        time.sleep(0.02)
    watch = heartbeat.Watch()
    assert heartbeat.check(store, watch) == []  # seen missing: its grace of one TTL starts now
    lost: list[str] = []
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
        lost = heartbeat.check(store, watch)
    assert lost == ["n1"]
    assert heartbeat.check(store, watch) == []  # exactly once
    assert store.get_node("n1").status == "down" and store.get_node("n2").status == "ready"
    for task_id in on_n1:
        task = store.get_task(task_id)
        assert task.state == "lost" and task.message == "node n1 is down"
    assert store.node_task_ids("n1") == [] and store.get_node("n1").allocated["cpu"] == 0
    # Service and batch tasks get replacements; the global task waits for its node.
    settle(app)
    assert len(live(app, web)) == 2
    assert {t.node for t in live(app, web)} == {"n2"}
    assert len(by_state(app, web, "pending")) == 2  # max_per_node 2: no room for the other two
    assert {t.node for t in live(app, batch)} == {"n2"} and len(by_state(app, batch, "pending")) == 1
    assert [t.node for t in live(app, glob)] == ["n2"]
    assert len(app.store.job_task_ids(glob)) == 2  # no replacement for the lost global task

    # The node comes back: ready again, waiting tasks land there, the global job returns.
    heartbeat.beat(store, "n1", interval_s=5)
    assert store.get_node("n1").status == "ready"
    settle(app)
    assert len(live(app, web)) == 4 and len(live(app, batch)) == 2
    assert sorted(t.node for t in live(app, glob)) == ["n1", "n2"]
    for task_id in on_n1:
        assert store.get_task(task_id).state == "lost"  # lost tasks stay lost
    assert_audit_ok(app)


class _AfterEachScript:
    """Stands in for ``app.scripts``: runs ``hook()`` after every script call returns."""

    def __init__(self, scripts, hook):
        self._scripts, self._hook = scripts, hook

    def __getattr__(self, name):
        script = getattr(self._scripts, name)
        if not callable(script) or not hasattr(script, "sha"):
            return script

        def call(*args, **kwargs):
            reply = script(*args, **kwargs)
            self._hook()
            return reply

        return call


def test_a_scale_right_after_a_lost_task_ends_never_leaves_the_job_above_its_replicas(app, monkeypatch):
    """A service of 3 loses the tasks on n1; the moment the write that ends them returns
    (whatever else the same step did), another client scales the job to 2. Ending a lost
    task and queueing its replacement are one step, so the scale counts the replacements
    and the job ends with 2 open tasks, not more."""
    store = app.store
    add_nodes(app, "n1", "n2", cpu="4")
    job_id = submit(app, {"id": "svc", "replicas": 3, "resources": SMALL})
    settle(app)
    lost = [t.id for t in live(app, job_id) if t.node == "n1"]
    assert lost, "spread placement puts at least one of the three on n1"
    scaled = []

    def scale_once_lost():
        if not scaled and all(store.get_task(task_id).state == "lost" for task_id in lost):
            scaled.append("started")  # once: the scale's own script calls come back here
            scaled.append(reconcile.scale(store, job_id, 2))

    monkeypatch.setattr(store, "scripts", _AfterEachScript(store.scripts, scale_once_lost))
    reconcile.node_lost(store, "n1")
    assert scaled, "the scale ran between the end of the lost tasks and the return of node_lost"
    open_tasks = reconcile.open_tasks(store, job_id)
    assert len(open_tasks) == 2, [(t.id, t.state) for t in open_tasks]
    replacements = {app.client.hget(app.keys.task(t.id), "replaces") for t in open_tasks} - {None}
    assert replacements <= set(lost)


# ----------------------------------------------------------------------------- global jobs
def test_global_job_follows_node_joins_and_label_changes(app):
    store = app.store
    add_nodes(app, "n1", "n2", labels={"zone": "eu"})
    job_id = submit(app, {"id": "logs", "type": "global", "resources": SMALL,
                          "constraints": ["node.labels.zone==eu"]})
    assert len(store.job_task_ids(job_id)) == 2
    worker = SchedulerWorker(app, WorkerConfig(until_idle=True))
    worker.run()
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2"]

    add_nodes(app, "n3", labels={"zone": "eu"})
    add_nodes(app, "n4", labels={"zone": "us"})
    worker.run()  # the same worker notices the node change
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2", "n3"]
    (on_n3,) = [t for t in live(app, job_id) if t.node == "n3"]
    assert on_n3.pin == "n3"

    add_nodes(app, "n3", labels={"zone": "us"})  # n3 no longer matches the constraint
    worker.run()
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2"]
    assert store.get_task(on_n3.id).state == "stopped"
    assert store.get_node("n3").tasks == 0 and store.get_node("n3").allocated["cpu"] == 0

    store.set_status("n2", "down")  # a down node does not keep a global task either
    worker.run()
    assert [t.node for t in live(app, job_id)] == ["n1"]
    store.set_status("n2", "ready")
    worker.run()
    assert sorted(t.node for t in live(app, job_id)) == ["n1", "n2"]
    assert len(store.job_task_ids(job_id)) == 4  # n1's, n2's twice, n3's; none for n4
    assert_audit_ok(app)


# ----------------------------------------------------------------------------- scale, drain, stop
def test_scale_up_and_down_stops_the_newest_first(app, redis_url, namespace):
    add_nodes(app, "n1", "n2", cpu="4")
    job_id = submit(app, {"id": "web", "replicas": 3, "resources": SMALL})
    settle(app)
    assert len(live(app, job_id)) == 3

    result = reconcile.scale(app.store, job_id, 5)
    assert result["added"] == ["web.3", "web.4"] and result["stopped"] == []
    settle(app)
    assert [t.id for t in live(app, job_id)] == [f"web.{i}" for i in range(5)]
    assert app.store.get_job(job_id)["spec"]["replicas"] == 5

    result = reconcile.scale(app.store, job_id, 2)
    assert result["added"] == [] and result["stopped"] == ["web.4", "web.3", "web.2"]
    assert [t.id for t in live(app, job_id)] == ["web.0", "web.1"]
    assert by_state(app, job_id, "stopped") == ["web.2", "web.3", "web.4"]
    assert sum(n.allocated["cpu"] for n in app.store.nodes()) == 2 * 500
    assert app.store.get_job(job_id)["spec"]["replicas"] == 2
    assert_audit_ok(app)

    # The CLI does the same.
    up = json.loads(cli(redis_url, namespace, "job", "scale", job_id, "4", "--json").stdout)
    assert up["added"] == ["web.5", "web.6"] and up["stopped"] == []
    settle(app)
    assert [t.id for t in live(app, job_id)] == ["web.0", "web.1", "web.5", "web.6"]
    down = json.loads(cli(redis_url, namespace, "job", "scale", job_id, "1", "--json").stdout)
    assert down["stopped"] == ["web.6", "web.5", "web.1"]
    assert [t.id for t in live(app, job_id)] == ["web.0"]
    settle(app)
    assert len(live(app, job_id)) == 1 and app.queue.counts()["active"] == 0
    assert_audit_ok(app)


def test_scale_down_stops_pending_tasks_before_live_ones(app):
    add_nodes(app, "n1", cpu="1")
    job_id = submit(app, {"id": "web", "replicas": 4, "resources": SMALL})
    settle(app)
    assert [t.id for t in live(app, job_id)] == ["web.0", "web.1"]
    assert by_state(app, job_id, "pending") == ["web.2", "web.3"]
    assert reconcile.scale(app.store, job_id, 3)["stopped"] == ["web.3"]
    assert reconcile.scale(app.store, job_id, 1)["stopped"] == ["web.2", "web.1"]
    assert [t.id for t in live(app, job_id)] == ["web.0"]
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert_audit_ok(app)


def test_scale_refuses_global_and_stopped_jobs(app):
    add_nodes(app, "n1")
    glob = submit(app, {"id": "agent", "type": "global", "resources": SMALL})
    web = submit(app, {"id": "web", "replicas": 1, "resources": SMALL})
    reconcile.stop(app.store, web)
    with pytest.raises(SpecError):
        reconcile.scale(app.store, glob, 3)
    with pytest.raises(SpecError):
        reconcile.scale(app.store, web, 3)
    assert len(app.store.job_task_ids(glob)) == 1 and len(app.store.job_task_ids(web)) == 1


def test_drain_moves_service_tasks_off_the_node(app, redis_url, namespace):
    store = app.store
    add_nodes(app, "n1", "n2", "n3", cpu="4")
    web = submit(app, {"id": "web", "replicas": 6, "resources": SMALL})
    glob = submit(app, {"id": "agent", "type": "global", "resources": SMALL})
    settle(app)
    on_n1 = [t.id for t in live(app, web) if t.node == "n1"]
    assert on_n1  # spread puts some of web on every node

    done = cli(redis_url, namespace, "node", "drain", "n1")
    # The global job's task there is stopped too, and not replaced while the node is drained.
    assert done.stdout == f"node n1 drained: {len(on_n1) + 1} task(s) stopped; {len(on_n1)} replacement(s) queued\n"
    settle(app)
    assert store.get_node("n1").availability == "drain"
    assert store.node_task_ids("n1") == [] and store.get_node("n1").tasks == 0
    assert not any(store.get_node("n1").allocated.values())
    for task_id in on_n1:
        task = store.get_task(task_id)
        assert task.state == "stopped" and task.message == "node n1 drained"
    assert len(live(app, web)) == 6 and {t.node for t in live(app, web)} == {"n2", "n3"}
    assert sorted(t.node for t in live(app, glob)) == ["n2", "n3"]  # not replaced while drained
    assert_audit_ok(app)

    cli(redis_url, namespace, "node", "activate", "n1")
    settle(app)
    assert sorted(t.node for t in live(app, glob)) == ["n1", "n2", "n3"]
    assert len(live(app, web)) == 6  # nothing moves back by itself
    assert_audit_ok(app)


def test_job_stop_releases_every_allocation(app, redis_url, namespace):
    add_nodes(app, "n1", "n2", cpu="2")
    web = submit(app, {"id": "web", "replicas": 3, "ports": [8080], "resources": SMALL})
    crunch = submit(app, {"id": "crunch", "type": "batch", "replicas": 6, "resources": {"cpu": 1, "memory": "64MiB"}})
    glob = submit(app, {"id": "agent", "type": "global", "resources": {"cpu": 0.25, "memory": "32MiB"}})
    settle(app)
    assert len(live(app, web)) == 2 and len(by_state(app, web, "pending")) == 1  # one port 8080 per node
    assert by_state(app, crunch, "pending")  # more than fits
    assert any(n.ports for n in app.store.nodes())

    reconcile.stop(app.store, web)
    assert set(t.state for t in tasks_of(app, web)) == {"stopped"}
    assert not any(n.ports for n in app.store.nodes())
    assert app.client.zcard(app.keys.tally_job(web)) == 0
    assert live(app, crunch) and len(live(app, glob)) == 2  # other jobs keep theirs
    assert_audit_ok(app)

    cli(redis_url, namespace, "job", "stop", crunch)
    reconcile.stop(app.store, glob)
    for job_id in (web, crunch, glob):
        assert app.store.get_job(job_id)["status"] == "stopped"
        assert set(t.state for t in tasks_of(app, job_id)) == {"stopped"}
    assert_released(app)
    settle(app)  # a worker (and the global reconciler) adds nothing back
    assert not any(t.state in LIVE_STATES or t.state == "pending"
                   for job_id in (web, crunch, glob) for t in tasks_of(app, job_id))
    assert_released(app)

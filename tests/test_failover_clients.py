"""Short-lived clients and the RQ work horse wait out a failover within the failover
bound (scheduler/state/failover.py), never depend on one particular master to connect,
and never record a task they could not start.

`run_task` (the RQ job an agent queues) is called here in the test's process, against
real servers: one server whose socket is taken away, a Redis Cluster whose master of slot
0 is dead, and a cluster master and a Sentinel master SIGKILLed just before the call.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from redis.exceptions import AuthenticationError, ConnectionError

from scheduler.control import reconcile
from scheduler.control.execution import run_task
from scheduler.model import ASSIGNED, COMPLETED, RUNNING, make_node, parse_job
from scheduler.state.app import App
from scheduler.state.connection import client_for, failover_bound_s
from scheduler.state.failover import BRIEF_S, BoundedRetry
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from redis_topologies import wait_until

WAIT_S = 60  # deadlines only


def assigned_command(app: App, job_id: str, marks) -> str:
    """A batch job of one command, placed on node n1: the id of its assigned task. The
    command appends its task id to ``marks``."""
    app.store.put_node(make_node("n1", cpu="4", memory="8GiB"))
    command = ["sh", "-c", f'echo "$SCHED_TASK_ID" >> {marks}']
    reconcile.submit(app.store, parse_job({"id": job_id, "type": "batch", "max_retries": 0, "replicas": 1,
                                           "resources": {"cpu": "1", "memory": "1GiB"}, "run": {"command": command}}))
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    task = app.store.get_task(f"{job_id}.0")
    assert task.state == ASSIGNED and task.node == "n1"
    return task.id


def ran(marks) -> list[str]:
    return marks.read_text().split() if marks.exists() else []


# ----------------------------------------------------------------------------- the retry
def test_a_bounded_retry_waits_until_its_bound_and_never_for_a_refused_password():
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise ConnectionError("not yet")
        return "answered"

    assert BoundedRetry(lambda: 30.0).call_with_retry(flaky, lambda _e: None) == "answered" and len(calls) == 4

    calls.clear()

    def refused():
        calls.append(time.monotonic())
        raise AuthenticationError("invalid username-password pair")

    with pytest.raises(AuthenticationError):
        BoundedRetry(lambda: 30.0).call_with_retry(refused, lambda _e: None)
    assert len(calls) == 1

    calls.clear()

    def never():
        calls.append(time.monotonic())
        raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        BoundedRetry(lambda: 0.3).call_with_retry(never, lambda _e: None)
    assert len(calls) >= 2 and calls[-1] - calls[0] >= 0.3  # tried again until the bound, then gave up


def test_the_bound_is_configured_or_brief_on_one_server(monkeypatch):
    monkeypatch.delenv("SCHED_FAILOVER_S", raising=False)
    assert failover_bound_s("redis://localhost:1/0") == BRIEF_S
    assert failover_bound_s("redis+sentinel://127.0.0.1:1/nobody") == BRIEF_S  # nothing answers: no failover
    monkeypatch.setenv("SCHED_FAILOVER_S", "12.5")
    assert failover_bound_s("redis+cluster://127.0.0.1:1") == 12.5
    monkeypatch.setenv("SCHED_FAILOVER_S", "soon")
    with pytest.raises(Exception) as bad:
        failover_bound_s("redis://localhost:1/0")
    assert str(bad.value) == "SCHED_FAILOVER_S is 'soon': give a number of seconds between 0 and 3600."


def test_a_client_that_never_resends_still_waits_to_connect(own_redis):
    """Connecting sends nothing, so even the client for calls that must not run twice
    waits for a Redis that is briefly away; with no time to wait it fails at once."""
    _, url = own_redis
    socket = url.removeprefix("unix://")
    os.rename(socket, socket + ".away")
    back = threading.Timer(0.5, os.rename, (socket + ".away", socket))
    try:
        with pytest.raises(ConnectionError):
            client_for(url, retrying=False, wait_s=0).ping()
        patient = client_for(url, retrying=False, wait_s=WAIT_S)
        back.start()
        assert patient.ping()
    finally:
        back.cancel()  # nothing, once it has run
        if not os.path.exists(socket):
            os.rename(socket + ".away", socket)


# ----------------------------------------------------------------------------- the start
def test_a_start_resent_after_a_lost_reply_is_recognised_by_its_token(app):
    app.store.put_node(make_node("n1", cpu="4", memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "t", "replicas": 1, "resources": {"cpu": "1", "memory": "1GiB"}}))
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    assert app.store.start_task("t.0", "n1", token="first")
    assert app.store.start_task("t.0", "n1", token="first")  # the same run's start, resent
    assert not app.store.start_task("t.0", "n1", token="second")  # another run must not run it
    assert not app.store.start_task("t.0", "n1")
    assert not app.store.start_task("t.0", "n2", token="first")
    assert app.store.get_task("t.0").state == RUNNING


def test_a_work_horse_that_cannot_reach_redis_ends_without_starting_the_task(own_redis, tmp_path, monkeypatch):
    """Redis unreachable for longer than the bound: the job returns "not started", records
    nothing, runs nothing; the task stays assigned, and a later run starts it."""
    _, url = own_redis
    app = App(redis_url=url, namespace="horse")
    marks = tmp_path / "marks"
    task_id = assigned_command(app, "cmd", marks)
    monkeypatch.setenv("SCHED_FAILOVER_S", "0.3")
    socket = url.removeprefix("unix://")
    os.rename(socket, socket + ".away")  # the server runs on, but cannot be reached
    try:
        result = run_task(url, "horse", "n1", task_id)
    finally:
        os.rename(socket + ".away", socket)
    assert result["ran"] is False and result["started"] is False, result
    assert result["reason"].startswith("Redis did not answer before the task started: "), result
    assert ran(marks) == []
    assert app.store.get_task(task_id).state == ASSIGNED
    result = run_task(url, "horse", "n1", task_id)
    assert result["ran"] and result["succeeded"], result
    assert ran(marks) == [task_id] and app.store.get_task(task_id).state == COMPLETED


# ----------------------------------------------------------------------------- a dead master
@pytest.mark.slow
def test_clients_are_made_while_the_master_of_slot_0_is_down(cluster_factory, tmp_path):
    """redis-py asks its default node, the master of slot 0, for the command table: a
    client must not need that one master (here dead, and not failed over for a minute)."""
    cluster = cluster_factory(node_timeout_ms=60_000)
    nodes = cluster.topology()
    slot0 = next(port for port, node in nodes.items() if node["role"] == "master"
                 and any(first <= 0 <= last for first, last in node["slots"]))
    probe = client_for(cluster.url)
    namespace = next(f"live-{i}" for i in range(1000) if probe.get_node_from_key(f"sched:{{live-{i}}}:q:active").port
                     != slot0)
    probe.close()
    marks = tmp_path / "marks"
    task_id = assigned_command(App(redis_url=cluster.url, namespace=namespace), "cmd", marks)
    cluster.servers[slot0].kill()
    once = client_for(cluster.url, retrying=False)  # no retries: it built at once, from another node
    assert once.get_default_node().port != slot0
    # A work horse builds both clients, and loads start.lua (never called before) where its keys live.
    result = run_task(cluster.url, namespace, "n1", task_id)
    assert result["ran"] and result["succeeded"], result
    assert ran(marks) == [task_id]


def _started_during_failover(url: str, namespace: str, kill, tmp_path) -> None:
    app = App(redis_url=url, namespace=namespace)
    marks = tmp_path / "marks"
    task_id = assigned_command(app, "cmd", marks)
    kill()
    result = run_task(url, namespace, "n1", task_id)  # the work horse meets the failover
    assert result["ran"] and result["succeeded"], result
    assert ran(marks) == [task_id]
    assert App(redis_url=url, namespace=namespace).store.get_task(task_id).state == COMPLETED


@pytest.mark.slow
def test_a_work_horse_waits_out_a_cluster_failover(cluster_factory, tmp_path):
    """The namespace's master is the master of slot 0, so it is the one a fresh client
    would ask for the command table."""
    cluster = cluster_factory()
    probe = client_for(cluster.url)
    slot0 = probe.nodes_manager.slots_cache[0][0].port
    namespace = next(f"ns-{i}" for i in range(1000)
                     if probe.get_node_from_key(f"sched:{{ns-{i}}}:q:active").port == slot0)
    probe.close()
    assert failover_bound_s(cluster.url) == 2 * 2.0 + 5  # learned from cluster-node-timeout (2000 ms)

    def kill():
        replicas = cluster.masters()[slot0]
        wait_until(lambda: cluster.servers[slot0].client().execute_command("WAIT", len(replicas), 1000)
                   >= len(replicas), WAIT_S, "the replica to have every write")
        cluster.servers[slot0].kill()  # and at once run the task: the failover is still to come

    _started_during_failover(cluster.url, namespace, kill, tmp_path)


@pytest.mark.slow
def test_a_work_horse_waits_out_a_sentinel_failover(sentinel_factory, tmp_path):
    """A master declared down after 3 s: a failover longer than a few retries."""
    setup = sentinel_factory(down_after_ms=3000)
    assert failover_bound_s(setup.url) == 2 * 3.0 + 5  # learned from down-after-milliseconds

    def kill():
        master = setup.servers[setup.master_port()]
        wait_until(lambda: master.client().execute_command("WAIT", 1, 1000) >= 1, WAIT_S,
                   "the replica to have every write")
        master.kill()

    _started_during_failover(setup.url, "se-horse", kill, tmp_path)

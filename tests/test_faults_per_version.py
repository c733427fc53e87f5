"""Failures that make a node faulty for a job count per job version: an update of the job
(a new spec version) that fixes what failed gets a fresh chance on the node, as SwarmKit
counts failures per service version."""

from __future__ import annotations

from scheduler.control import reconcile
from scheduler.engine.placement import PlacementOptions
from scheduler.model import make_node, parse_job
from scheduler.state.node_cache import NodeCache
from scheduler.state.tallies import FAULT_WINDOW_MS
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

THRESHOLD = PlacementOptions().faulty_threshold


def failed(app, job_id, node, task_id, version):
    """What ending a task of ``version`` as failed on ``node`` records (end_task in lua/_lib.lua)."""
    app.client.zadd(app.keys.faults(job_id), {f"{node}|{task_id}|{version}": app.store.now_ms()})


def faults_seen(app, job_id):
    """What a worker reads for the job: node -> failures that count."""
    store = app.store
    now = store.now_ms()
    _, (reply,) = NodeCache(store).refresh_with(now, lambda pipe: store.queue_job_tallies(pipe, [job_id], now - FAULT_WINDOW_MS))
    return store.read_job_tallies([job_id], reply)[1].get(job_id, {})


def test_faults_count_only_for_the_current_version(app):
    store = app.store
    store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    store.put_node(make_node("n2", cpu=4, memory="8GiB"))
    assert reconcile.submit(store, parse_job({"id": "flaky", "replicas": 1, "run": {"command": ["echo", "v1"]}}))["version"] == 1
    for i in range(THRESHOLD):
        failed(app, "flaky", "n1", f"flaky.{i}", 1)
    failed(app, "flaky", "n2", "flaky.9", 1)
    members = app.client.zrange(app.keys.faults("flaky"), 0, -1)
    assert sorted(members)[0] == "n1|flaky.0|1"  # node|task|version
    assert faults_seen(app, "flaky") == {"n1": THRESHOLD, "n2": 1}

    # The fix: a new version. Its own failures start from none.
    assert reconcile.submit(store, parse_job({"id": "flaky", "replicas": 1, "run": {"command": ["echo", "v2"]}}))["version"] == 2
    assert faults_seen(app, "flaky") == {}
    failed(app, "flaky", "n1", "flaky.20", 2)
    assert faults_seen(app, "flaky") == {"n1": 1}


def test_worker_places_the_fixed_version_on_the_node_the_old_one_failed_on(app):
    store = app.store
    store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    reconcile.submit(store, parse_job({"id": "flaky", "replicas": 1, "run": {"command": ["echo", "v1"]}}))
    for i in range(THRESHOLD):
        failed(app, "flaky", "n1", f"flaky.{i}", 1)
    worker = SchedulerWorker(app, WorkerConfig())
    now = store.now_ms()
    assert worker._refresh({"flaky"}, now)[2] == {"flaky": {"n1": THRESHOLD}}  # v1: n1 is faulty
    reconcile.submit(store, parse_job({"id": "flaky", "replicas": 1, "run": {"command": ["echo", "v2"]}}))
    assert worker._refresh({"flaky"}, store.now_ms())[2] == {}  # v2: a fresh chance
    worker.config.until_idle = True
    worker.run()
    tasks = [t for t in store.tasks(store.job_task_ids("flaky")) if t.version == 2]
    assert [(t.state, t.node) for t in tasks] == [("assigned", "n1")]

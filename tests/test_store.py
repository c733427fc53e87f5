"""Store and reconcile against a real Redis: jobs become tasks, versions replace tasks,
scaling, stopping, and nodes that keep what runs on them."""

from __future__ import annotations

import pytest

from scheduler.control import reconcile
from scheduler.model.errors import NotFound, SpecError
from scheduler.model import make_node, parse_job
from scheduler.state.jobs import job_state
from scheduler.state.queue import queue_score

from commits import commit_one

GiB = 2**30


# ----------------------------------------------------------------------------- helpers
def spec(job_id="web", replicas=3, cpu="1", **extra):
    return parse_job({"id": job_id, "replicas": replicas, "resources": {"cpu": cpu, "memory": "1Gi"}, **extra})


def add_node(app, name="n1", cpu="4", memory="8GiB", **kw):
    return app.store.put_node(make_node(name, cpu=cpu, memory=memory, **kw))


def queues_of(app, task_id) -> list[str]:
    k = app.keys
    return [name for name, key in (("active", k.active), ("backoff", k.backoff),
                                   ("unschedulable", k.unschedulable), ("inflight", k.inflight))
            if app.client.zscore(key, task_id) is not None]


def state(app, task_id) -> str:
    return app.client.hget(app.keys.task(task_id), "state")


def snapshot(app) -> dict:
    client = app.client
    return {key: (client.type(key), client.dump(key), client.pttl(key))
            for key in sorted(client.scan_iter(match=f"{app.keys.prefix}*", count=1000))}


def place(app, placements: dict[str, str], cpu=1000, memory=GiB, ports=()):
    """Make tasks live: claim everything pending, commit ``task -> node`` through lua/commit.lua
    and hand the rest back."""
    claim = app.queue.claim(10_000)
    for task_id, node in placements.items():
        job = app.client.hget(app.keys.task(task_id), "job")
        assert commit_one(app, claim.token, task_id, node, job, {"cpu": cpu, "memory": memory}, ports) == 1, task_id
    rest = [t for t in claim.task_ids if t not in placements]
    if rest:
        app.queue.release(claim.token, rest)


# ----------------------------------------------------------------------------- submit
def test_submit_creates_pending_tasks_in_the_active_queue(app):
    result = reconcile.submit(app.store, spec(replicas=3))
    assert result == {"id": "web", "version": 1, "tasks": ["web.0", "web.1", "web.2"], "created": True,
                      "deployment": None, "changes": result["changes"]}
    assert result["changes"]["action"] == "create"
    assert app.store.job_ids() == ["web"]
    assert app.store.job_task_ids("web") == ["web.0", "web.1", "web.2"]
    assert sorted(app.client.zrange(app.keys.active, 0, -1)) == ["web.0", "web.1", "web.2"]
    for i, task in enumerate(app.store.tasks(result["tasks"])):
        assert task.state == "pending"
        assert (task.job, task.version, task.index, task.attempts) == ("web", 1, i, 0)
        assert float(app.client.hget(app.keys.task(task.id), "qscore")) == app.client.zscore(app.keys.active, task.id)
    job = app.store.get_job("web")
    assert (job["version"], job["status"], job["spec"]["replicas"]) == (1, "running", 3)


def test_queue_scores_written_by_enqueue_lua_follow_queue_score(app):
    first_seq = int(app.client.get(app.keys.enqueue_seq) or 0) + 1
    reconcile.submit(app.store, spec("low", replicas=2, priority=10))
    reconcile.submit(app.store, spec("high", replicas=1, priority=900))
    for task_id, priority, seq in (("low.0", 10, first_seq), ("low.1", 10, first_seq + 1), ("high.0", 900, first_seq + 2)):
        assert app.client.zscore(app.keys.active, task_id) == queue_score(priority, seq)
    assert app.client.zrange(app.keys.active, 0, -1) == ["high.0", "low.0", "low.1"]


def test_enqueue_refuses_a_job_changed_since_it_was_read_and_writes_nothing(app):
    reconcile.submit(app.store, spec(replicas=1))
    stale = job_state(app.client.hgetall(app.keys.job("web")))
    reconcile.scale(app.store, "web", 2)
    before = snapshot(app)
    assert app.store.enqueue("web", stale, {"next_index": 2}, 1, 0, 1, 1) is None
    assert app.store.enqueue("web", "", {"next_index": 3}, 1, 0, 2, 1) is None  # "must not exist"
    assert snapshot(app) == before


def _add_one_at_a_time(url, namespace, times):
    from scheduler.state.app import App
    app = App(redis_url=url, namespace=namespace)
    for _ in range(times):
        reconcile.add_tasks(app.store, "web", 1)


def test_concurrent_adds_from_many_processes_lose_and_repeat_no_index(app, redis_url, namespace):
    """Compare-and-set under contention: every add gets its own index, none is lost."""
    import multiprocessing
    reconcile.submit(app.store, spec(replicas=1))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_one_at_a_time, args=(redis_url, namespace, 40)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    expected = [f"web.{i}" for i in range(1 + 4 * 40)]
    assert app.store.job_task_ids("web") == expected
    assert sorted(app.client.zrange(app.keys.active, 0, -1)) == sorted(expected)
    assert int(app.client.hget(app.keys.job("web"), "next_index")) == len(expected)
    assert all(task.state == "pending" for task in app.store.tasks(expected))


def test_resubmitting_the_identical_spec_is_a_no_op(app):
    reconcile.submit(app.store, spec())
    before = snapshot(app)
    again = reconcile.submit(app.store, spec())
    assert again == {"id": "web", "version": 1, "tasks": [], "created": False, "deployment": None,
                     "changes": again["changes"]}
    assert again["changes"]["action"] == "none"
    assert snapshot(app) == before


def test_identical_spec_written_differently_is_still_a_no_op(app):
    reconcile.submit(app.store, spec(cpu="500m"))
    before = snapshot(app)
    again = reconcile.submit(app.store, spec(cpu=0.5))
    assert again["tasks"] == [] and again["version"] == 1
    assert snapshot(app) == before


def test_changed_spec_makes_a_new_version_and_stops_the_old_tasks(app):
    reconcile.submit(app.store, spec(replicas=2))
    result = reconcile.submit(app.store, spec(replicas=2, cpu="2"))
    assert result == {"id": "web", "version": 2, "tasks": ["web.2", "web.3"], "created": False, "deployment": None,
                      "changes": result["changes"]}
    assert result["changes"]["action"] == "replace-all"
    for old in ("web.0", "web.1"):
        assert state(app, old) == "stopped"
        assert app.client.hget(app.keys.task(old), "message") == "replaced by version 2"
        assert queues_of(app, old) == []
    for new in ("web.2", "web.3"):
        assert state(app, new) == "pending"
        assert app.client.hget(app.keys.task(new), "version") == "2"
        assert queues_of(app, new) == ["active"]
    job = app.store.get_job("web")
    assert job["version"] == 2 and job["spec"]["resources"]["cpu"] == "2000m"
    assert app.store.job_spec("web", 1).resources["cpu"] == 1000       # the old version's spec is kept
    assert app.store.job_spec("web", 2).resources["cpu"] == 2000


def test_new_version_releases_live_tasks_of_the_old_one(app):
    add_node(app)
    reconcile.submit(app.store, spec(replicas=1))
    place(app, {"web.0": "n1"})
    assert app.client.hget(app.keys.node("n1"), "alloc:cpu") == "1000"
    reconcile.submit(app.store, spec(replicas=1, priority=60))
    assert state(app, "web.0") == "stopped"
    assert app.client.hget(app.keys.node("n1"), "alloc:cpu") == "0"
    assert app.store.node_task_ids("n1") == []
    assert app.client.zrange(app.keys.active, 0, -1) == ["web.1"]


def test_resubmitting_a_stopped_job_starts_it_again(app):
    reconcile.submit(app.store, spec(replicas=1))
    reconcile.stop(app.store, "web")
    result = reconcile.submit(app.store, spec(replicas=1))
    assert result["version"] == 2 and result["tasks"] == ["web.1"]
    assert app.store.get_job("web")["status"] == "running"


def test_global_job_pins_one_task_to_each_eligible_node(app):
    add_node(app, "n1", labels=["zone=eu-1"])
    add_node(app, "n2", labels=["zone=us-1"])
    add_node(app, "n3", labels=["zone=eu-1"])
    g = parse_job({"id": "agent", "type": "global", "constraints": ["node.labels.zone==eu-1"]})
    result = reconcile.submit(app.store, g)
    assert len(result["tasks"]) == 2
    pins = sorted(app.client.hget(app.keys.task(t), "pin") for t in result["tasks"])
    assert pins == ["n1", "n3"]
    assert app.store.job_spec("agent", 1).type == "global"     # the stored spec reads back
    with pytest.raises(SpecError, match="global"):
        reconcile.scale(app.store, "agent", 5)


# ----------------------------------------------------------------------------- scale
def test_scale_up_adds_tasks_with_new_indexes(app):
    reconcile.submit(app.store, spec(replicas=2))
    result = reconcile.scale(app.store, "web", 4)
    assert result == {"id": "web", "replicas": 4, "added": ["web.2", "web.3"], "stopped": []}
    assert app.client.zcard(app.keys.active) == 4
    job = app.store.get_job("web")
    assert job["spec"]["replicas"] == 4 and job["version"] == 1
    assert app.client.hget(app.keys.task("web.3"), "version") == "1"


def test_scale_down_stops_the_newest_first(app):
    reconcile.submit(app.store, spec(replicas=4))
    result = reconcile.scale(app.store, "web", 2)
    assert result["stopped"] == ["web.3", "web.2"]
    assert [state(app, f"web.{i}") for i in range(4)] == ["pending", "pending", "stopped", "stopped"]
    assert sorted(app.client.zrange(app.keys.active, 0, -1)) == ["web.0", "web.1"]
    assert app.store.get_job("web")["spec"]["replicas"] == 2


def test_scale_down_stops_pending_tasks_before_live_ones(app):
    add_node(app)
    reconcile.submit(app.store, spec(replicas=4))
    place(app, {"web.0": "n1", "web.2": "n1"})
    result = reconcile.scale(app.store, "web", 1)
    assert result["stopped"] == ["web.3", "web.1", "web.2"]
    assert [state(app, f"web.{i}") for i in range(4)] == ["assigned", "stopped", "stopped", "stopped"]
    assert app.client.hget(app.keys.node("n1"), "alloc:cpu") == "1000"
    assert app.store.node_task_ids("n1") == ["web.0"]
    assert app.client.zcard(app.keys.active) == 0


def test_scale_to_zero_and_back(app):
    reconcile.submit(app.store, spec(replicas=2))
    reconcile.scale(app.store, "web", 0)
    assert app.queue.counts()["active"] == 0
    result = reconcile.scale(app.store, "web", 1)
    assert result["added"] == ["web.2"]
    assert app.client.zrange(app.keys.active, 0, -1) == ["web.2"]


def test_a_stopped_job_cannot_be_scaled(app):
    reconcile.submit(app.store, spec(replicas=2))
    reconcile.stop(app.store, "web")
    before = snapshot(app)
    with pytest.raises(SpecError, match="stopped"):
        reconcile.scale(app.store, "web", 3)
    assert snapshot(app) == before
    assert app.queue.counts()["active"] == 0


def test_scale_unknown_job(app):
    with pytest.raises(NotFound):
        reconcile.scale(app.store, "nope", 3)


# ----------------------------------------------------------------------------- stop
def test_stop_ends_every_task_and_empties_the_queues(clocked_app, clock):
    app = clocked_app
    add_node(app)
    reconcile.submit(app.store, spec(replicas=6, ports=[8080]))
    place(app, {"web.0": "n1"}, ports=[8080])
    # One task in each place a pending task can be: backoff, unschedulable, inflight, active.
    claim = app.queue.claim(3)
    assert claim.task_ids == ["web.1", "web.2", "web.3"]
    app.queue.fail(claim.token, [("web.1", {"nodes_evaluated": 0, "reasons": {}, "message": "x"})])
    app.queue.cluster_event()
    app.queue.fail(claim.token, [("web.2", {"nodes_evaluated": 0, "reasons": {}, "message": "x"})])
    assert app.queue.counts() == {"active": 2, "backoff": 1, "unschedulable": 1, "inflight": 1, "waiting": 0}

    result = reconcile.stop(app.store, "web")
    assert sorted(result["stopped"]) == [f"web.{i}" for i in range(6)]
    assert [state(app, f"web.{i}") for i in range(6)] == ["stopped"] * 6
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert app.client.hlen(app.keys.leases) == 0
    node = app.client.hgetall(app.keys.node("n1"))
    assert (node["alloc:cpu"], node["alloc:memory"], node["tasks"]) == ("0", "0", "0")
    assert "port:8080" not in node
    assert app.store.get_node("n1").free("cpu") == 4000
    assert app.client.exists(app.keys.tally_job("web")) == 0
    assert app.store.node_task_ids("n1") == []
    assert app.store.get_job("web")["status"] == "stopped"
    # The worker that still holds web.3 cannot commit it any more.
    assert commit_one(app, claim.token, "web.3", "n1", "web", {"cpu": 1000}) == "lease expired"
    assert app.queue.fail(claim.token, [("web.3", {"nodes_evaluated": 0, "reasons": {}, "message": "x"})]) \
        == ["lease expired"]
    assert app.queue.release(claim.token, ["web.3"]) == []
    assert state(app, "web.3") == "stopped"
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}


def test_stop_twice_and_stop_unknown(app):
    reconcile.submit(app.store, spec(replicas=1))
    reconcile.stop(app.store, "web")
    assert reconcile.stop(app.store, "web")["stopped"] == []
    assert app.store.finish_ids(["web.0"], "stopped") == {"web.0": "terminal:stopped"}
    with pytest.raises(NotFound):
        reconcile.stop(app.store, "nope")


# ----------------------------------------------------------------------------- nodes
def test_put_node_registers_and_reads_back(app):
    assert add_node(app, "n1", cpu="4", memory="8GiB", resources={"gpu": 2}, labels=["zone=eu-1"],
                    plugins=["network"]) is True
    node = app.store.get_node("n1")
    assert node.capacity == {"cpu": 4000, "memory": 8 * GiB, "gpu": 2}
    assert node.labels == {"zone": "eu-1"} and node.plugins == frozenset({"network"})
    assert (node.availability, node.status, node.tasks) == ("active", "ready", 0)
    assert app.store.node_names() == ["n1"]
    assert app.store.resource_names() == ["cpu", "gpu", "memory"]
    assert node.free("gpu") == 2


def test_updating_a_node_keeps_its_allocations(app):
    add_node(app, "n1", cpu="4", resources={"gpu": 1}, labels=["zone=eu-1"])
    reconcile.submit(app.store, spec(replicas=1))
    place(app, {"web.0": "n1"}, ports=[8080])
    app.store.set_availability("n1", "pause")

    assert add_node(app, "n1", cpu="8", memory="16GiB", labels=["zone=eu-2"]) is False
    node = app.store.get_node("n1")
    assert node.capacity == {"cpu": 8000, "memory": 16 * GiB}               # gpu is gone
    assert node.allocated == {"cpu": 1000, "memory": GiB}
    assert node.ports == {8080: "web.0"}
    assert node.tasks == 1
    assert node.labels == {"zone": "eu-2"}
    assert node.availability == "pause"                                     # set by a person: kept
    assert (node.free("cpu"), node.free("memory")) == (7000, 15 * GiB)
    assert app.store.node_task_ids("n1") == ["web.0"]


def test_set_availability_and_status(app):
    add_node(app)
    assert app.store.set_availability("n1", "drain") == "active"
    assert app.store.set_availability("n1", "active") == "drain"
    assert app.store.set_status("n1", "down") == "ready"
    assert app.store.get_node("n1").status == "down"
    with pytest.raises(SpecError):
        app.store.set_availability("n1", "sleeping")
    with pytest.raises(SpecError):
        app.store.set_status("n1", "maybe")
    with pytest.raises(NotFound):
        app.store.set_availability("nope", "pause")
    assert app.client.exists(app.keys.node("nope")) == 0


def test_removing_a_node_with_live_tasks_is_refused(app):
    add_node(app)
    reconcile.submit(app.store, spec(replicas=1))
    place(app, {"web.0": "n1"})
    before = snapshot(app)
    with pytest.raises(SpecError, match="still runs tasks"):
        app.store.remove_node("n1")
    assert snapshot(app) == before

    app.store.finish_ids(["web.0"], "completed")
    app.store.remove_node("n1")
    assert app.store.node_names() == []
    assert app.client.exists(app.keys.node("n1")) == 0
    with pytest.raises(NotFound):
        app.store.remove_node("n1")


def test_drain_moves_service_tasks_elsewhere(app):
    add_node(app, "n1")
    add_node(app, "n2")
    reconcile.submit(app.store, spec(replicas=2))
    place(app, {"web.0": "n1", "web.1": "n2"})
    app.store.set_availability("n1", "drain")
    replacements = reconcile.drain_node(app.store, "n1")
    assert replacements == ["web.2"]
    assert state(app, "web.0") == "stopped" and state(app, "web.1") == "assigned"
    assert app.client.zrange(app.keys.active, 0, -1) == ["web.2"]
    assert app.store.get_node("n1").allocated == {"cpu": 0, "memory": 0}
    assert app.store.node_task_ids("n1") == []


def test_resubmitting_with_other_replicas_scales_without_replacing_tasks(app):
    app.store.put_node(make_node("n1", cpu="8", memory="8GiB"))
    spec = {"id": "web", "replicas": 2, "resources": {"cpu": "1", "memory": "256MiB"}}
    reconcile.submit(app.store, parse_job(spec))
    first = reconcile.submit(app.store, parse_job({**spec, "replicas": 4}))
    assert first["version"] == 1 and first["tasks"] == ["web.2", "web.3"]
    states = {t.id: t.state for t in app.store.tasks(app.store.job_task_ids("web"))}
    assert states == {"web.0": "pending", "web.1": "pending", "web.2": "pending", "web.3": "pending"}
    changed = reconcile.submit(app.store, parse_job({**spec, "replicas": 4, "priority": 60}))
    assert changed["version"] == 2          # anything else than replicas is a new version

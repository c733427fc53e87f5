"""Drains that honour disruption budgets, step by step against the real redis-server: a
real worker places the replacements, the tests start them as an agent would, and each
drain step (the one the workers' upkeep takes) moves what the budgets allow."""

from __future__ import annotations

import json

import pytest

from scheduler import Client
from scheduler.control import budgets, drains
from scheduler.control import reconcile
from scheduler.model import parse_job

from api_harness import Api, http, tokens  # noqa: F401 (fixtures)
from budget_helpers import Sampler, add_nodes, healthy_count, running_job, start_all
from worker_harness import run_worker_until_idle

WAITING = "waiting on job web's budget, 1 of 1 unavailable"


@pytest.fixture
def crowded(app):
    """web: 4 replicas, 3 of them on n3 (and one on n1), max_unavailable 1; n2 empty."""
    add_nodes(app, ["n3"], cpu=3)
    add_nodes(app, ["n1"], cpu=1)
    running_job(app, "web", replicas=4, budget={"max_unavailable": 1})
    add_nodes(app, ["n2"], cpu=4)
    assert sorted(t.node for t in app.store.tasks(app.store.job_task_ids("web"))) == ["n1", "n3", "n3", "n3"]
    return app


def on(app, node, job="web"):
    return sorted(t.id for t in app.store.tasks(app.store.job_task_ids(job)) if t.live and t.node == node)


def settle(app, job="web"):
    """A worker places what is pending; the 'agent' starts it healthy; the upkeep counts."""
    run_worker_until_idle(app)
    start_all(app, job)
    budgets.count(app.store, job)


def test_a_drain_moves_one_task_of_a_budgeted_job_at_a_time(crowded):
    app, store = crowded, crowded.store
    with Sampler(app, "web") as sampler:
        report = Client(app=app).drain_report("n3")
        assert report["state"] == "draining" and report["before"] == "active"
        assert len(report["stopped"]) == 1 and len(report["replacements"]) == 1
        assert report["message"] == WAITING and report["left"] == 2
        assert store.get_node("n3").availability == "drain"
        for left in (1, 0):
            assert drains.step(store, "n3")["stopped"] == []  # the replacement is not running yet
            settle(app)
            done = drains.step(store, "n3")
            assert len(done["stopped"]) == 1 and done["left"] == left
        assert done["state"] == "complete" and done["message"] == "3 task(s) moved"
    assert sampler.low == 3  # never 2 down at once
    assert on(app, "n3") == [] and store.drain_record("n3")["state"] == "complete"
    settle(app)
    assert healthy_count(app, "web") == 4


def test_jobs_without_a_budget_drain_at_once_beside_one_that_waits(crowded):
    app = crowded
    add_nodes(app, ["n4"], cpu=2)
    reconcile.submit(app.store, parse_job({"id": "free", "replicas": 2, "resources": {"cpu": 0}, "constraints": [
        "node.name==n3"]}))
    run_worker_until_idle(app)
    start_all(app, "free")
    report = drains.start(app.store, "n3")
    assert on(app, "n3", "free") == [] and len(on(app, "n3")) == 2
    assert report["message"] == WAITING


def test_the_upkeep_of_a_real_worker_drives_the_drain(crowded):
    app = crowded
    drains.start(app.store, "n3", deadline_s=None)
    for _ in range(3):
        settle(app)  # the worker's upkeep steps the drain as it places
    run_worker_until_idle(app)
    assert on(app, "n3") == [] and app.store.drain_record("n3")["state"] == "complete"


def test_after_the_deadline_the_rest_goes_whatever_the_budget(crowded, clock, redis_url, namespace):
    from scheduler.state.app import App

    clocked = App(redis_url=redis_url, namespace=namespace, clock=clock)
    clock.now = crowded.store.now_ms()
    budgets.count(clocked.store, "web")
    report = drains.start(clocked.store, "n3", deadline_s=60)
    assert report["left"] == 2 and report["deadline_at"] == clock.now + 60_000
    clock.advance(59_000)
    assert drains.step(clocked.store, "n3")["stopped"] == []
    clock.advance(1_000)
    done = drains.step(clocked.store, "n3")
    assert len(done["stopped"]) == 2 and done["state"] == "complete"
    assert done["message"] == "deadline reached: 2 task(s) stopped whatever their budgets"
    record = budgets.status(clocked.store, "web")
    assert record["healthy"] == 1 and record["allowed"] == 0  # counted against the budget


def test_force_drains_at_once_as_drain_always_did(crowded):
    report = Client(app=crowded).drain_report("n3", force=True)
    assert len(report["stopped"]) == 3 and report["state"] == "complete"
    assert budgets.status(crowded.store, "web")["healthy"] == 1


def test_activating_the_node_cancels_its_drain(crowded):
    client = Client(app=crowded)
    client.drain("n3")
    assert client.activate("n3") == "drain"
    assert client.drain_status("n3")["state"] == "cancelled"
    assert client.drain_status("n3")["message"] == "the node was activated"
    assert crowded.store.draining_nodes() == [] and len(on(crowded, "n3")) == 2


def test_a_node_paused_behind_a_drains_back_is_cancelled_at_the_next_step(crowded):
    drains.start(crowded.store, "n3")
    crowded.store.set_availability("n3", "pause")  # not through the client: the step sees it
    assert drains.step(crowded.store, "n3")["state"] == "cancelled"


def test_a_global_jobs_task_goes_last_and_through_its_budget(app):
    add_nodes(app, ["n1", "n2", "n3"], cpu=2)
    running_job(app, "agent", replicas=None, budget={"max_unavailable": 1}, type="global",
                resources={"cpu": 0.5})
    spec = {"id": "web", "replicas": 2, "resources": {"cpu": 1}, "constraints": ["node.name==n3"],
            "disruption_budget": {"max_unavailable": 1}}
    reconcile.submit(app.store, parse_job(spec))
    run_worker_until_idle(app)
    start_all(app, "web")
    report = drains.start(app.store, "n3")
    assert report["message"].startswith("waiting on job web's budget")
    assert on(app, "n3", "agent")  # kept while web's task waits
    reconcile.reconcile_global(app.store)
    assert on(app, "n3", "agent")  # the node is drained, not unwanted: its drain ends the task
    reconcile.submit(app.store, parse_job({**spec, "constraints": []}))  # web may go elsewhere now
    settle(app)
    drains.step(app.store, "n3")  # web's last task goes; then the global one
    settle(app)
    done = drains.step(app.store, "n3")
    assert on(app, "n3", "agent") == [] and done["state"] == "complete"


def test_a_worker_killed_midway_leaves_a_drain_the_next_one_finishes(crowded, monkeypatch):
    store = crowded.store
    budgets.count(store, "web")
    store.set_drain("n3", ("-",), drains.DRAINING, {"started_at": store.now_ms(), "deadline_at": 0, "force": 0})

    def dies(*args, **kwargs):
        raise KeyboardInterrupt  # the evictor dies after the grant, before the task ends

    monkeypatch.setattr(budgets, "_end", dies)
    store.take_lock("drain:n3", 60_000)  # and its lock is still held
    assert drains.step(store, "n3")["stopped"] == []
    store.release_lock("drain:n3")
    with pytest.raises(KeyboardInterrupt):
        drains.step(store, "n3")
    store.release_lock("drain:n3")  # its lock lapses
    monkeypatch.undo()
    assert len(budgets.status(store, "web")["disrupted"]) == 1
    done = drains.step(store, "n3")  # granted again, without counting twice
    assert len(done["stopped"]) == 1 and done["message"] == WAITING
    assert budgets.status(store, "web")["healthy"] == 3


# ----------------------------------------------------------------------------- the command
def test_sched_node_drain_detach_says_what_it_waits_for(crowded, sched):
    out = sched("node", "drain", "n3", "--detach").stdout.splitlines()
    assert out[0].startswith("node n3 draining (deadline ")
    assert out[0].endswith(f": 1 task(s) stopped; 1 replacement(s) queued; {WAITING}")
    assert out[1] == "the workers move the rest; follow it: sched node drain --monitor n3"
    assert f"drain of n3: 1 task(s) stopped, 2 left; {WAITING}" in sched("node", "show", "n3").stdout
    listed = sched("node", "ls").stdout
    assert "DRAIN" in listed and "waiting on job web" in listed
    records = {r["name"]: r for r in json.loads(sched("node", "ls", "--json").stdout)}
    assert records["n3"]["drain"]["message"] == WAITING and "drain" not in records["n1"]
    shown = json.loads(sched("node", "show", "n3", "--json").stdout)
    assert shown["drain"]["state"] == "draining" and shown["drain"]["left"] == 2


def test_sched_task_explain_says_what_the_drain_of_its_node_waits_for(crowded, sched):
    drains.start(crowded.store, "n3")
    waiting = on(crowded, "n3")[0]
    record = json.loads(sched("task", "explain", waiting, "--json").stdout)
    assert record["drain"] == {"node": "n3", "message": WAITING}
    assert sched("task", "explain", waiting).stdout.endswith(
        f"placed on node n3. Node n3 is draining: {WAITING}.\n")


def test_sched_node_drain_json_detach_is_the_report(crowded, sched):
    report = json.loads(sched("node", "drain", "n3", "--detach", "--json").stdout)
    assert report["state"] == "draining" and report["message"] == WAITING and len(report["stopped"]) == 1


def test_sched_node_drain_force_and_no_deadline(crowded, sched):
    assert sched("node", "drain", "n3", "--force").stdout == \
        "node n3 drained: 3 task(s) stopped; 3 replacement(s) queued\n"
    assert sched("node", "drain", "n3", "--no-deadline").stdout == "node n3 is already drained\n"


def test_sched_node_drain_monitor_of_an_ended_drain(crowded, sched):
    sched("node", "drain", "n3", "--force")
    assert sched("node", "drain", "n3", "--monitor").stdout == \
        "node n3 drained: deadline reached: 3 task(s) stopped whatever their budgets\n".replace(
            "deadline reached", "forced")


def test_a_bad_deadline_is_one_sentence_and_drains_nothing(crowded, sched):
    result = sched("node", "drain", "n3", "--deadline", "soon", ok=False)
    assert result.exit_code == 2
    assert result.stderr == ("Error: the drain's deadline must be a duration of 0 or more (seconds, or such as 90s, "
                             "30m, 1h, 7d) up to ten years, not 'soon'.\n")
    assert crowded.store.get_node("n3").availability == "active"


# ----------------------------------------------------------------------------- the HTTP API
def test_the_api_drains_with_options_and_follows_for_a_while(crowded, http, tokens):
    api = Api(http, tokens("operator"))
    ns = f"?namespace={crowded.keys.namespace}"
    report = api("POST", f"/v1/nodes/n3/drain{ns}", json={"deadline": "10m", "detach": False, "wait": 0.3}).json()
    assert report["state"] == "draining" and report["message"] == WAITING and len(report["stopped"]) == 1
    assert report["deadline_at"] - report["started_at"] == 600_000
    assert api("GET", f"/v1/nodes/n3/drain{ns}").json()["left"] == 2
    assert api("GET", f"/v1/nodes/n3{ns}").json()["drain"]["message"] == WAITING
    forced = api("POST", f"/v1/nodes/n3/drain{ns}", json={"force": True}).json()
    assert forced["state"] == "complete" and len(forced["stopped"]) == 2

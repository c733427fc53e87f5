"""sched rebalance against real Redis, with an in-process scheduler worker placing the
moves' new tasks through commit.lua and in-process nodes running them
(tests/rebalance_helpers.py): the plan, make before break with health checks, a stale
plan refused whole, moves abandoned cleanly, the settings and the policy."""

from __future__ import annotations

import json

import pytest

from scheduler import Client
from scheduler.control import moves as advancing, rebalance
from scheduler.model import make_node
from scheduler.model.moves import StalePlan
from worker_harness import run_worker_until_idle, wait_until

from rebalance_helpers import Runner, add_nodes, healthy_by_job, per_node, service, submit

LIVENESS_S = 60.0


def crowded(app, replicas: int = 6, new: tuple[str, ...] = ("n3", "n4"), **extra) -> Runner:
    """web's replicas on n1 and n2, all running and healthy; then ``new`` nodes join, empty."""
    add_nodes(app, ["n1", "n2"])
    submit(app, service("web", replicas, **extra))
    run_worker_until_idle(app)
    runner = Runner(app)
    runner.step()
    runner.step()
    assert healthy_by_job(app) == {"web": replicas}
    add_nodes(app, new)
    return runner


def drive(app, runner: Runner, until, what: str, sample=None) -> None:
    """Worker, nodes and the moves' upkeep in turn, until ``until()`` holds."""
    client = Client(app=app)

    def turn():
        run_worker_until_idle(app)
        runner.step()
        client.advance_moves()
        if sample is not None:
            sample()
        return until()

    wait_until(turn, LIVENESS_S, what, 0.01)


def ended(app) -> bool:
    return not app.store.active_move_ids()


def test_sched_rebalance_moves_tasks_onto_new_nodes_make_before_break(app, sched):
    runner = crowded(app)
    result = sched("rebalance")
    assert "2 move(s) planned by spread" in result.stdout and "applied as plan 1: moves 1-1, 1-2" in result.stdout
    assert "tasks of the job on its node: 3 -> 1 (+2)" in result.stdout
    fewest = []
    drive(app, runner, lambda: ended(app), "the moves to end",
          sample=lambda: fewest.append(healthy_by_job(app).get("web", 0)))
    assert min(fewest) >= 6  # make before break: never fewer healthy than the replicas
    assert sorted(per_node(app, "web").values()) == [1, 1, 2, 2]
    moves = Client(app=app).moves(active=False)
    assert [m["state"] for m in moves] == ["done", "done"]
    store = app.store
    for move in moves:
        old, new = store.get_task(move["task"]), store.get_task(move["new_task"])
        assert old.state == "stopped" and new.state == "running" and new.node == move["to"] and new.pin == move["to"]
        assert old.ended_ms >= new.health_ms > 0  # the old stopped only once the new was healthy
        assert f"moved to {move['to']}" in old.message
    again = sched("rebalance", "--json")
    assert json.loads(again.stdout)["moves"] == []
    seen = [event for _, event in Client(app=app).events(since="start", types="move", timeout=0.3)]
    assert [e["state"] for e in seen if e["id"] == "1-1"] == ["queued", "starting", "placing", "stopping", "done"]
    assert seen[-1]["new_task"] and seen[-1]["job"] == "web" and seen[-1]["from"] in ("n1", "n2")


def test_dry_run_changes_nothing_and_says_each_move_and_each_job(app, sched):
    crowded(app)
    before = app.store.tasks(app.store.all_task_ids())
    plan = json.loads(sched("rebalance", "--dry-run", "--json").stdout)
    assert len(plan["moves"]) == 2 and "applied" not in plan
    for move in plan["moves"]:
        assert move["job"] == "web" and move["from"] in ("n1", "n2") and move["to"] in ("n3", "n4")
        assert move["strategy"] == "job-spread" and move["score"]["gain"] == 2 and "skew" in move["reason"]
    assert plan["jobs"]["web"] == {"moves": 2, "skew_before": 3, "skew_after": 1, "budget": None}
    assert set(plan["read"]["nodes"]) == {"n1", "n2", "n3", "n4"}
    assert plan["read"]["jobs"]["web"]["version"] == 1 and plan["read"]["jobs"]["web"]["updated"]
    assert app.store.tasks(app.store.all_task_ids()) == before and not app.store.active_move_ids()
    text = sched("rebalance", "--dry-run").stdout
    assert "dry run: nothing was changed" in text and "3 -> 1" in text


def test_a_plan_made_on_stale_state_is_refused_whole(app, sched, tmp_path):
    crowded(app)
    path = tmp_path / "plan.json"
    path.write_text(sched("rebalance", "--dry-run", "--json").stdout)
    submit(app, service("db", 1))  # placed on one of the nodes the plan read
    run_worker_until_idle(app)
    refused = sched("rebalance", "--plan", str(path), ok=False)
    assert refused.exit_code == 1 and "the plan was not applied: node" in refused.stderr
    assert "changed since the plan was made" in refused.stderr
    assert not app.store.active_move_ids() and not Client(app=app).moves()
    fresh = tmp_path / "fresh.json"
    fresh.write_text(sched("rebalance", "--dry-run", "--json").stdout)
    applied = sched("rebalance", "--plan", str(fresh))
    assert "applied as plan" in applied.stdout


def test_each_thing_a_plan_read_is_checked(app):
    crowded(app)
    client = Client(app=app)
    plan = client.rebalance_plan()
    task = plan["moves"][0]["task"]
    app.store.finish_ids([task], "stopped", "gone")  # the task no longer runs where the plan saw it
    with pytest.raises(StalePlan, match="changed since the plan was made|no longer runs"):
        client.apply_rebalance(plan)
    plan = client.rebalance_plan()
    client.scale("web", 7)  # the job changed
    with pytest.raises(StalePlan, match="job web changed since the plan was made"):
        client.apply_rebalance(plan)
    plan = client.rebalance_plan()
    app.store.put_node(make_node("n9", cpu=1, memory="1GiB"))  # a node joined
    with pytest.raises(StalePlan, match="nodes were added, removed or changed"):
        client.apply_rebalance(plan)
    assert client.moves() == []


def test_a_move_whose_new_task_never_turns_healthy_is_abandoned_cleanly(app, sched):
    runner = crowded(app)
    sched("config", "set", "rebalance_deadline", "1s")
    runner.sick = {"n3", "n4"}  # what runs there never passes its check
    sched("rebalance")
    drive(app, runner, lambda: ended(app), "the moves to be abandoned")
    moves = Client(app=app).moves()
    assert {m["state"] for m in moves} == {"abandoned"}
    assert all("was not running and healthy on" in m["message"] and "rebalance_deadline (1 s)" in m["message"]
               for m in moves)
    store = app.store
    for move in moves:
        assert store.get_task(move["new_task"]).state == "stopped"
        assert store.get_task(move["task"]).state == "running"
    assert per_node(app, "web") == {"n1": 3, "n2": 3, "n3": 0, "n4": 0}
    assert healthy_by_job(app) == {"web": 6}


def test_a_new_task_whose_target_filled_up_is_abandoned_at_the_deadline_and_the_old_kept(app):
    runner = crowded(app)
    client = Client(app=app)
    client.set_config(rebalance_deadline="1s")
    plan = client.rebalance()  # the new tasks are queued, pinned to n3 and n4
    assert len(plan["applied"]["moves"]) == 2
    # Before a worker places them, work of a higher priority takes all the room there.
    submit(app, service("hog", 2, cpu=8, health=False, priority=90, constraints=["node.name != n1",
                                                                                 "node.name != n2"]))
    drive(app, runner, lambda: ended(app), "the moves to be abandoned")
    moves = client.moves()
    assert {m["state"] for m in moves} == {"abandoned"}
    for move in moves:
        assert "was not running and healthy on" in move["message"] and "insufficient cpu" in move["message"], move
        assert app.store.get_task(move["new_task"]).state == "stopped"
    assert per_node(app, "web") == {"n1": 3, "n2": 3, "n3": 0, "n4": 0}
    assert sum(not t.terminal for t in app.store.tasks(app.store.job_task_ids("web"))) == 6
    assert healthy_by_job(app)["web"] == 6


def test_a_move_whose_target_is_paused_is_abandoned_at_once(app):
    runner = crowded(app)
    client = Client(app=app)
    client.rebalance()
    for name in ("n3", "n4"):
        client.pause(name)
    drive(app, runner, lambda: ended(app), "the moves to be abandoned")
    assert sorted(m["message"] for m in client.moves()) == [
        "node n3 is paused: its new task cannot be placed there", "node n4 is paused: its new task cannot be placed there"]
    assert per_node(app, "web") == {"n1": 3, "n2": 3, "n3": 0, "n4": 0}


@pytest.mark.parametrize("change", [1, -1])
def test_scaling_during_a_move_counts_the_task_moving_and_its_new_task_as_one_replica(app, change):
    """Scaled while a move's new task runs beside the task it replaces: the move then
    stops one of the two, and the service is left with the replicas asked for."""
    runner = crowded(app, replicas=4, new=("n3",))
    client = Client(app=app)
    assert len(client.rebalance(max_moves=1)["moves"]) == 1
    run_worker_until_idle(app)  # the new task is placed (and not started yet): five open tasks
    assert sum(1 for t in app.store.tasks(app.store.job_task_ids("web")) if not t.terminal) == 5
    client.scale("web", 4 + change)
    drive(app, runner, lambda: ended(app), "the move to end")
    run_worker_until_idle(app)
    runner.step()
    open_ = [t.id for t in app.store.tasks(app.store.job_task_ids("web")) if not t.terminal]
    assert len(open_) == 4 + change, (open_, client.moves())


def test_batch_tasks_are_never_moved(app, sched):
    add_nodes(app, ["n1"])
    submit(app, {"id": "crunch", "type": "batch", "replicas": 4, "resources": {"cpu": 0.5, "memory": "64MiB"}})
    run_worker_until_idle(app)
    Runner(app).step()
    add_nodes(app, ["n2", "n3"])
    assert json.loads(sched("rebalance", "--json").stdout)["moves"] == []
    refused = sched("rebalance", "--job", "crunch", ok=False)
    assert refused.exit_code == 2 and "only the tasks of services are moved" in refused.stderr


def test_bad_input_is_one_sentence_and_writes_nothing(app, sched):
    crowded(app)
    for args, words in ((["--job", "nope"], "job 'nope' does not exist"),
                        (["--max-moves", "0"], "0 is not in the range"),
                        (["--strategy", "sprd"], "'sprd' is not one of")):
        result = sched("rebalance", *args, ok=False)
        assert result.exit_code == 2 and words in result.stderr + result.stdout
    with pytest.raises(Exception, match="is not a rebalance strategy .did you mean 'spread'"):
        Client(app=app).rebalance("sprd")
    assert not app.store.active_move_ids() and not app.client.exists(app.keys.rebalance)


def test_moves_survive_a_worker_killed_between_queueing_the_new_task_and_recording_it(app, monkeypatch):
    runner = crowded(app, new=("n3",))
    client = Client(app=app)
    real = advancing.reconcile.add_tasks

    def dies_after_queueing(*args, **kwargs):
        real(*args, **kwargs)
        raise SystemExit("killed")  # the worker dies before move_set records the new task

    monkeypatch.setattr(advancing.reconcile, "add_tasks", dies_after_queueing)
    with pytest.raises(SystemExit):
        client.rebalance(max_moves=1)
    monkeypatch.setattr(advancing.reconcile, "add_tasks", real)
    app.store.release_lock(advancing.LOCK)  # its lock would have expired
    move = client.moves()[0]
    assert move["state"] == "starting" and not move["new_task"]
    drive(app, runner, lambda: ended(app), "the move to end")
    move = client.move(move["id"])
    assert move["state"] == "done" and move["new_task"]
    assert len([t for t in app.store.tasks(app.store.job_task_ids("web")) if not t.terminal]) == 6


def test_rebalance_settings_are_checked_shown_and_the_policy_runs_when_set(app, sched):
    runner = crowded(app)
    shown = json.loads(sched("config", "show", "--json").stdout)["settings"]
    assert shown["rebalance_interval"] == {"value": 0.0, "default": True}
    assert shown["rebalance_strategy"] == {"value": "spread", "default": True}
    assert rebalance.policy(app.store) is None  # off by default
    bad = sched("config", "set", "rebalance_strategy", "spraed", ok=False)
    assert bad.exit_code == 2 and "rebalance_strategy must be spread or pack" in bad.stderr
    bad = sched("config", "set", "rebalance_intervall", "1m", ok=False)
    assert "did you mean 'rebalance_interval'" in bad.stderr
    assert "rebalance_interval = 1s" in sched("config", "set", "rebalance_interval", "1s").stdout
    done = rebalance.policy(app.store)
    assert done is not None and len(done["applied"]["moves"]) == 2
    assert rebalance.policy(app.store) is None  # moves in progress: no second one
    history = Client(app=app).audit_trail()
    assert history[-1]["action"] == "rebalance" and history[-1]["details"]["trigger"] == "rebalance_interval"
    drive(app, runner, lambda: ended(app), "the policy's moves to end")
    assert sorted(per_node(app, "web").values()) == [1, 1, 2, 2]
    assert "(default)" not in [line for line in sched("config", "show").stdout.splitlines()
                               if line.startswith("rebalance_interval")][0]


def test_ended_moves_are_kept_an_hour_and_a_thousand_at_most(app):
    crowded(app)
    client = Client(app=app)
    ids = client.rebalance()["applied"]["moves"]
    for name in ("n3", "n4"):
        client.pause(name)
    client.advance_moves()
    assert {m["state"] for m in client.moves()} == {"abandoned"}
    store, now = app.store, app.store.clock_ms()
    assert store.prune_moves(now) == 0 and len(client.moves()) == 2  # ended just now
    assert store.prune_moves(now, kept=1) == 1  # beyond the count kept: the oldest goes
    assert [m["id"] for m in client.moves()] == ids[1:]
    assert store.prune_moves(now + 3_600_001) == 1  # an hour after it ended
    assert client.moves() == [] and not app.client.exists(app.keys.move(ids[1]), app.keys.moves_ended)

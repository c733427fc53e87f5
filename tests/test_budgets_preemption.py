"""Preemption prefers victims whose disruption budgets allow it (kube's defaultpreemption:
the node with the fewest budget violations first), and a preemption beyond a budget is
still made, and counted against it. The search alone (no Redis), then real workers."""

from __future__ import annotations

from scheduler.control import budgets, reconcile
from scheduler.control.audit import audit
from scheduler.engine.preemption import find, find_gang, victims_on
from scheduler.model import parse_job

from budget_helpers import add_nodes, running_job
from test_preemption import ids, node_with, spec, v
from worker_harness import run_worker_until_idle


# ----------------------------------------------------------------------------- the search
def test_the_node_with_fewer_budget_violations_wins_before_any_other_tie_break():
    # Without budgets, a (its victim of lower priority, and the first by name) would be chosen.
    tasks = {"a": [v("a1", 1, priority=1, job="guarded")], "b": [v("b1", 1, priority=5, job="free")]}
    nodes = [node_with("a", 1, tasks["a"]), node_with("b", 1, tasks["b"])]
    assert find(nodes, spec(cpu=1), tasks, {}).choice.node == "a"
    choice = find(nodes, spec(cpu=1), tasks, {}, budgets={"guarded": 0}).choice
    assert choice.node == "b" and choice.violations == 0
    # A budget that allows the disruption is no violation: the other tie-breaks decide again.
    assert find(nodes, spec(cpu=1), tasks, {}, budgets={"guarded": 1}).choice.node == "a"


def test_where_every_node_violates_the_fewest_violations_win_and_preemption_still_happens():
    tasks = {"a": [v("a1", 1, job="guarded"), v("a2", 1, job="guarded")], "b": [v("b1", 2, job="guarded")]}
    nodes = [node_with("a", 2, tasks["a"]), node_with("b", 2, tasks["b"])]
    search = find(nodes, spec(cpu=2), tasks, {}, budgets={"guarded": 0})
    assert search.choice.node == "b" and search.choice.violations == 1
    assert search.message(spec(cpu=2), 10) == ("preemption: evicting b1 on b makes room (1 beyond their jobs' "
                                               "disruption budgets: no node needed fewer).")


def test_on_a_node_the_victim_beyond_its_budget_is_given_back_first():
    # One slot needed of two: without budgets the one started last, b, goes (equal priorities).
    victims = [v("a", 1, job="free"), v("b", 1, job="guarded")]
    node = node_with("n", 2, victims)
    assert ids(victims_on(node, spec(cpu=1), victims, 0)) == ("b",)
    assert ids(victims_on(node, spec(cpu=1), victims, 0, budgets={"guarded": 0})) == ("a",)


def test_a_gangs_members_take_from_the_budgets_one_after_another():
    # Each node holds one task of a job whose budget allows one disruption, and one free task
    # of a higher priority: the first member may take the guarded task, the second may not.
    tasks = {name: [v(f"{name}g", 1, priority=1, job="guarded"), v(f"{name}f", 1, priority=5, job="free")]
             for name in ("a", "b")}
    nodes = [node_with(name, 2, tasks[name]) for name in ("a", "b")]
    gang = spec(cpu=1, job_id="train", replicas=2, gang=True)
    unguarded = find_gang(nodes, gang, tasks, {}, ["train.0", "train.1"])
    assert sorted(victim.task_id for victim in unguarded.victims) == ["ag", "bg"]  # the lowest priorities
    search = find_gang(nodes, gang, tasks, {}, ["train.0", "train.1"], budgets={"guarded": 1})
    assert [victim.job for victim in search.victims].count("guarded") == 1
    assert len(search.victims) == 2 and all(choice.violations == 0 for _, choice in search.choices)


# ----------------------------------------------------------------------------- real workers
def test_a_worker_preempts_where_no_budget_is_broken_and_counts_what_it_takes(app):
    """n1 and n2 are full: n1 of a guarded service (no disruption allowed), n2 of a free one
    of a higher priority. Without budgets the worker evicts on n1 (the lower priority); with
    them it evicts on n2."""
    add_nodes(app, ["n1"], cpu=2)
    running_job(app, "guarded", replicas=2, budget={"max_unavailable": 0}, priority=1)
    add_nodes(app, ["n2"], cpu=2)
    running_job(app, "free", replicas=2, priority=5)
    assert {t.node for t in app.store.tasks(app.store.job_task_ids("guarded"))} == {"n1"}
    reconcile.submit(app.store, parse_job({"id": "urgent", "priority": 500, "resources": {"cpu": 1}}))
    run_worker_until_idle(app)
    preempted = [t for t in app.store.tasks(app.store.all_task_ids()) if t.state == "preempted"]
    assert [(t.job, t.node) for t in preempted] == [("free", "n2")]
    assert app.store.get_task("urgent.0").node == "n2"
    assert audit(app.store).ok


def test_a_preemption_beyond_a_budget_is_made_and_counted(app):
    add_nodes(app, ["n1"], cpu=2)
    running_job(app, "guarded", replicas=2, budget={"max_unavailable": 0}, priority=1)
    assert budgets.status(app.store, "guarded")["healthy"] == 2
    reconcile.submit(app.store, parse_job({"id": "urgent", "priority": 500, "resources": {"cpu": 1}}))
    run_worker_until_idle(app)
    assert app.store.get_task("urgent.0").state == "assigned"
    record = budgets.status(app.store, "guarded")
    assert record["healthy"] == 1 and len(record["disrupted"]) == 1
    assert audit(app.store).ok

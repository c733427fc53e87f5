"""The voluntary-disruption gate against the real redis-server: evict.lua grants what a
job's budget allows and records it atomically; counts keep the disruptions they may not
have seen; evictors in several processes at once never take a job below its budget."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.control import budgets, reconcile
from scheduler.engine.budgets import desired_healthy, disruptions_allowed
from scheduler.model import parse_job
from scheduler.model.disruption import DisruptionBudget
from scheduler.state.budgets import AGAIN, FREE, GRANTED, REFUSED, STALE

from budget_helpers import add_nodes, healthy_count, running_job, start_all


@pytest.fixture
def web(app):
    add_nodes(app, ["n1", "n2", "n3", "n4"])
    return running_job(app, "web", replicas=4, budget={"max_unavailable": 1})


def live_ids(app, job_id="web"):
    return [t.id for t in app.store.tasks(app.store.job_task_ids(job_id)) if t.live]


def test_a_count_says_what_the_budget_allows(app, web):
    record = budgets.count(app.store, "web")
    assert {k: record[k] for k in ("budget", "expected", "healthy", "desired_healthy", "allowed", "unavailable",
                                   "max_unavailable")} == {
        "budget": "max_unavailable 1", "expected": 4, "healthy": 4, "desired_healthy": 3, "allowed": 1,
        "unavailable": 0, "max_unavailable": 1}
    assert app.store.budgeted_jobs() == ["web"]


def test_the_gate_grants_one_then_refuses_until_a_replacement_is_healthy(app, web):
    first, second, *_ = live_ids(app)
    evicted = budgets.evict_task(app.store, first, "moved by a test")
    assert evicted.evicted and evicted.verdict == GRANTED and evicted.replacement
    refused = budgets.evict_task(app.store, second, "moved by a test")
    assert not refused.evicted and refused.verdict == REFUSED
    assert refused.waiting == "job web's budget, 1 of 1 unavailable"
    assert app.store.get_task(second).state == "running"
    # The replacement is placed, runs and is healthy: the next count allows one again.
    from worker_harness import run_worker_until_idle
    run_worker_until_idle(app)
    start_all(app, "web")
    budgets.count(app.store, "web")
    assert budgets.evict(app.store, second, "moved by a test")
    assert app.store.get_task(second).state == "stopped"


def test_a_job_without_a_budget_is_never_held_back(app):
    add_nodes(app, ["n1", "n2"])
    running_job(app, "free", replicas=2)
    ids = live_ids(app, "free")
    assert all(budgets.evict_task(app.store, task_id, "drained").verdict == "unbudgeted" for task_id in ids)
    assert live_ids(app, "free") == []


@pytest.mark.parametrize("kind", ["global", "sysbatch"])
def test_an_evicted_task_of_a_global_job_is_put_back_on_its_node(app, kind):
    """As kube's DaemonSet puts back an evicted pod: its node still wants the task (a
    drained node does not: the drain's eviction leaves it none)."""
    add_nodes(app, ["n1", "n2"])
    running_job(app, "agent", replicas=None, type=kind)
    first = app.store.tasks(app.store.job_task_ids("agent"))[0]
    evicted = budgets.evict_task(app.store, first.id, "moved by a test")
    assert evicted.evicted and evicted.replacement, evicted
    back = app.store.get_task(evicted.replacement)
    assert back.pin == first.pin and back.state == "pending", back
    app.store.set_availability("n2", "drain")
    second = next(t for t in app.store.tasks(app.store.job_task_ids("agent")) if t.live and t.node == "n2")
    evicted = budgets.evict_task(app.store, second.id, "node n2 drained")
    assert evicted.evicted and not evicted.replacement, evicted


@pytest.fixture
def checked(app):
    add_nodes(app, ["n1", "n2", "n3"])
    return running_job(app, "api", replicas=3, budget={"max_unavailable": 1}, task_health="",
                       health={"tcp": {"port": 8080}})


def test_an_unhealthy_task_takes_nothing_from_the_budget(app, checked):
    a, b, c = live_ids(app, "api")
    store = app.store
    store.set_task_health(a, store.get_task(a).node, "healthy")
    store.set_task_health(b, store.get_task(b).node, "healthy")
    store.set_task_health(c, store.get_task(c).node, "healthy")
    budgets.count(store, "api")
    store.set_task_health(c, store.get_task(c).node, "starting")  # not counted healthy, not yet counted so
    budgets.count(store, "api")
    # healthy 2 of desired 2: the starting task may go (kube's IfHealthyBudget), a healthy one may not.
    assert budgets.evict_task(store, c, "drained").verdict == FREE
    assert budgets.evict_task(store, a, "drained").verdict == REFUSED


def test_a_grant_whose_evictor_died_is_granted_again_without_counting_twice(app, web):
    first, second, *_ = live_ids(app)
    budgets.count(app.store, "web")
    gate = app.store.evict_gate("web", first, "", "drained", budgets.STALE_MS)
    assert gate.verdict == GRANTED and gate.healthy == 3  # ... and the evictor dies before ending it
    assert app.store.get_task(first).state == "running"
    record = budgets.count(app.store, "web")  # a count meanwhile leaves the granted task out
    assert record["healthy"] == 3 and first in record["disrupted"]
    again = budgets.evict_task(app.store, first, "drained")
    assert again.evicted and again.verdict == AGAIN
    assert budgets.evict_task(app.store, second, "drained").verdict == REFUSED
    record = budgets.count(app.store, "web")
    assert record["healthy"] == 3 and record["disrupted"] == {}  # seen ended: dropped


def test_a_count_keeps_a_disruption_that_came_after_it_began(app, web):
    """A count reads the disrupted set, then the tasks; an eviction in between may be
    counted healthy by it, so the write takes it off again."""
    store = app.store
    first, second, *_ = live_ids(app)
    budgets.count(store, "web")
    began = store.clock_ms()
    _, seen = store.budget_record("web")
    healthy_as_read = healthy_count(app, "web")  # 4: read before the eviction
    assert budgets.evict(store, first, "drained")
    written = store.write_budget_count("web", began, 4, healthy_as_read, 3, False, "max_unavailable 1", seen, [])
    assert written == 3
    assert budgets.evict_task(store, second, "drained").verdict == REFUSED


def test_an_older_count_is_not_written_over_a_newer_one(app, web):
    store = app.store
    budgets.count(store, "web")
    counted_at = int(store.budget_record("web")[0]["counted_at"])
    assert store.write_budget_count("web", counted_at - 1, 4, 4, 3, False, "x", [], []) is None


def test_a_stale_count_is_counted_again_before_the_gate_judges(app, web, clock, redis_url, namespace):
    from scheduler.state.app import App

    clocked = App(redis_url=redis_url, namespace=namespace, clock=clock)
    clock.now = app.store.now_ms()
    budgets.count(clocked.store, "web")
    clock.advance(budgets.STALE_MS + 1)
    first = live_ids(app)[0]
    assert clocked.store.evict_gate("web", first, "", "drained", budgets.STALE_MS).verdict == STALE
    assert budgets.evict_task(clocked.store, first, "drained").verdict == GRANTED


def test_disruptions_outside_the_gate_count_at_once(app, web):
    """A preemption, a lost node, a NoExecute taint: not held back, but counted."""
    store = app.store
    budgets.count(store, "web")
    victim = store.get_task(live_ids(app)[0])
    store.finish([victim], "preempted", "preempted by a test")
    assert store.note_disruptions([victim]) == 1
    assert store.note_disruptions([victim]) == 0  # counted once
    assert budgets.status(store, "web")["allowed"] == 0
    assert budgets.evict_task(store, live_ids(app)[0], "drained").verdict == REFUSED


def test_a_budget_taken_out_of_the_spec_is_forgotten(app, web):
    budgets.count(app.store, "web")
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 4, "resources": {"cpu": 1}}))
    assert app.store.budgeted_jobs() == []
    assert budgets.status(app.store, "web") is None
    assert app.client.exists(app.keys.budget("web")) == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 6), st.integers(0, 6), st.sampled_from(["assigned", "running", "stopped"]),
       st.sampled_from(["", "starting", "healthy", "unhealthy"]), st.booleans())
def test_the_lua_gate_agrees_with_the_python_rule(app, healthy, desired, state, health, checked):
    k, client = app.keys, app.client
    client.delete(k.budget("j"), k.budget_disrupted("j"), k.task("j.0"))
    client.hset(k.task("j.0"), mapping={"id": "j.0", "job": "j", "state": state, "node": "n", "health": health})
    client.hset(k.budget("j"), mapping={"healthy": healthy, "desired": desired, "expected": 6,
                                        "checked": int(checked), "counted_at": app.store.now_ms()})
    gate = app.store.evict_gate("j", "j.0", "n", "test", budgets.STALE_MS)
    budget = DisruptionBudget(min_available=desired)
    if state == "stopped":
        assert gate.verdict == "gone"
    elif budgets.counted_healthy(state, health, checked):
        assert gate.allowed == (disruptions_allowed(budget, 6, healthy) >= 1)
        assert gate.healthy == (healthy - 1 if gate.allowed else healthy)
    else:
        assert gate.verdict == (FREE if healthy >= desired_healthy(budget, 6) else REFUSED)


EXAMPLES = itertools.count()
EVICTOR = textwrap.dedent("""
    import sys
    from scheduler.control import budgets
    from scheduler.state.app import App
    app = App(redis_url=sys.argv[1], namespace=sys.argv[2])
    done = 0
    for task_id in sys.argv[3:]:
        done += budgets.evict(app.store, task_id, "evicted by a rival")
    print(done)
""")


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(2, 8), st.sampled_from([{"max_unavailable": 1}, {"max_unavailable": 2},
                                           {"min_available": "50%"}, {"max_unavailable": "34%"}]),
       st.integers(2, 4), st.randoms(use_true_random=False))
def test_evictors_in_several_processes_never_take_a_job_below_its_budget(app, redis_url, namespace, replicas, raw,
                                                                         evictors, rand):
    """Each process tries to evict every task, in its own order; the replacements are
    never started, so every grant is a task down: no more may go than the budget allows."""
    job = f"web{next(EXAMPLES)}"  # each example a job (and nodes) of its own, in one namespace
    add_nodes(app, [f"{job}-n{i}" for i in range(replicas)], cpu=1)
    spec = running_job(app, job, replicas=replicas, budget=raw)
    budgets.count(app.store, job)
    ids = live_ids(app, job)
    allowed = disruptions_allowed(spec.disruption_budget, replicas, replicas)
    processes = []
    for _ in range(evictors):
        order = ids[:]
        rand.shuffle(order)
        processes.append(subprocess.Popen([sys.executable, "-c", EVICTOR, redis_url, namespace, *order],
                                          stdout=subprocess.PIPE, text=True))
    granted = sum(int(p.communicate(timeout=120)[0]) for p in processes)
    assert granted == allowed
    assert healthy_count(app, job) == replicas - allowed >= desired_healthy(spec.disruption_budget, replicas)

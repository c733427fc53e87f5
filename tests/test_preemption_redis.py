"""Preemption against the real redis-server: workers evict lower-priority tasks for a task
that fits nowhere, atomically with a nomination that holds the room for it.

The issue's cases: a full cluster of priority 10 tasks and a priority 100 job that runs
by evicting the minimum; equal priorities never evicted; ``preemptible: false`` tasks
never evicted; a ``preempt: never`` job never evicts; the nominated node is tried first
and its room is held against lower-or-equal priorities of other jobs; two worker
processes preempting at once evict no more than the preemptors need. Every test ends
with ``audit(app.store).ok``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.state.commit import Planned, commit
from scheduler.model import make_node, parse_job
from scheduler.engine.placement import PlacementOptions, Placer
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from worker_harness import queue_members, run_worker_until_idle, wait_until

SCHED = str(Path(sys.executable).parent / "sched")
PROCESS_TIMEOUT_S = 90  # a liveness bound for the worker processes, never a speed threshold


# ----------------------------------------------------------------------------- helpers
def add_nodes(app, count, cpu, prefix="n", **kw):
    for i in range(count):
        app.store.put_node(make_node(f"{prefix}{i}", cpu=cpu, memory="8GiB", **kw))


def submit(app, **raw):
    raw.setdefault("resources", {"cpu": 1})
    return reconcile.submit(app.store, parse_job(raw))["tasks"]


def tasks_of(app, job_id):
    store = app.store
    return {t.id: t for t in store.tasks(store.job_task_ids(job_id))}


def all_tasks(app):
    store = app.store
    return {t.id: t for t in store.tasks(store.all_task_ids())}


def in_state(tasks, state):
    return sorted(t.id for t in tasks.values() if t.state == state)


def message(task):
    return orjson.loads(task.explanation)["message"] if task.explanation else ""


def nomination_fields(app):
    """node -> {field: value} of its nom:* fields and nominations count (only non-empty)."""
    out = {}
    for name in app.store.node_names():
        fields = app.client.hgetall(app.keys.node(name))
        held = {f: v for f, v in fields.items() if f.startswith("nom:")}
        count = int(fields.get("nominations", 0))
        if held or count:
            out[name] = {**held, "nominations": count}
    return out


def assert_audit_ok(app):
    report = audit(app.store)
    assert report.ok, report.problems
    assert report.overcommits == 0


def fill(app, nodes, cpu, job="low", priority=10, **extra):
    """``nodes`` nodes of ``cpu`` cores, filled with 1-core tasks of one service job."""
    add_nodes(app, nodes, cpu)
    ids = submit(app, id=job, priority=priority, replicas=nodes * cpu, **extra)
    run_worker_until_idle(app)
    tasks = tasks_of(app, job)
    assert in_state(tasks, "assigned") == sorted(ids)
    return ids


# ----------------------------------------------------------------------------- a priority 100 job arrives
def test_priority_100_job_runs_by_evicting_exactly_what_it_needs(app):
    fill(app, nodes=3, cpu=2)  # 6 tasks of priority 10, every core taken
    high = submit(app, id="high", priority=100, replicas=2)
    stats = run_worker_until_idle(app)

    tasks = all_tasks(app)
    high_tasks = {i: tasks[i] for i in high}
    assert all(t.state == "assigned" for t in high_tasks.values()), high_tasks
    # Exactly two 1-core tasks were evicted: the minimum for two 1-core tasks.
    preempted = in_state(tasks, "preempted")
    assert len(preempted) == 2
    assert stats.preempted == 2
    # Each victim was evicted by a different preemptor, which now runs on its node.
    by = {tasks[v].message.removeprefix("preempted by "): tasks[v] for v in preempted}
    assert sorted(by) == sorted(high)
    for preemptor, victim in by.items():
        assert victim.job == "low" and victim.priority == 10
        assert tasks[preemptor].node == victim.node
        assert not tasks[preemptor].nominated_node
    # The service keeps its 6 replicas: 4 still run, 2 replacements wait for room. They
    # cannot evict anything (priority 10), and their explanation says so.
    low = tasks_of(app, "low")
    assert len(in_state(low, "assigned")) == 4
    replacements = in_state(low, "pending")
    assert len(replacements) == 2
    assert set(replacements).isdisjoint(preempted)
    queues = queue_members(app)
    for task_id in replacements:
        text = message(low[task_id])
        assert text == "0/3 nodes available: 3 insufficient cpu. preemption tried: no task runs at priority 0 or lower."
        assert task_id in queues["unschedulable"]
    # The nominations were released when the preemptors were placed.
    assert nomination_fields(app) == {}
    assert app.client.hgetall(app.keys.tally_priority) == {"10": "4", "100": "2"}
    assert_audit_ok(app)


def test_equal_priority_is_never_evicted(app):
    fill(app, nodes=2, cpu=1, job="peer", priority=100)
    late = submit(app, id="late", priority=100)
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert in_state(tasks, "preempted") == []
    assert in_state(tasks, "assigned") == ["peer.0", "peer.1"]
    assert tasks[late[0]].state == "pending"
    assert message(tasks[late[0]]) == (
        "0/2 nodes available: 2 insufficient cpu. preemption tried: no task runs at priority 90 or lower.")
    assert_audit_ok(app)


def test_equal_priority_never_evicted_while_lower_ones_run_elsewhere(app):
    # Two nodes in zone a full of priority 100; a third (zone b) runs a priority 10 task
    # that the arrival's constraint keeps out of reach: the search runs, finds nothing.
    add_nodes(app, 2, 1, labels={"zone": "a"})
    app.store.put_node(make_node("b0", cpu=1, memory="8GiB", labels={"zone": "b"}))
    submit(app, id="peer", priority=100, replicas=2, constraints=["node.labels.zone==a"])
    submit(app, id="low", priority=10, constraints=["node.labels.zone==b"])
    run_worker_until_idle(app)
    late = submit(app, id="late", priority=100, constraints=["node.labels.zone==a"])
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert in_state(tasks, "preempted") == []
    assert in_state(tasks, "assigned") == ["low.0", "peer.0", "peer.1"]
    assert message(tasks[late[0]]) == (
        "0/3 nodes available: 3 insufficient cpu. "  # resources are checked before constraints
        "preemption tried: no preemptible task at priority 90 or lower on any of the 2 eligible node(s).")
    assert_audit_ok(app)


@pytest.mark.parametrize("kind", ["service", "batch", "global"])
def test_victims_jobs_are_reconciled(app, kind):
    # Two 1-core nodes, each running one priority 10 task of a job of this kind.
    add_nodes(app, 2, 1)
    raw = {"id": "low", "type": kind, "priority": 10, "resources": {"cpu": 1}}
    if kind != "global":
        raw["replicas"] = 2
    reconcile.submit(app.store, parse_job(raw))
    run_worker_until_idle(app)
    assert len(in_state(tasks_of(app, "low"), "assigned")) == 2
    (high,) = submit(app, id="high", priority=100)
    run_worker_until_idle(app)
    tasks = tasks_of(app, "low")
    (victim,) = in_state(tasks, "preempted")
    (replacement,) = in_state(tasks, "pending")
    assert app.store.get_task(high).node == tasks[victim].node
    # A global job's replacement waits for its own node; the others may go anywhere.
    assert tasks[replacement].pin == (tasks[victim].node if kind == "global" else "")
    assert len(in_state(tasks, "assigned")) == 1
    assert_audit_ok(app)


def test_stopped_job_gets_no_replacement_for_its_victim(app, monkeypatch):
    fill(app, nodes=1, cpu=1)
    (high,) = submit(app, id="high", priority=100)
    original = reconcile.preempted

    def stop_then_replace(store, victims):  # the job is stopped just after the eviction
        reconcile.stop(store, "low")
        return original(store, victims)

    monkeypatch.setattr(reconcile, "preempted", stop_then_replace)
    assert SchedulerWorker(app, WorkerConfig()).step() == 1
    monkeypatch.undo()
    tasks = tasks_of(app, "low")
    assert in_state(tasks, "preempted") == ["low.0"]
    assert list(tasks) == ["low.0"]  # no replacement for a stopped job
    run_worker_until_idle(app)
    assert app.store.get_task(high).state == "assigned"
    assert_audit_ok(app)


@pytest.mark.parametrize("margin,evicts", [(5, True), (10, False)])
def test_margin_is_configurable(app, margin, evicts):
    fill(app, nodes=1, cpu=1, priority=95)
    (high,) = submit(app, id="high", priority=100)
    run_worker_until_idle(app, WorkerConfig(until_idle=True, preemption_margin=margin))
    tasks = all_tasks(app)
    assert (tasks[high].state == "assigned") is evicts
    assert in_state(tasks, "preempted") == (["low.0"] if evicts else [])
    if not evicts:
        assert "preemption tried: no task runs at priority 90 or lower" in message(tasks[high])
    assert_audit_ok(app)


def test_preemption_can_be_turned_off(app):
    fill(app, nodes=1, cpu=1)
    (high,) = submit(app, id="high", priority=100)
    stats = run_worker_until_idle(app, WorkerConfig(until_idle=True, preemption=False))
    assert stats.preempted == 0
    assert app.store.get_task(high).state == "pending"
    assert in_state(all_tasks(app), "preempted") == []
    assert_audit_ok(app)


# ----------------------------------------------------------------------------- opting out
def test_preemptible_false_tasks_are_never_evicted(app):
    # n0, n1: priority 0 tasks that opt out; n2: a priority 50 task that does not. The
    # first preemptor takes n2 (although its victim has the higher priority); the second
    # finds nothing it may evict.
    add_nodes(app, 3, 1)
    guard = submit(app, id="guard", priority=0, replicas=2, preemptible=False, constraints=["node.hostname!=n2"])
    mid = submit(app, id="mid", priority=50, constraints=["node.hostname==n2"])
    run_worker_until_idle(app)
    assert in_state(all_tasks(app), "assigned") == sorted(guard + mid)

    high = submit(app, id="high", priority=100, replicas=2)
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert in_state(tasks, "preempted") == mid
    assert all(tasks[g].state == "assigned" for g in guard)
    placed = [h for h in high if tasks[h].state == "assigned"]
    waiting = [h for h in high if tasks[h].state == "pending"]
    assert len(placed) == 1 and len(waiting) == 1
    assert tasks[placed[0]].node == "n2"
    assert "preemption tried: no preemptible task at priority 90 or lower" in message(tasks[waiting[0]])
    assert_audit_ok(app)


def test_preempt_never_job_does_not_evict(app):
    low = fill(app, nodes=2, cpu=1)
    polite = submit(app, id="polite", priority=100, preempt="never")
    stats = run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert stats.preempted == 0
    assert in_state(tasks, "preempted") == []
    assert in_state(tasks, "assigned") == sorted(low)
    assert tasks[polite[0]].state == "pending"
    assert message(tasks[polite[0]]) == "0/2 nodes available: 2 insufficient cpu."  # not tried, not said
    assert nomination_fields(app) == {}
    # The same job allowed to preempt does evict one.
    submit(app, id="polite", priority=100, preempt="lower")
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert len(in_state(tasks, "preempted")) == 1
    assert [t.id for t in tasks.values() if t.job == "polite" and t.state == "assigned"] == ["polite.1"]
    assert_audit_ok(app)


# ----------------------------------------------------------------------------- nomination
def preempt_once(app):
    """n0 (2 cores) full of two priority 10 tasks; one worker step for a priority 100 task:
    it evicts one and is nominated to n0. Returns the high task's id."""
    fill(app, nodes=1, cpu=2)
    (high,) = submit(app, id="high", priority=100)
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 1
    assert worker.stats.preempted == 1
    return high


def test_preemption_nominates_the_node_and_holds_the_room(app):
    high = preempt_once(app)
    tasks = all_tasks(app)
    # The victim: exactly one, the last by id (reprieve keeps low.0), ended preempted.
    assert in_state(tasks, "preempted") == ["low.1"]
    assert tasks["low.1"].message == f"preempted by {high}"
    assert app.client.smembers(app.keys.node_tasks("n0")) == {"low.0"}
    # The preemptor: back in the active queue, nominated to n0.
    assert tasks[high].state == "pending"
    assert tasks[high].nominated_node == "n0"
    queues = queue_members(app)
    assert high in queues["active"] and not queues["inflight"]
    # Its room, held on the node: priority|expiry|job|allocation|ports.
    nominations = nomination_fields(app)
    assert list(nominations) == ["n0"] and nominations["n0"]["nominations"] == 1
    priority, expires, job, alloc, ports = nominations["n0"][f"nom:{high}"].split("|")
    assert (priority, job, alloc, ports) == ("100", "high", "cpu=1000", "")
    assert int(expires) > app.store.now_ms()
    # The victim's replacement is queued.
    assert tasks["low.2"].state == "pending" and "low.2" in queues["active"]

    # Before the preemptor is placed, lower or equal priorities of other jobs cannot take
    # the room: the commit refuses them whatever the worker believed.
    submit(app, id="peer", priority=100)
    claim = app.queue.claim(10)
    assert sorted(claim.task_ids) == sorted([high, "low.2", "peer.0"])
    specs = {job: app.store.job_spec(job) for job in ("low", "peer", "high")}
    refused = commit(app.scripts, app.keys, claim.token,
                     [Planned("low.2", "n0", specs["low"]), Planned("peer.0", "n0", specs["peer"])])
    assert [reason for _, reason in refused.refused] == ["insufficient cpu", "insufficient cpu"]
    assert app.client.hget(app.keys.node("n0"), "alloc:cpu") == "1000"
    # The preemptor itself takes it, and its nomination goes with the placement.
    accepted = commit(app.scripts, app.keys, claim.token, [Planned(high, "n0", specs["high"])])
    assert [plan.task_id for plan in accepted.accepted] == [high]
    assert nomination_fields(app) == {}
    assert not app.store.get_task(high).nominated_node
    app.queue.fail(claim.token, [("low.2", {"nodes_evaluated": 1, "reasons": {}, "message": "test"}),
                                 ("peer.0", {"nodes_evaluated": 1, "reasons": {}, "message": "test"})])
    assert_audit_ok(app)


def test_higher_priority_of_another_job_may_take_nominated_room(app):
    high = preempt_once(app)
    submit(app, id="vip", priority=200)
    claim = app.queue.claim(10)
    assert "vip.0" in claim.task_ids and high in claim.task_ids
    outcome = commit(app.scripts, app.keys, claim.token,
                     [Planned("vip.0", "n0", app.store.job_spec("vip")),
                      Planned(high, "n0", app.store.job_spec("high"))])
    assert [p.task_id for p in outcome.accepted] == ["vip.0"]
    assert [reason for _, reason in outcome.refused] == ["insufficient cpu"]
    app.queue.release(claim.token, [t for t in claim.task_ids if t != "vip.0"])
    assert_audit_ok(app)


# ----------------------------------------------------------------------------- task slots
def test_a_higher_priority_task_evicts_for_a_slot_and_its_nomination_holds_it(app):
    """An agent's node with cpu to spare and both its 2 task slots in use: a priority 100
    task finds no slot anywhere, evicts one priority 10 task (the search and preempt.lua
    agree that one victim frees a slot), and the slot is held for it: an equal priority of
    another job is refused it at commit in the fit rule's words, the preemptor takes it."""
    import dataclasses

    app.store.put_node(dataclasses.replace(make_node("a0", cpu=8, memory="8GiB"), slots=2))
    low = submit(app, id="low", priority=10, replicas=2, resources={"cpu": 0.1})
    run_worker_until_idle(app)
    assert in_state(tasks_of(app, "low"), "assigned") == sorted(low)
    (high,) = submit(app, id="high", priority=100, resources={"cpu": 0.1})
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 1 and worker.stats.preempted == 1
    tasks = all_tasks(app)
    assert in_state(tasks, "preempted") == ["low.1"]  # the reprieve keeps low.0
    assert tasks[high].nominated_node == "a0"
    node = app.store.get_node("a0")
    assert (node.tasks, node.slots, node.allocated["cpu"]) == (1, 2, 100)

    submit(app, id="peer", priority=100, resources={"cpu": 0.1})
    claim = app.queue.claim(10)
    assert sorted(claim.task_ids) == sorted([high, "low.2", "peer.0"])
    specs = {job: app.store.job_spec(job) for job in ("low", "peer", "high")}
    refused = commit(app.scripts, app.keys, claim.token,
                     [Planned("low.2", "a0", specs["low"]), Planned("peer.0", "a0", specs["peer"])])
    assert [reason for _, reason in refused.refused] == ["node has all 2 task slots in use"] * 2
    accepted = commit(app.scripts, app.keys, claim.token, [Planned(high, "a0", specs["high"])])
    assert [plan.task_id for plan in accepted.accepted] == [high]
    assert app.store.get_node("a0").tasks == 2 and nomination_fields(app) == {}
    app.queue.release(claim.token, ["low.2", "peer.0"])
    # The peer evicts the last low task for its slot; the low replacements, which can
    # evict nothing, wait with the slot reason.
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert sorted(t.id for t in tasks.values() if t.state == "assigned") == [high, "peer.0"]
    assert in_state(tasks, "preempted") == ["low.0", "low.1"]
    for task_id in in_state(tasks, "pending"):
        assert message(tasks[task_id]) == ("0/1 nodes available: 1 node has all 2 task slots in use. "
                                           "preemption tried: no task runs at priority 0 or lower."), task_id
    assert_audit_ok(app)


def test_nominated_node_is_tried_first(app):
    high = preempt_once(app)
    # A bigger, empty node arrives before the preemptor's next attempt. Spread placement
    # alone would choose it...
    app.store.put_node(make_node("big", cpu=8, memory="8GiB"))
    nodes = {n.name: n for n in app.store.nodes()}
    nodes["n0"].nominations.clear()
    alone = Placer(PlacementOptions(seed=1)).place(list(nodes.values()), app.store.job_spec("high"), ["x"],
                                                    job_counts={})
    assert alone.assignments == [("x", "big")]
    # ... but the preemptor goes where its room was made (kube's nominated node fast path).
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert tasks[high].state == "assigned" and tasks[high].node == "n0"
    assert tasks["low.2"].state == "assigned" and tasks["low.2"].node == "big"
    assert nomination_fields(app) == {}
    assert len(in_state(tasks, "preempted")) == 1
    assert_audit_ok(app)


def test_lower_priority_task_in_the_same_batch_does_not_take_the_room(app):
    # The victim's replacement (priority 10) and the preemptor are claimed in one batch;
    # the node cache shows the nomination, so the replacement is not even planned there.
    high = preempt_once(app)
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 2
    tasks = all_tasks(app)
    assert tasks[high].state == "assigned" and tasks[high].node == "n0"
    assert tasks["low.2"].state == "pending"
    assert worker.stats.refused == 0  # nothing was planned onto the held room
    assert nomination_fields(app) == {}
    assert_audit_ok(app)


def test_two_preemptors_nominated_to_one_node_both_land_there(app):
    # n0 runs two priority 10 tasks; two single-task jobs of priority 100 each evict one
    # (in one batch: the second sees the first's room held, and takes the other task).
    fill(app, nodes=1, cpu=2)
    a, b = submit(app, id="hi-a", priority=100)[0], submit(app, id="hi-b", priority=100)[0]
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 2
    assert worker.stats.preempted == 2
    assert sorted(nomination_fields(app)["n0"]) == [f"nom:{a}", f"nom:{b}", "nominations"]
    # Next batch: both are placed on n0. Placing a must release a's room in the worker's
    # copy of n0 too (as the commit does in Redis), or b finds n0 "full" and, with
    # nothing left to evict, waits for a minute in the unschedulable queue.
    assert worker.step() == 4  # with the victims' two replacements
    tasks = all_tasks(app)
    assert (tasks[a].state, tasks[a].node) == ("assigned", "n0")
    assert (tasks[b].state, tasks[b].node) == ("assigned", "n0")
    assert len(in_state(tasks, "preempted")) == 2
    assert nomination_fields(app) == {}
    assert_audit_ok(app)


def test_nomination_left_behind_when_the_preemptor_lands_elsewhere(app):
    # n0 and n1 run one priority 10 task each; high (100) evicts on n0 and is nominated.
    fill(app, nodes=2, cpu=1)
    (high,) = submit(app, id="high", priority=100)
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 1
    assert app.store.get_task(high).nominated_node == "n0"
    # A priority 200 task takes that room (a nomination holds only against lower or
    # equal priorities); high evicts again, on n1, and is nominated there.
    (vip,) = submit(app, id="vip", priority=200)
    worker.step()
    assert app.store.get_task(vip).node == "n0"
    assert app.store.get_task(high).nominated_node == "n1"
    run_worker_until_idle(app)
    assert app.store.get_task(high).node == "n1"
    assert_audit_ok(app)
    # high runs on n1: nothing should be held for it anywhere any more ...
    leftover = nomination_fields(app)
    # ... and once vip stops, a waiting priority 10 replacement should get n0's core.
    reconcile.stop(app.store, "vip")
    run_worker_until_idle(app)
    on_n0 = [t for t in tasks_of(app, "low").values() if t.state == "assigned" and t.node == "n0"]
    assert leftover == {} and len(on_n0) == 1, (leftover, on_n0)


def test_preemptor_that_loses_the_race_for_its_victims_backs_off_and_retries(app):
    # Two workers, each with one preemptor for n0's two priority 10 tasks. B chooses
    # low.1; before B applies, A evicts low.1 for its own task. B's eviction is refused
    # as a whole ("victims changed"): nothing of it happens, and its task backs off (a
    # race, like a refused commit) instead of waiting as unschedulable.
    fill(app, nodes=1, cpu=2)
    (first,) = submit(app, id="hi-a", priority=100)
    (second,) = submit(app, id="hi-b", priority=100)
    a = SchedulerWorker(app, WorkerConfig(batch_size=1))
    b = SchedulerWorker(app, WorkerConfig(batch_size=1))
    results = []
    real_apply = b.preemptor.apply

    def a_goes_first(token, task_id, job, search):
        assert [v.task_id for v in search.choice.victims] == ["low.1"]
        assert a.step() == 1 and a.stats.preempted == 1  # A takes second, evicting low.1
        results.append(real_apply(token, task_id, job, search))
        return results[-1]

    b.preemptor.apply = a_goes_first
    assert b.step() == 1
    assert results == ["victims changed"]
    assert b.stats.preempted == 0
    tasks = all_tasks(app)
    assert in_state(tasks, "preempted") == ["low.1"]
    assert tasks["low.1"].message == f"preempted by {second}"
    assert tasks["low.0"].state == "assigned"
    assert first in queue_members(app)["backoff"]
    assert message(tasks[first]).endswith("preemption on n0 refused: victims changed.")
    # After its backoff it searches again, evicts low.0, and both run on n0.
    run_worker_until_idle(app)
    tasks = all_tasks(app)
    assert tasks[first].node == tasks[second].node == "n0"
    assert in_state(tasks, "preempted") == ["low.0", "low.1"]
    assert nomination_fields(app) == {}
    assert_audit_ok(app)


def test_a_worker_reads_what_runs_on_a_node_again_only_once_the_node_changed(app):
    # Three full nodes whose tasks opt out of preemption: every search reads them and finds
    # nothing. A second search by the same worker reads none of them again while they stand.
    # On n1 a task ends and a preemptor-to-be takes its room: n1's tally is back to the same
    # figures, but n1 changed, so the next search reads n1 again, and only n1.
    add_nodes(app, 3, 2)
    guard = submit(app, id="guard", priority=0, replicas=6, preemptible=False)
    run_worker_until_idle(app)
    worker = SchedulerWorker(app, WorkerConfig(batch_size=1))
    read: list[list[str]] = []
    real_tasks_on = worker.preemptor.tasks_on

    def counted(nodes):
        read.append(sorted(n.name for n in nodes))
        return real_tasks_on(nodes)

    worker.preemptor.tasks_on = counted
    submit(app, id="high-a", priority=100)
    assert worker.step() == 1
    assert read == [["n0", "n1", "n2"]]
    submit(app, id="high-b", priority=100)
    assert worker.step() == 1
    assert read == [["n0", "n1", "n2"]]
    (on_n1,) = [t for t in app.store.tasks(guard) if t.node == "n1"][:1]
    app.store.finish([on_n1], "stopped", "a test ends it")
    submit(app, id="high-c", priority=100)
    assert worker.step() == 1
    tasks = all_tasks(app)
    assert tasks["high-c.0"].node == "n1"  # the room freed: placed without a search
    submit(app, id="high-d", priority=100)
    assert worker.step() == 1
    assert read == [["n0", "n1", "n2"], ["n1"]]
    assert "no preemptible task at priority 90 or lower" in message(all_tasks(app)["high-d.0"])
    assert_audit_ok(app)


# ----------------------------------------------------------------------------- two workers at once
def sched(redis_url, namespace, *args):
    return [SCHED, "--redis-url", redis_url, "--namespace", namespace, *args]


def run_worker_processes(app, redis_url, namespace, count, jobs):
    """Start ``count`` `sched worker` processes (one task per claim), wait until they are
    all connected, submit ``jobs`` (id, priority, replicas: 1-core tasks) so that they
    all go at them at once, wait until nothing is left to schedule, stop them with
    SIGTERM and return their stats."""
    before = {c["id"] for c in app.client.client_list()}
    command = sched(redis_url, namespace, "worker", "--batch-size", "1", "--json")
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(count)]
    outcomes = []
    try:
        # A worker's connection shows a command other than the handshake once its loop
        # runs (its SIGTERM handler is installed by then).
        def running():
            return sum(1 for c in app.client.client_list() if c["id"] not in before
                       and c.get("cmd", "").split("|")[0] not in ("ping", "client", "hello", "NULL", "")) >= count

        wait_until(running, PROCESS_TIMEOUT_S, "the worker processes to start their loops")
        for job, priority, replicas in jobs:
            submit(app, id=job, priority=priority, replicas=replicas)

        def idle():
            counts = app.queue.counts()
            return counts["active"] == counts["backoff"] == counts["inflight"] == 0

        wait_until(idle, PROCESS_TIMEOUT_S, "the workers to schedule everything they can")
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
            outcomes.append((process.returncode, out, err))
    for code, out, err in outcomes:
        assert code == 0, f"worker exited {code}\nstdout: {out}\nstderr: {err}"
    return [json.loads(out) for _, out, _ in outcomes]


PREEMPTORS = {
    # Six single-replica jobs of equal priority: each nomination holds against all the
    # others, so every preemptor lands where it evicted.
    "separate": [("hi-%d" % i, 100, 1) for i in range(6)],
    # Three replicas of one job and three of another at a higher priority: a replica of
    # the same job, or a task of the higher job, may take a nominated room, and its
    # preemptor must evict again.
    "contending": [("hi-a", 100, 3), ("hi-b", 150, 3)],
}


@pytest.mark.parametrize("mix", sorted(PREEMPTORS))
def test_workers_preempting_at_once_evict_no_more_than_needed(app, redis_url, namespace, mix):
    nodes, cores = 6, 2
    low = fill(app, nodes=nodes, cpu=cores)  # 12 tasks of priority 10: every core taken
    preemptors = [(job, priority, replicas) for job, priority, replicas in PREEMPTORS[mix]]
    stats = run_worker_processes(app, redis_url, namespace, 3, preemptors)
    preemptors = [task_id for job, _, _ in preemptors for task_id in sorted(tasks_of(app, job))]

    tasks = all_tasks(app)
    preempted = in_state(tasks, "preempted")
    placed = [p for p in preemptors if tasks[p].state == "assigned"]
    # Every task is on one node at most: in exactly its node's task set.
    for name in app.store.node_names():
        members = app.client.smembers(app.keys.node_tasks(name))
        assert members == {t.id for t in tasks.values() if t.state == "assigned" and t.node == name}
    # Every commit the workers made is one placement of one preemptor (the replacements
    # of priority 10 never fit): no task was placed twice.
    assert sum(s.get("placed", 0) for s in stats) == len(placed)
    # Each preemption evicted exactly one task, and each eviction made the room one
    # preemptor now uses: no more evictions than the preemptors needed.
    assert sum(s.get("preempted", 0) for s in stats) == len(preempted)
    assert len(preempted) == len(placed)
    assert all(tasks[v].job == "low" for v in preempted)
    assert all(tasks[v].message.removeprefix("preempted by ") in preemptors for v in preempted)
    # The cluster is still exactly full: every core runs a preemptor or a low task.
    live = in_state(tasks, "assigned")
    assert len(live) == nodes * cores
    assert Counter(tasks[t].job for t in live)["low"] == len(low) - len(preempted)
    # All six get to run: there was room for every one of them (a preemptor that lost a
    # race for its victims backs off and searches again).
    assert sorted(placed) == sorted(preemptors), {p: message(tasks[p]) for p in preemptors if p not in placed}
    leftover = nomination_fields(app)
    if mix == "separate":
        assert leftover == {}
    else:
        # Known bug (see test_nomination_left_behind_when_the_preemptor_lands_elsewhere):
        # a preemptor whose room was taken leaves its first nomination behind. Anything
        # else left over is a different problem.
        for node, fields in leftover.items():
            held = [f.removeprefix("nom:") for f in fields if f.startswith("nom:")]
            assert fields["nominations"] == len(held)
            for task_id in held:
                assert tasks[task_id].state == "assigned" and tasks[task_id].node != node, (node, fields)
    assert_audit_ok(app)

"""Preemption keeps the promise of ``sched job plan``: what plan says a high-priority job
would get (placed outright or by preempting), a worker run until idle gives it, within
that one run (no wait for the 60 s flush of unschedulable tasks).

The issue's case (n1 with 4 cpu, n2 with 8; three 3-cpu fillers at priority 10, then three
3-cpu tasks at priority 200) and a property over random small clusters.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings, strategies as st

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.plan import plan
from scheduler.model import make_node, parse_job
from scheduler.state.app import App

from worker_harness import run_worker_until_idle


def tasks_of(app, job_id):
    store = app.store
    return {t.id: t for t in store.tasks(store.job_task_ids(job_id))}


def states(app, job_id):
    return sorted(t.state for t in tasks_of(app, job_id).values())


def test_worker_preempts_all_three_fillers_as_plan_promises(app):
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    app.store.put_node(make_node("n2", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "filler", "priority": 10, "replicas": 3,
                                           "resources": {"cpu": 3}}))
    run_worker_until_idle(app)
    assert states(app, "filler") == ["assigned"] * 3
    big = parse_job({"id": "big", "priority": 200, "replicas": 3, "resources": {"cpu": 3}})
    promised = plan(app, big)
    assert len(promised["preemptions"]) == 3 and not promised["pending"]
    assert sorted(v["id"] for p in promised["preemptions"] for v in p["victims"]) == \
        ["filler.0", "filler.1", "filler.2"]

    reconcile.submit(app.store, big)
    run_worker_until_idle(app)

    assert states(app, "big") == ["assigned"] * 3
    fillers = tasks_of(app, "filler")
    assert sorted(t.id for t in fillers.values() if t.state == "preempted") == ["filler.0", "filler.1", "filler.2"]
    report = audit(app.store)
    assert report.ok, report.problems


@st.composite
def clusters(draw):
    nodes = draw(st.lists(st.integers(1, 8), min_size=2, max_size=5))
    filler_cpu = draw(st.integers(1, 4))
    fillers = draw(st.integers(1, 8))
    big_cpu = draw(st.integers(1, 6))
    bigs = draw(st.integers(1, 5))
    return nodes, (fillers, filler_cpu), (bigs, big_cpu)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=clusters())
def test_worker_places_as_many_of_the_high_job_as_plan_says(redis_url, case):
    nodes, (fillers, filler_cpu), (bigs, big_cpu) = case
    namespace = "p" + uuid.uuid4().hex[:12]
    app = App(redis_url=redis_url, namespace=namespace)
    try:
        for i, cpu in enumerate(nodes):
            app.store.put_node(make_node(f"n{i}", cpu=cpu, memory="8GiB"))
        reconcile.submit(app.store, parse_job({"id": "filler", "priority": 10, "replicas": fillers,
                                               "resources": {"cpu": filler_cpu}}))
        run_worker_until_idle(app)
        big = parse_job({"id": "big", "priority": 200, "replicas": bigs, "resources": {"cpu": big_cpu}})
        promised = plan(app, big)
        reconcile.submit(app.store, big)
        run_worker_until_idle(app)
        placed = [t for t in tasks_of(app, "big").values() if t.state == "assigned"]
        assert len(placed) == len(promised["placements"]) + len(promised["preemptions"]), promised
        report = audit(app.store)
        assert report.ok, report.problems
    finally:
        for key in app.client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000):
            app.client.delete(key)
        app.client.close()

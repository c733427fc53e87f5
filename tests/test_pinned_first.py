"""Tasks pinned to a node are placed before the free tasks of their batch (SwarmKit
schedules tasks with node constraints first), so the free ones see their load and go
elsewhere instead of taking the one node the pinned task can use."""

from __future__ import annotations

import pytest

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import make_node, parse_job
from workers.scheduler_worker import SchedulerWorker, WorkerConfig


@pytest.mark.parametrize("pinned", [
    {"constraints": ["node.hostname==n1"]},
    {"constraints": ["node.name==n1"]},
    {"constraints": ["node.id==n1"]},
    {"type": "global", "constraints": ["node.labels.disk==ssd"]},  # pinned by the global job
], ids=["hostname", "name", "id", "global"])
def test_pinned_task_is_placed_before_free_tasks_claimed_ahead_of_it(app, pinned):
    app.store.put_node(make_node("n1", cpu=2, memory="8GiB", labels={"disk": "ssd"}))
    app.store.put_node(make_node("n2", cpu=2, memory="8GiB"))
    # Submitted first, so claimed first: four 1-cpu tasks would fill both nodes.
    reconcile.submit(app.store, parse_job({"id": "free", "replicas": 4, "resources": {"cpu": 1}}))
    spec = {"id": "pinned", "resources": {"cpu": 2}, **pinned}
    if spec.get("type") != "global":
        spec["replicas"] = 1
    reconcile.submit(app.store, parse_job(spec))
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 5  # one batch holds them all

    store = app.store
    tasks = {t.id: t for t in store.tasks(store.all_task_ids())}
    pinned_tasks = [t for t in tasks.values() if t.job == "pinned"]
    assert [(t.state, t.node) for t in pinned_tasks] == [("assigned", "n1")]
    free = [t for t in tasks.values() if t.job == "free"]
    assert sorted((t.state, t.node or "") for t in free) == [
        ("assigned", "n2"), ("assigned", "n2"), ("pending", ""), ("pending", "")]
    report = audit(store)
    assert report.ok, report.problems

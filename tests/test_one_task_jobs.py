"""One-task jobs of one shape are placed in one pass (kube-scheduler's equivalence
classes), each still as its own job: its own tally, its own max_per_node, and no merging
for a job that already has tasks placed (its spread must count them)."""

from __future__ import annotations

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import make_node, parse_job
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

SHAPE = {"resources": {"cpu": 1, "memory": "64MiB"}, "max_per_node": 1}


def add_nodes(app, *names, cpu="4"):
    for name in names:
        app.store.put_node(make_node(name, cpu=cpu, memory="4GiB"))


def submit(app, **raw) -> list[str]:
    return reconcile.submit(app.store, parse_job({**SHAPE, **raw}))["tasks"]


def task(app, task_id: str):
    return app.store.get_task(task_id)


def counting_passes(worker: SchedulerWorker) -> list[tuple[int, bool]]:
    """Record (tasks, independent) for every placement pass the worker makes."""
    passes = []
    real_place = worker.placer.place

    def place(nodes, job, task_ids, **kw):
        passes.append((len(task_ids), kw.get("independent", False)))
        return real_place(nodes, job, task_ids, **kw)

    worker.placer.place = place
    return passes


def test_one_task_jobs_of_one_shape_share_a_pass_and_stay_separate_jobs(app):
    add_nodes(app, "n0", cpu="3")
    ids = [submit(app, id=f"solo-{i}")[0] for i in range(3)]
    worker = SchedulerWorker(app, WorkerConfig())
    passes = counting_passes(worker)
    assert worker.step() == 3
    assert passes == [(3, True)]
    # max_per_node 1 holds per job, so all three fit on the one node.
    assert [task(app, t).node for t in ids] == ["n0"] * 3
    for i, task_id in enumerate(ids):
        assert task(app, task_id).job == f"solo-{i}"
        assert app.client.zscore(app.keys.tally_job(f"solo-{i}"), "n0") == 1
    assert app.store.get_node("n0").tasks == 3
    assert audit(app.store).ok


def test_a_job_with_tasks_placed_is_not_merged(app):
    add_nodes(app, "n0", "n1")
    # n1 carries two tasks of another job; the first task of "web" goes to the emptier n0.
    submit(app, id="pinned", replicas=2, max_per_node=0, constraints=["node.name==n1"])
    (first,) = submit(app, id="web")
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    assert task(app, first).node == "n0"
    # One batch: web's second task (web has a task on n0) and a new one-task job of the
    # same shape. Spreading web puts its second task on n1, though n1 has more tasks.
    reconcile.scale(app.store, "web", 2)
    (other,) = submit(app, id="other")
    worker = SchedulerWorker(app, WorkerConfig())
    passes = counting_passes(worker)
    assert worker.step() == 2
    assert sorted(passes) == [(1, False), (1, False)]
    second = next(t for t in app.store.job_task_ids("web") if t != first)
    assert task(app, second).node == "n1"
    assert task(app, other).state == "assigned"
    assert audit(app.store).ok

"""NoExecute taints over time, through a real worker, the Lua commit and the evictions'
upkeep, on a clock the test moves (the scripts take it as their last ARGV): a task's
tolerance starts when it is placed on the tainted node (or, already there, when the taint
lands); its replacement goes to another node when one fits; when none does, it goes
back at most once per ``toleration_seconds``, each time with an event that says so."""

from __future__ import annotations

import orjson

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.model.taints import parse_taint
from workers.scheduler_worker import SchedulerWorker, WorkerConfig
from worker_harness import redis_ms

TOLERATING = [{"key": "evict2", "operator": "Exists", "effect": "NoExecute", "toleration_seconds": 6}]


def setup(app, clock, *nodes, jobs) -> SchedulerWorker:
    clock.now = redis_ms(app)  # near Redis's own time, which leases follow
    for name, cpu in nodes:
        app.store.put_node(make_node(name, cpu=cpu, memory="8GiB"))
    for spec in jobs:
        reconcile.submit(app.store, parse_job(spec))
    worker = SchedulerWorker(app, WorkerConfig())
    settle(worker)
    return worker


def settle(worker) -> None:
    """What the workers do in a moment: upkeep (evictions included), then every batch."""
    worker.maintain(force=True)
    while worker.step():
        pass


def run_for(worker, clock, seconds: float, step_ms: int = 250) -> None:
    for _ in range(int(seconds * 1000 / step_ms)):
        clock.advance(step_ms)
        settle(worker)


def tasks_of(app, job: str) -> list:
    return sorted(app.store.tasks(app.store.job_task_ids(job)), key=lambda t: t.index)


def assigned_events(app) -> dict[str, dict]:
    out = {}
    for _, fields in app.client.xrange(app.keys.stream):
        event = orjson.loads(fields["event"])
        if event.get("type") == "task" and event.get("state") == "assigned":
            out[event["id"]] = event
    return out


def test_a_pinned_service_goes_back_to_its_tainted_node_once_per_toleration_seconds(clocked_app, clock, sched):
    """The storm as a user met it: a service pinned to a3, tolerating evict2 for 6 s; a3
    tainted evict2=x:NoExecute. Each task stays its 6 s from its own placement (the first
    from the taint), so over 30 s the job has at most 6 tasks, each placement onto a3 at
    least 6 s after the one before, each announced with the taint and when it leaves."""
    app = clocked_app
    worker = setup(app, clock, ("a3", 4), ("b1", 4),
                   jobs=[{"id": "web", "constraints": ["node.name==a3"], "tolerations": TOLERATING}])
    assert [(t.state, t.node) for t in tasks_of(app, "web")] == [("assigned", "a3")]
    sched("node", "taint", "a3", "evict2=x:NoExecute")  # as a user does: on Redis's clock
    tainted_at = app.store.get_node("a3").taints[0].added_ms
    clock.now = max(clock.now, tainted_at)
    run_for(worker, clock, 30)

    tasks = tasks_of(app, "web")
    ended = [t for t in tasks if t.terminal]
    assert len(ended) >= 3  # it was evicted, put back and evicted again
    for task in ended:
        assert task.message == "evicted from node a3 by its taint evict2=x:NoExecute"
        assert task.ended_ms - max(task.assigned_ms, tainted_at) >= 6000, task
    placed = [t.assigned_ms for t in tasks if t.assigned_ms]
    assert all(b - a >= 6000 for a, b in zip(placed, placed[1:])), placed
    assert len(tasks) <= 1 + 30 // 6
    assert sum(t.live for t in tasks) == 1
    events = assigned_events(app)
    for task in tasks[1:]:  # every placement onto the tainted node says so
        event = events[task.id]
        assert (event["node"], event["taint"], event["evict_at"]) == ("a3", "evict2=x:NoExecute",
                                                                       task.assigned_ms + 6000)


def test_a_task_evicted_by_a_taint_is_replaced_on_another_node_that_fits(clocked_app, clock):
    """a3 is the node the ranking would choose (fewer tasks than b1), until it is tainted:
    the replacement of the task evicted from it goes to b1, and stays there."""
    app = clocked_app
    worker = setup(app, clock, ("a3", 4), ("b1", 4),
                   jobs=[{"id": "other", "constraints": ["node.name==b1"]},
                         {"id": "web", "tolerations": TOLERATING}])
    assert [t.node for t in tasks_of(app, "web")] == ["a3"]
    app.store.taint("a3", parse_taint("evict2=x:NoExecute"))
    run_for(worker, clock, 20)
    tasks = tasks_of(app, "web")
    assert [(t.state, t.node) for t in tasks] == [("stopped", "a3"), ("assigned", "b1")]
    assert "taint" not in assigned_events(app)[tasks[1].id]


def test_a_task_already_on_the_node_counts_from_the_taint(clocked_app, clock):
    """kube's taint manager: a task placed before the taint has its toleration_seconds from
    when the taint lands, not from its placement."""
    app = clocked_app
    worker = setup(app, clock, ("a3", 4),
                   jobs=[{"id": "web", "constraints": ["node.name==a3"], "tolerations": TOLERATING}])
    run_for(worker, clock, 60)  # long placed before the taint
    app.store.taint("a3", parse_taint("evict2=x:NoExecute"))
    tainted_at = clock.now
    run_for(worker, clock, 5)
    assert tasks_of(app, "web")[0].state == "assigned"
    run_for(worker, clock, 1.5)
    first = tasks_of(app, "web")[0]
    assert first.state == "stopped" and 6000 <= first.ended_ms - tainted_at


def test_a_toleration_of_zero_seconds_keeps_the_task_off_the_node(clocked_app, clock):
    """toleration_seconds 0 tolerates a NoExecute taint for no time: the task would be
    evicted as it lands, so it is not placed there (and one already there is evicted at
    once), instead of being put back and evicted at every upkeep."""
    app = clocked_app
    zero = [{**TOLERATING[0], "toleration_seconds": 0}]
    worker = setup(app, clock, ("a3", 4),
                   jobs=[{"id": "web", "constraints": ["node.name==a3"], "tolerations": zero}])
    assert tasks_of(app, "web")[0].node == "a3"
    app.store.taint("a3", parse_taint("evict2=x:NoExecute"))
    run_for(worker, clock, 10)
    tasks = tasks_of(app, "web")
    assert [(t.state, t.node) for t in tasks] == [("stopped", "a3"), ("pending", "")]
    reasons = orjson.loads(tasks[1].explanation)["message"]
    assert "1 taint evict2=x:NoExecute tolerated for 0 s" in reasons, reasons

"""``parallelism``: at most N live tasks of a job at once, planned by the worker
(``workers/admission.py``) and enforced by the commit (``lua/commit.lua``), so parallel
workers cannot pass it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.commit import Planned, commit
from workers.admission import within_parallelism
from worker_harness import run_worker_until_idle, wait_until

SCHED = str(Path(sys.executable).parent / "sched")


def _node(app, name: str, cpu: int = 64_000) -> None:
    app.client.hset(app.keys.node(name), mapping={"name": name, "status": "ready", "availability": "active",
                                                  "tasks": 0, "cap:cpu": cpu, "alloc:cpu": 0})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(1, 6), live=st.lists(st.integers(0, 3), min_size=2, max_size=2), placing=st.integers(1, 8))
def test_the_commit_admits_what_the_worker_admits(app, limit, live, placing):
    """Whatever the job's live tasks (its tally over two nodes), the commit accepts exactly
    as many placements as admission plans, and refuses the rest with the same words."""
    k, client = app.keys, app.client
    client.delete(k.tally_job("p"), k.leases, k.inflight, *(k.task(f"p.{i}") for i in range(8)))
    for name, count in zip(("n0", "n1"), live):
        _node(app, name)
        if count:
            client.zadd(k.tally_job("p"), {name: count})
    spec = parse_job({"id": "p", "type": "batch", "replicas": 20, "parallelism": limit})
    ids = [f"p.{i}" for i in range(placing)]
    for task_id in ids:
        client.hset(k.task(task_id), mapping={"id": task_id, "job": "p", "state": "pending"})
        client.hset(k.leases, task_id, "7")
    admitted, why = within_parallelism(spec, placing, sum(live))
    outcome = commit(app.scripts, k, "7", [Planned(t, f"n{i % 2}", spec) for i, t in enumerate(ids)])
    assert len(outcome.accepted) == admitted
    assert {reason for _, reason in outcome.refused} <= {f"job p runs its parallelism of {limit}"}
    if admitted < placing:
        assert why.startswith(f"job p runs its parallelism of {limit}:")
    total = sum(int(v) for _, v in client.zrange(k.tally_job("p"), 0, -1, withscores=True))
    assert total == max(sum(live), min(limit, sum(live) + placing))


def test_a_job_without_parallelism_sends_the_commit_nothing_more(app):
    """Plain jobs pay nothing: no parallelism entry is sent for them."""
    k = app.keys
    _node(app, "n0")
    spec = parse_job({"id": "q", "replicas": 2})
    for task_id in ("q.0", "q.1"):
        app.client.hset(k.task(task_id), mapping={"id": task_id, "job": "q", "state": "pending"})
        app.client.hset(k.leases, task_id, "7")
    seen = []
    real = app.scripts.commit

    def spy(keys, args):
        seen.append(list(args))
        return real(keys=keys, args=args)

    app.scripts.commit = spy
    outcome = commit(app.scripts, k, "7", [Planned("q.0", "n0", spec), Planned("q.1", "n0", spec)])
    assert len(outcome.accepted) == 2
    # The last argument is the time ("": Redis TIME); before it, the last placement's node
    # index, not a parallelism list.
    assert seen[0][-2:] == [1, ""]


def test_waiting_tasks_say_why_and_follow_as_others_end(app):
    """A worker places only the parallelism; the rest wait with the job's reason, and are
    placed as live tasks end."""
    app.store.put_node(make_node("n0", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "wide", "type": "batch", "replicas": 5, "parallelism": 2,
                                           "resources": {"cpu": 0.1}}))
    run_worker_until_idle(app)
    tasks = app.store.tasks(app.store.job_task_ids("wide"))
    assert sorted(t.state for t in tasks) == ["assigned", "assigned", "pending", "pending", "pending"]
    waiting = [t for t in tasks if t.state == "pending"]
    assert "job wide runs its parallelism of 2: 2 of its tasks are live or being placed." in waiting[0].explanation
    for round_ in range(3):
        live = [t for t in app.store.tasks(app.store.job_task_ids("wide")) if t.live]
        reconcile.task_ended(app.store, live[0], True, "done")
        run_worker_until_idle(app)
        now = app.store.tasks(app.store.job_task_ids("wide"))
        assert sum(t.live for t in now) <= 2
    assert sorted(t.state for t in app.store.tasks(app.store.job_task_ids("wide"))).count("completed") == 3


def test_parallelism_is_never_exceeded_by_four_worker_processes(app, redis_url, namespace):
    """Four worker processes place a job of 120 tasks with parallelism 5 on roomy static
    nodes while the test ends live tasks as fast as it can and samples the live count."""
    for i in range(4):
        app.store.put_node(make_node(f"n{i}", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "fan", "type": "batch", "replicas": 120, "parallelism": 5,
                                           "resources": {"cpu": 0.01}}))
    workers = subprocess.Popen([SCHED, "--redis-url", redis_url, "--namespace", namespace, "worker",
                                "--concurrency", "4"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    store, seen, over = app.store, [], []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            live = sum(int(v) for _, v in app.client.zrange(app.keys.tally_job("fan"), 0, -1, withscores=True))
            seen.append(live)
            if live > 5:
                over.append(live)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        def all_done():
            tasks = store.tasks(store.job_task_ids("fan"))
            live = [t for t in tasks if t.live]
            states = [t.state for t in store.tasks([t.id for t in live])]
            assert sum(state in ("assigned", "running") for state in states) <= 5
            for task in live:
                reconcile.task_ended(store, task, True, "done")
            return sum(t.state == "completed" for t in tasks) == 120

        wait_until(all_done, 120, "every task of fan to complete", interval_s=0.01)
    finally:
        stop.set()
        sampler.join()
        workers.terminate()
        workers.wait(timeout=30)
    assert over == []
    assert max(seen) == 5  # the limit was reached, not merely respected by running one at a time


def test_parallelism_zero_is_one_sentence_and_nothing_is_written(app, sched):
    import json

    out = sched("job", "submit", "-", input=json.dumps({"id": "z", "type": "batch", "parallelism": 0}), ok=False)
    assert out.exit_code == 2 and "job z: parallelism must be between 1 and 1000000, not 0." in out.output
    out = sched("job", "submit", "-", input=json.dumps({"id": "s", "parallelism": 2}), ok=False)
    assert out.exit_code == 2 and "parallelism applies to batch jobs" in out.output
    assert app.client.keys(f"sched:{{{app.keys.namespace}}}:*") == []

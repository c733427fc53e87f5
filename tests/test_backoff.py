"""``reschedule`` (Nomad's block, for every job type), its shorthands ``restart_delay`` and
``max_retries``, and ``deadline``: delays measured from the tasks' own times on a real
agent, attempts within an interval, failures only."""

from __future__ import annotations

import time

import pytest

from scheduler import Client
from scheduler.control import reconcile
from scheduler.model import SpecError, Task, parse_job
from scheduler.model.reschedule import Reschedule
from agent_cluster import cluster  # noqa: F401 (the fixture)
from worker_harness import run_worker_until_idle


def test_delay_functions_as_nomad_defines_them():
    delays = lambda function: [Reschedule(delay=5, delay_function=function, max_delay=60).delay_s(n) for n in range(1, 8)]
    assert delays("constant") == [5] * 7
    assert delays("exponential") == [5, 10, 20, 40, 60, 60, 60]
    assert delays("fibonacci") == [5, 5, 10, 15, 25, 40, 60]


def test_the_shorthands_are_the_policy_without_the_block():
    batch = parse_job({"id": "b", "type": "batch", "max_retries": 2, "restart_delay": 4})
    assert batch.policy == Reschedule(delay=4, attempts=2, unlimited=False) and "reschedule" not in batch.raw
    assert parse_job({"id": "s", "restart_delay": 2}).policy.unlimited  # a service is replaced however often
    partial = parse_job({"id": "b", "type": "batch", "max_retries": 5, "reschedule": {"delay_function": "fibonacci"}})
    assert (partial.policy.delay, partial.policy.attempts, partial.policy.delay_function) == (1.0, 5, "fibonacci")
    with pytest.raises(SpecError, match=r"reschedule.delay_function must be one of constant, exponential, fibonacci"):
        parse_job({"id": "b", "reschedule": {"delay_function": "linear"}})
    with pytest.raises(SpecError, match=r"reschedule.max_delay \(1\) is below delay \(5\)"):
        parse_job({"id": "b", "reschedule": {"delay": 5, "max_delay": 1}})


def test_attempts_count_the_failures_inside_the_interval(app):
    """With attempts 2 in a 1.5 s interval, a slot whose failures are spread out goes on;
    three failures inside the interval end it. Each replacement carries the recent ones."""
    client = Client(app=app)
    client.add_node("n1", cpu=2, memory="2GiB")
    client.submit({"id": "w", "type": "batch", "reschedule": {"delay": 0, "attempts": 2, "interval": 1.5}})

    def fail_live() -> Task:
        run_worker_until_idle(app)
        [task] = [t for t in client.tasks(job="w") if t.live]
        reconcile.task_ended(app.store, task, False, "exited with code 1")
        return task

    fail_live(), fail_live()
    time.sleep(1.6)  # both failures leave the interval
    fail_live(), fail_live()
    last = fail_live()  # the third inside the interval: no replacement
    tasks = client.tasks(job="w")
    assert [t.state for t in tasks] == ["failed"] * 5 and all(t.slot == 0 for t in tasks)
    assert len(last.failures) == 2 and tasks[1].failures != ()


def test_exponential_delays_on_an_agent_from_the_tasks_own_times(cluster, app):
    """A command that always fails, with delay 0.3 s doubling: each replacement is created as
    its predecessor ends, waits exactly its delay in backoff (its own backoff_until), and
    starts no sooner (its started_at); after 3 attempts the slot stops."""
    cluster.agent("n1")
    cluster.worker()
    client = Client(app=app)
    client.submit({"id": "crash", "type": "batch", "resources": {"cpu": 0.1, "memory": "16MiB"},
                   "run": {"command": ["sh", "-c", "exit 3"]},
                   "reschedule": {"delay": 0.3, "delay_function": "exponential", "attempts": 3}})
    cluster.wait(lambda: [t.state for t in client.tasks(job="crash")] == ["failed"] * 4, "four failed tasks", 30)
    tasks = client.tasks(job="crash")
    fields = [app.client.hgetall(app.keys.task(t.id)) for t in tasks]
    waits = [int(f["backoff_until"]) - int(f["created"]) for f in fields[1:]]
    assert waits == [300, 600, 1200]
    for before, after, wait in zip(tasks, tasks[1:], waits):
        assert after.created_ms >= before.ended_ms and after.started_ms - before.ended_ms >= wait
    assert [t.retries for t in tasks] == [0, 1, 2, 3] and {t.slot for t in tasks} == {0}


def test_a_job_running_past_its_deadline_is_stopped_and_failed(app):
    client = Client(app=app)
    client.add_node("n1", cpu=2, memory="2GiB")
    client.submit({"id": "slow", "type": "batch", "replicas": 2, "deadline": 0.5})
    run_worker_until_idle(app)
    assert client.job("slow")["status"] == "running"
    time.sleep(0.6)
    run_worker_until_idle(app)  # its upkeep ends what passed its deadline
    record = client.job("slow")
    assert record["status"] == "failed" and record["failure"].startswith("deadline exceeded")
    assert [(t.state, t.message.split(":")[0]) for t in client.tasks(job="slow")] == [("failed", "deadline exceeded")] * 2
    assert client.node("n1").tasks == 0
    with pytest.raises(SpecError, match="deadline applies to batch and sysbatch jobs"):
        client.submit({"id": "svc", "deadline": 10})

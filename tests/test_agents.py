"""Node agents and scheduler workers as real OS processes, running tasks through real RQ:
a task runs and releases its node, a failing batch task is retried, a failing service
task replaced, and a global job follows the agents that join (the processes and their
cleanup: tests/agent_cluster.py). Waits are liveness bounds, never speed thresholds."""

from __future__ import annotations

import signal
import time

from rq.job import Job

from scheduler import Client
from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.execution import rq_job_id
from scheduler.model import make_node

from agent_cluster import cluster  # noqa: F401 (the fixture)
from agent_cluster import (SMALL, STOP_TIMEOUT_S, event_states, job_tasks, namespace_pids, node_is_empty, rq_client,
                           states, submit)


# ----------------------------------------------------------------------------- running tasks
def test_function_task_runs_completes_and_releases_its_node(cluster, app, redis_url, namespace):
    agent = cluster.agent("n1")
    worker = cluster.worker()
    pubsub = app.client.pubsub()
    pubsub.subscribe(app.keys.events)
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    job_id = submit(app, {"id": "calc", "type": "batch", "replicas": 1, "resources": SMALL,
                          "run": {"func": "agent_tasks:add", "args": [2, 3]}})
    task_id = app.store.job_task_ids(job_id)[0]

    def completed():
        state = app.store.get_task(task_id).state
        assert state not in ("failed", "lost", "stopped"), (app.store.get_task(task_id), cluster.logs_text())
        return state == "completed"

    cluster.wait(completed, "the task to complete")
    task = app.store.get_task(task_id)
    assert task.node == "n1"
    assert task.message == "agent_tasks:add returned 5"
    assert int(task.assigned_ms) <= int(task.started_ms) <= int(task.ended_ms)

    seen = event_states(pubsub, task_id)
    pubsub.close()
    assert seen[0] == "pending"
    assert [s for s in seen if s != "pending"] == ["assigned", "running", "completed"], seen

    # The RQ job that ran it recorded run_task's result.
    job = Job.fetch(rq_job_id(namespace, task_id), connection=rq_client(redis_url))
    cluster.wait(lambda: job.get_status(refresh=True) == "finished", "the RQ job to be finished")
    assert job.return_value(refresh=True) == {"task": task_id, "ran": True, "succeeded": True,
                                              "message": "agent_tasks:add returned 5",
                                              "state": "completed", "replacement": []}

    # Resources are released and a completed batch task is not run again.
    assert node_is_empty(app, "n1")
    assert app.client.zcard(app.keys.tally_job(job_id)) == 0
    assert len(app.store.job_task_ids(job_id)) == 1
    assert app.client.zcard(app.keys.faults(job_id)) == 0
    report = audit(app.store)
    assert report.ok, report.problems

    # SIGTERM stops both processes cleanly, leaving nothing of this namespace running.
    for process in (agent, worker):
        process.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=STOP_TIMEOUT_S) == 0, cluster.logs_text()
    assert worker.wait(timeout=STOP_TIMEOUT_S) == 0, cluster.logs_text()
    cluster.wait(lambda: not namespace_pids(namespace), "every agent and worker process to exit", 5)


def test_failing_batch_task_is_retried_up_to_max_retries(cluster, app):
    cluster.agent("n1")
    cluster.worker()
    job_id = submit(app, {"id": "flaky", "type": "batch", "replicas": 1, "max_retries": 2, "restart_delay": 0.1,
                          "resources": SMALL, "run": {"command": ["sh", "-c", "echo bad input >&2; exit 3"]}})

    def three_failed():
        tasks = job_tasks(app, job_id)
        assert len(tasks) <= 3 and "completed" not in states(tasks), (tasks, cluster.logs_text())
        return states(tasks) == ["failed"] * 3

    cluster.wait(three_failed, "3 failed attempts")
    # The third failure was the last: nothing is queued, and no fourth task appears.
    time.sleep(1.0)
    tasks = job_tasks(app, job_id)
    assert states(tasks) == ["failed"] * 3
    assert [int(t.retries) for t in tasks] == [0, 1, 2]
    assert all(t.message == "exited with code 3: bad input" for t in tasks), tasks
    assert all(t.node == "n1" for t in tasks)
    # What each attempt printed, kept on its way by the agent (sched task logs).
    for task in tasks:
        logs = Client(app=app).logs(task.id)
        assert (logs["stdout"], logs["stderr"], logs["exit_code"]) == ("", "bad input\n", 3), logs
    for retry in tasks[1:]:  # each retry waited for the restart delay before it was placed
        assert retry.assigned_ms >= int(app.client.hget(app.keys.task(retry.id), "backoff_until"))
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}

    # Faulty-node detection: one entry per failure, naming the node, the task and its version.
    faults = app.client.zrange(app.keys.faults(job_id), 0, -1, withscores=True)
    assert sorted(member for member, _ in faults) == sorted(f"n1|{t.id}|{t.version}" for t in tasks)
    ended = {t.id: int(t.ended_ms) for t in tasks}
    for member, score in faults:
        assert score >= ended[member.split("|")[1]]
    assert node_is_empty(app, "n1")
    report = audit(app.store)
    assert report.ok, report.problems


def test_failing_service_task_is_replaced_until_the_job_stops(cluster, app):
    cluster.agent("n1")
    cluster.worker()
    job_id = submit(app, {"id": "crashy", "type": "service", "replicas": 1, "restart_delay": 0.1,
                          "resources": SMALL, "run": {"func": "agent_tasks:fail", "args": ["no config"]}})

    def replaced_twice():
        tasks = job_tasks(app, job_id)
        return len(tasks) >= 3 and states(tasks[:2]) == ["failed", "failed"]

    cluster.wait(replaced_twice, "two failed tasks and their replacements")
    reconcile.stop(app.store, job_id)
    # A replacement in flight may still run once, but is not replaced: the job settles.
    cluster.wait(lambda: not reconcile.open_tasks(app.store, job_id), "no open task after the stop")
    time.sleep(0.5)
    assert not reconcile.open_tasks(app.store, job_id)
    tasks = job_tasks(app, job_id)
    failed = [t for t in tasks if t.state == "failed"]
    assert len(failed) >= 2
    assert set(states(tasks)) <= {"failed", "stopped"}, states(tasks)
    for t in failed:
        assert t.message == "agent_tasks:fail raised RuntimeError: no config"
    retries = [int(t.retries) for t in tasks]
    assert retries == list(range(len(tasks))), retries  # each task replaced the one before it
    members = app.client.zrange(app.keys.faults(job_id), 0, -1)
    assert sorted(members) == sorted(f"n1|{t.id}|{t.version}" for t in failed)
    assert node_is_empty(app, "n1")
    report = audit(app.store)
    assert report.ok, report.problems


# ----------------------------------------------------------------------------- global jobs
def test_global_job_follows_agents_joining_and_labels_changing(cluster, app):
    cluster.agent("g1", labels=["zone=eu"], slots=1)
    cluster.agent("g2", labels=["zone=eu"], slots=1)
    cluster.worker()
    job_id = submit(app, {"id": "logs", "type": "global", "resources": {"cpu": 0.1, "memory": "32MiB"},
                          "constraints": ["node.labels.zone==eu"]})  # no run: holds its reservation

    def running_on():
        return sorted(t.node for t in job_tasks(app, job_id) if t.state == "running")

    cluster.wait(lambda: running_on() == ["g1", "g2"], "a running task on g1 and g2")
    assert len(app.store.job_task_ids(job_id)) == 2

    cluster.agent("g3", labels=["zone=eu"], slots=1)
    cluster.wait(lambda: running_on() == ["g1", "g2", "g3"], "a task on the node that joined")
    joined = [t for t in job_tasks(app, job_id) if t.node == "g3"]
    assert len(joined) == 1 and joined[0].pin == "g3"

    app.store.put_node(make_node("g3", cpu="2", memory="1GiB", labels={"zone": "us"}))
    cluster.wait(lambda: running_on() == ["g1", "g2"], "g3's task to stop once g3 no longer matches")
    assert app.store.get_task(joined[0].id).state == "stopped"
    assert len(app.store.job_task_ids(job_id)) == 3  # nothing else was added
    assert node_is_empty(app, "g3")
    report = audit(app.store)
    assert report.ok, report.problems

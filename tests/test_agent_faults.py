"""Converging under faults, with agents and workers as real OS processes: RQ's Redis away,
an RQ job failed before it began, RQ workers killed, and the scheduling Redis killed or
paused while a run goes on; each run is recorded as it ended, once (the processes and
their cleanup: tests/agent_cluster.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.execution import rq_job_id

from restartable_redis import RestartableRedis
from agent_cluster import cluster  # noqa: F401 (the fixture)
from agent_cluster import (SMALL, STOP_TIMEOUT_S, alive, cmdline, command_pids, job_tasks, namespace_pids,
                           node_is_empty, own_redis_cluster, parent, rq_client, signal_pid, states, submit)


# ----------------------------------------------------------------------------- converging under faults
def test_a_task_placed_while_the_rq_redis_is_away_runs_once_it_is_back(cluster, app, tmp_path):
    """RQ runs on a Redis of its own (``--rq-url``), which dies just before a batch task is
    placed on the agent's node: the agent cannot queue it. Once that Redis is back (from
    its append-only file), the task runs, once: nothing of the failed try holds it."""
    rq = RestartableRedis(tmp_path / "rq-redis")
    rq.start()
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        cluster.agent("a", extra=("--rq-url", rq.url))
        cluster.worker()
        rq.kill()
        job_id = submit(app, {"id": "late", "type": "batch", "max_retries": 0, "resources": SMALL,
                              "run": {"command": ["sh", "-c", f'echo ran >> "{marks}/$SCHED_TASK_ID"']}})
        cluster.wait(lambda: states(job_tasks(app, job_id)) == ["assigned"], "the task to be placed on a")
        time.sleep(3)  # the agent meets the RQ Redis away at least once
        assert states(job_tasks(app, job_id)) == ["assigned"]
        rq.start()
        cluster.wait(lambda: states(job_tasks(app, job_id)) == ["completed"],
                     "the task to run once the RQ Redis is back", 30)
        assert (marks / f"{job_id}.0").read_text() == "ran\n"
        assert len(app.store.job_task_ids(job_id)) == 1
        report = audit(app.store)
        assert report.ok, report.problems
    finally:
        rq.stop()


def test_a_task_whose_rq_job_failed_before_it_began_is_queued_again(cluster, app, tmp_path, namespace, redis_url):
    """A task waits in the node's RQ queue behind another (its agent runs one at a time,
    while the node counts two slots, as after an agent came back with fewer) when RQ marks
    its job failed before any work horse began it (as when a horse cannot reach the
    state's Redis during a failover): the task is still assigned, and it runs once all the
    same."""
    marks = tmp_path / "marks"
    marks.mkdir()
    cluster.agent("a", slots=1)
    cluster.worker()
    first = submit(app, {"id": "first", "type": "batch", "max_retries": 0, "resources": SMALL,
                         "run": {"command": ["sh", "-c", "sleep 3"]}})
    cluster.wait(lambda: states(job_tasks(app, first)) == ["running"], "the first task to take the one slot")
    app.store.put_node(dataclasses.replace(app.store.get_node("a"), slots=2))  # as its agent had before
    second = submit(app, {"id": "second", "type": "batch", "max_retries": 0, "resources": SMALL,
                          "run": {"command": ["sh", "-c", f'echo ran >> "{marks}/$SCHED_TASK_ID"']}})
    task_id = f"{second}.0"
    job_id = rq_job_id(namespace, task_id)
    connection = rq_client(redis_url)
    cluster.wait(lambda: Job.exists(job_id, connection=connection), "the second task's RQ job to be queued")
    job = Job.fetch(job_id, connection=connection)
    Queue(job.origin, connection=connection).remove(job)
    with connection.pipeline() as pipe:
        job.set_status(JobStatus.FAILED, pipeline=pipe)
        FailedJobRegistry(job.origin, connection=connection).add(job, pipeline=pipe)
        pipe.execute()
    assert app.store.get_task(task_id).state == "assigned"
    cluster.wait(lambda: states(job_tasks(app, second)) == ["completed"], "the second task to run all the same", 30)
    assert (marks / task_id).read_text() == "ran\n"


def test_a_stopped_task_stops_running_although_its_rq_worker_died(cluster, app):
    """The RQ worker that runs a task's work horse is SIGKILLed (the horse and its command
    live on, orphaned), then the job is stopped: no RQ worker is there to hear a stop
    message, and the command must stop all the same."""
    cluster.agent("a")
    cluster.worker()
    job_id = submit(app, {"id": "orphan", "replicas": 1, "resources": SMALL,
                          "run": {"command": ["sh", "-c", "sleep 60; true"]}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"], "the task to run")
    task_id = job_tasks(app, job_id)[0].id
    pids = cluster.wait(lambda: command_pids(task_id), "its command to run")
    root = next(pid for pid in pids if parent(pid) not in pids)
    horse = parent(root)
    rq_worker = parent(horse)
    assert "rq-worker" in cmdline(rq_worker) or "agent" in cmdline(rq_worker), cmdline(rq_worker)
    signal_pid(rq_worker, signal.SIGKILL)
    cluster.wait(lambda: not alive(rq_worker), "the RQ worker to die")
    reconcile.stop(app.store, job_id)
    cluster.wait(lambda: not command_pids(task_id) and not alive(horse),
                 "the stopped task's command and work horse to stop")
    assert states(job_tasks(app, job_id)) == ["stopped"]
    assert node_is_empty(app, "a")


def test_the_rq_workers_of_an_agent_killed_outright_stop_on_their_own(cluster, app, namespace):
    """An agent SIGKILLed cannot stop its RQ workers: idle, they see it gone and stop
    themselves, rather than wait for work on a node that nobody supervises."""
    agent = cluster.agent("a")
    workers = cluster.wait(lambda: [pid for pid in namespace_pids(namespace, "rq-worker") if parent(pid) == agent.pid],
                           "the agent's RQ workers to start")
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=STOP_TIMEOUT_S)
    cluster.wait(lambda: not any(alive(pid) for pid in workers), "its RQ workers to stop")


def _run_once(app, cluster, ledger, middle: str) -> str:
    """Submit a batch job whose one command writes start, runs ``middle``, writes end; wait
    until it runs. Its task id."""
    script = f'echo "start $SCHED_TASK_ID 0" >> "{ledger}"; {middle}; echo "end $SCHED_TASK_ID 0" >> "{ledger}"'
    job_id = submit(app, {"id": "once", "type": "batch", "max_retries": 2, "restart_delay": 0, "resources": SMALL,
                          "run": {"command": ["sh", "-c", script]}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"] and ledger.exists(), "the command to run")
    return job_id


def _ran_once_and_completed(app, cluster, ledger, job_id: str) -> None:
    cluster.wait(lambda: all(t.terminal for t in job_tasks(app, job_id)), "the task's end to be recorded", 60)
    assert states(job_tasks(app, job_id)) == ["completed"], cluster.snapshot()
    assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "end"]


def test_a_run_that_ends_while_redis_is_away_is_recorded_as_it_ended(tmp_path):
    """Redis (scheduling state and RQ alike) is SIGKILLed while a batch command runs, and
    comes back from its append-only file 6 s later, after the command ended: the run is
    recorded completed, as it ended, and not run again."""
    ledger = tmp_path / "ledger"
    with own_redis_cluster(tmp_path, "away") as (server, app, cluster):
        cluster.agent("a", heartbeat="3.0")  # a TTL of 9 s: its tasks outlive the outage
        cluster.worker()
        job_id = _run_once(app, cluster, ledger, "sleep 2")
        server.kill()
        time.sleep(6)
        assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "end"]  # it ended
        server.start()
        _ran_once_and_completed(app, cluster, ledger, job_id)
        report = audit(app.store)
        assert report.ok, report.problems


def test_a_run_that_exits_while_redis_is_paused_past_the_ttl_is_recorded_as_it_ended(tmp_path):
    """Redis is paused (SIGSTOP) for longer than the heartbeat's TTL while a batch command
    that prints as it goes runs; it exits a second into the pause. The watchdog stops runs
    once the TTL has passed without a heartbeat, but this one was over by then: it is
    recorded completed, as it ended, and not run again (its exit is journalled at once, not
    after its output has been written to Redis)."""
    ledger = tmp_path / "ledger"
    with own_redis_cluster(tmp_path, "paused") as (server, app, cluster):
        cluster.agent("a", heartbeat="1.0")  # a TTL of 3 s, shorter than the pause
        cluster.worker()
        job_id = _run_once(app, cluster, ledger,
                           'i=0; while [ $i -lt 30 ]; do echo "line $i"; sleep 0.1; i=$((i+1)); done')
        time.sleep(1.5)  # output has been written to Redis at least once: the next write will wait
        server.pause()
        time.sleep(5)
        assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "end"]  # it ended
        server.resume()
        _ran_once_and_completed(app, cluster, ledger, job_id)

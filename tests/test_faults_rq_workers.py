"""An agent's RQ workers outlive a Redis outage (docs/reliability.md, "RQ workers wait
out Redis").

A real redis-server of the test's own, a real agent (the default heartbeat, two slots)
and a real scheduler worker. Two commands run; Redis is SIGKILLed and started again from
its append-only file 20 s later. Meanwhile one command ends (its work horse has RQ's
record of the job to write, and its RQ worker then asks Redis how the horse left it),
and the other runs on past the RQ workers' watch of their horses (each renews its
heartbeat in Redis every few seconds). On RQ's own worker loop either step meets the
outage, prints tracebacks and quits ("found an unhandled exception, quitting"), leaving a
horse that still runs without the process that watches it."""

from __future__ import annotations

import os
import time

import pytest

from agent_cluster import (SMALL, alive, job_tasks, namespace_pids, own_redis_cluster, parent, states,
                           submit)

OUTAGE_S = 20.0  # longer than the client's retries (2.5 s) at each step of a horse's end, and than a watch (5 s)
LONG_S = 16  # the long command outlasts the outage
SHORT_S = 3  # the short one ends during it
LIVENESS_S = 90.0  # a bound on "eventually", not a performance target


@pytest.mark.slow
def test_rq_workers_wait_out_a_redis_restart_while_their_commands_run(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    namespace = "rqaway"
    with own_redis_cluster(tmp_path, namespace) as (server, app, cluster):
        agent = cluster.agent("a", heartbeat="3.0")  # the default: a TTL of 9 s
        cluster.worker()

        def rq_workers() -> set[int]:
            return {pid for pid in namespace_pids(namespace, "rq-worker") if parent(pid) == agent.pid}

        workers = cluster.wait(lambda: len(rq_workers()) == 2 and rq_workers(), "the agent's two RQ workers")
        jobs = {}
        for name, seconds in (("long", LONG_S), ("short", SHORT_S)):
            script = f'echo start >> "{marks}/$SCHED_TASK_ID"; sleep {seconds}; echo end >> "{marks}/$SCHED_TASK_ID"'
            jobs[name] = submit(app, {"id": name, "type": "batch", "max_retries": 2, "restart_delay": 0,
                                      "resources": SMALL, "run": {"command": ["sh", "-c", script]}})
        cluster.wait(lambda: all(states(job_tasks(app, j)) == ["running"] for j in jobs.values())
                     and len(os.listdir(marks)) == 2, "both commands to run")
        horses = set(namespace_pids(namespace, "rq-worker")) - workers
        assert len(horses) == 2 and {parent(pid) for pid in horses} <= workers
        server.kill()
        time.sleep(OUTAGE_S)
        assert all(alive(pid) for pid in workers), cluster.logs_text()  # through the outage, not only after
        server.start()

        cluster.wait(lambda: all(t.terminal for j in jobs.values() for t in job_tasks(app, j)),
                     "both tasks to end", LIVENESS_S)
        for job_id in jobs.values():
            assert [(t.state, t.message) for t in job_tasks(app, job_id)] == [("completed", "exited with code 0")], \
                cluster.snapshot()
        ran = {name: (marks / name).read_text().splitlines() for name in os.listdir(marks)}
        assert ran == {"long.0": ["start", "end"], "short.0": ["start", "end"]}  # each ran once, to its end
        # The same two RQ workers run, the agent's, and nothing else of theirs: no horse left.
        cluster.wait(lambda: set(namespace_pids(namespace, "rq-worker")) == workers, "the horses to be gone")
        assert rq_workers() == workers
        log = cluster.logs_text(limit=10**6)
        assert "Traceback" not in log and "unhandled exception" not in log, log
        assert "Redis answers again" in log  # the outage was met while a horse ran, and waited out

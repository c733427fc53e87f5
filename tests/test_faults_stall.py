"""A stalled Redis does not kill running work (docs/reliability.md, "Redis stalls").

A real redis-server of the test's own, a real agent and a real scheduler worker: while
the agent runs commands, Redis is paused (SIGSTOP) for longer than the agent's heartbeat
TTL, so every heartbeat key expires on Redis's clock. The agent's own process is paused
with it and resumed a little after Redis (as on a host whose processes all hiccup), so that
the worker's heartbeat check, which runs about every second, does look while the expired
key is still missing: without the grace rule it takes the node down (checked by hand:
the test then fails, with tasks lost and commands started twice). With it, each command
starts exactly once and no task is lost or replaced.

The job keeps its tasks running while its agent cannot renew its heartbeat
(``disconnect: {stop_after: never}``): by default an agent stops them after a TTL
without a renewed heartbeat, as it cannot tell a stalled Redis from one it is cut off
from (docs/reliability.md, "No split brain"), and this test is about the scheduler's side."""

from __future__ import annotations

import os
import signal
import time

from scheduler.control import reconcile
from scheduler.model import parse_job
from scheduler.state.app import App

from test_agents import Cluster

HEARTBEAT_S = "2.0"  # TTL 6 s
STALL_S = 7.0  # longer than the TTL: every heartbeat expires during it
AGENT_LATE_S = 3.0  # the agent's process comes back this much after Redis (the checker looks meanwhile)
TASK_S = 14  # the commands outlast the stall
TASKS = 8
LIVENESS_S = 90.0  # a bound on "eventually", not a performance target


def test_a_redis_stall_longer_than_the_heartbeat_ttl_loses_nothing(own_redis, tmp_path):
    server, url = own_redis
    app = App(redis_url=url, namespace="stall")
    logs = tmp_path / "logs"
    logs.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    cluster = Cluster(app, url, "stall", logs)
    try:
        agent = cluster.agent("a1", cpu=str(TASKS), memory="4GiB", heartbeat=HEARTBEAT_S, slots=TASKS)
        cluster.worker()
        reconcile.submit(app.store, parse_job({
            "id": "work", "type": "batch", "replicas": TASKS, "resources": {"cpu": 1, "memory": "64MiB"},
            "disconnect": {"stop_after": "never"},
            "run": {"command": ["sh", "-c", f'echo started >> "{marks}/$SCHED_TASK_ID"; sleep {TASK_S}']}}))

        def tasks():
            return app.store.tasks(app.store.job_task_ids("work"))

        cluster.wait(lambda: sum(t.state == "running" for t in tasks()) == TASKS, "every task to run")
        os.kill(server.pid, signal.SIGSTOP)
        os.kill(agent.pid, signal.SIGSTOP)  # its main process, which beats (RQ's processes run on)
        time.sleep(STALL_S)
        os.kill(server.pid, signal.SIGCONT)
        time.sleep(AGENT_LATE_S)
        os.kill(agent.pid, signal.SIGCONT)
        cluster.wait(lambda: all(t.terminal for t in tasks()), "every task to end", LIVENESS_S)
        assert sorted(t.state for t in tasks()) == ["completed"] * TASKS
        starts = {name: (marks / name).read_text().splitlines() for name in os.listdir(marks)}
        assert starts == {f"work.{i}": ["started"] for i in range(TASKS)}, starts
        assert len(app.store.job_task_ids("work")) == TASKS  # nothing was lost and replaced
        assert app.store.get_node("a1").status == "ready"
    finally:
        cluster.close()
        app.close()


def test_the_watch_waits_a_ttl_of_answering_time_and_starts_over_after_a_gap():
    """The rule itself, on Redis times given by hand (ms)."""
    from scheduler.control.heartbeat import Watch

    watch = Watch(stall_gap_ms=2000)
    missing = [("a1", False, "ready", 3000), ("a2", True, "ready", 3000), ("a3", False, "down", 3000)]
    assert watch.lapsed(10_000, missing) == []  # first sight of a1 missing
    assert watch.lapsed(11_000, missing) == []
    assert watch.lapsed(12_000, missing) == []
    assert watch.lapsed(13_000, missing) == ["a1"]  # missing for its TTL of answering time
    # A gap longer than stall_gap_ms (the store did not answer): the wait starts over.
    watch = Watch(stall_gap_ms=2000)
    assert watch.lapsed(10_000, missing) == []
    assert watch.lapsed(11_000, missing) == []
    assert watch.lapsed(15_000, missing) == []  # 5 s after first sight, but across a 4 s gap
    assert watch.stalls == 1
    assert watch.lapsed(16_000, missing) == []
    assert watch.lapsed(18_000, missing) == ["a1"]
    # A beat in between clears it.
    watch = Watch(stall_gap_ms=2000)
    assert watch.lapsed(10_000, missing) == []
    assert watch.lapsed(11_000, [("a1", True, "ready", 3000)]) == []
    assert watch.lapsed(12_000, missing) == []
    assert watch.lapsed(14_000, missing) == []
    assert watch.lapsed(15_000, missing) == ["a1"]

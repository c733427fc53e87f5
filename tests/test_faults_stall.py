"""A stalled Redis does not kill running work (docs/reliability.md, "Redis stalls").

A real redis-server of the test's own, a real agent and a real scheduler worker. First
the scheduler's side: while the agent runs commands, Redis is paused (SIGSTOP) for longer
than the agent's heartbeat TTL, so every heartbeat key expires on Redis's clock. The
agent's own process is paused with it and resumed a little after Redis (as on a host
whose processes all hiccup), so that the worker's heartbeat check, which runs about every
second, does look while the expired key is still missing: without the grace rule it
takes the node down (checked by hand: the test then fails, with tasks lost and commands
started twice). With it, each command starts exactly once and no task is lost or
replaced. Then the agent's side, with the defaults a user gets: 16 commands outlive a
stall of 5 s and one of 15 s, each run once, frozen (paused) for no longer than the stall
while the agent could not renew its heartbeat, and resumed."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest

from scheduler.control import heartbeat, reconcile
from scheduler.control.audit import audit
from scheduler.model import parse_job
from scheduler.state.app import App

from agent_cluster import Cluster

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


COMMANDS = 16
STEPS = 75  # each command sleeps 75 times 0.2 s (past the TTL): a freeze pauses it between two


@pytest.mark.slow
def test_running_commands_outlive_redis_stalls_of_5_and_15_seconds_with_the_defaults(own_redis, tmp_path):
    """The agent runs with the default heartbeat (a TTL of 6 s) and its jobs with the
    default ``disconnect`` (freeze). Redis is paused for 5 s, then, with another 16
    commands, for 15 s: the commands the agent cannot vouch for once its heartbeat is a TTL
    old are frozen, and resumed once it beats again. Every command runs once and completes,
    no task is lost or replaced or counted as a fault, and each was frozen for at most the
    stall (plus the agent's next beat and sync): what it cost is time."""
    server, url = own_redis
    app = App(redis_url=url, namespace="stalls")
    logs, ledger = tmp_path / "logs", tmp_path / "ledger"
    logs.mkdir()
    cluster = Cluster(app, url, "stalls", logs)
    script = (f'echo "start $SCHED_TASK_ID $(date +%s.%N)" >> "{ledger}"; i=0; '
              f'while [ $i -lt {STEPS} ]; do sleep 0.2; i=$((i+1)); done; '
              f'echo "end $SCHED_TASK_ID $(date +%s.%N)" >> "{ledger}"')
    try:
        cluster.agent("a1", cpu=str(COMMANDS), memory="4GiB", heartbeat=str(heartbeat.DEFAULT_INTERVAL_S),
                      slots=COMMANDS)
        cluster.worker()
        report = []
        for stall_s in (5, 15):
            job_id = f"work{stall_s}"
            reconcile.submit(app.store, parse_job({"id": job_id, "type": "batch", "replicas": COMMANDS,
                                                   "max_retries": 0, "resources": {"cpu": 1, "memory": "64MiB"},
                                                   "run": {"command": ["sh", "-c", script]}}))

            def tasks():
                return app.store.tasks(app.store.job_task_ids(job_id))

            def lines():
                return [line.split() for line in ledger.read_text().splitlines()] if ledger.exists() else []

            cluster.wait(lambda: sum(t.state == "running" for t in tasks()) == COMMANDS
                         and sum(word == "start" and task.startswith(job_id + ".") for word, task, _ in lines())
                         == COMMANDS, f"the {COMMANDS} commands of {job_id} to run", LIVENESS_S)
            time.sleep(1)
            os.kill(server.pid, signal.SIGSTOP)
            time.sleep(stall_s)
            os.kill(server.pid, signal.SIGCONT)
            cluster.wait(lambda: all(t.terminal for t in tasks()), f"every task of {job_id} to end", LIVENESS_S)
            ended = tasks()
            assert [(t.state, t.message) for t in ended] == [("completed", "exited with code 0")] * COMMANDS, \
                cluster.snapshot()
            assert len(app.store.job_task_ids(job_id)) == COMMANDS  # nothing was lost and replaced
            mine = [(word, task) for word, task, _ in lines() if task.startswith(job_id + ".")]
            assert sorted(mine) == sorted([("end", t.id) for t in ended] + [("start", t.id) for t in ended])
            frozen = _frozen_s(cluster, "stalls", "a1", [t.id for t in ended])
            assert all(seconds <= stall_s + 2 * heartbeat.DEFAULT_INTERVAL_S for seconds in frozen.values()), frozen
            assert app.client.zcard(app.keys.faults(job_id)) == 0
            report.append(f"{stall_s} s stall: frozen {min(frozen.values()):.1f}-{max(frozen.values()):.1f} s")
        print("\n" + "; ".join(report))
        assert max(_frozen_s(cluster, "stalls", "a1", [f"work15.{i}" for i in range(COMMANDS)]).values()) > 0
        assert app.store.get_node("a1").status == "ready"
        assert audit(app.store).ok
    finally:
        cluster.close()
        app.close()


def _frozen_s(cluster: Cluster, namespace: str, node: str, tasks: list[str]) -> dict[str, float]:
    """Task -> seconds its run was frozen, from the node's journal."""
    path = os.path.join(cluster.env["SCHED_HOME"], "agents", namespace, node, "journal.sqlite3")
    journal = sqlite3.connect(path)
    try:
        marks = ",".join("?" * len(tasks))
        return dict(journal.execute(f"SELECT task, frozen_s FROM executions WHERE task IN ({marks})", tasks))
    finally:
        journal.close()


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

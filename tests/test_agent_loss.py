"""Agents lost, partitioned, frozen, paused or restarted, as real OS processes: their nodes
go down and their tasks are replaced (or kept, as the job's ``disconnect`` says), a run
is never kept beside its replacement beyond the bound, and an agent that comes back
stops or adopts what it left (docs/reliability.md, "Node agents"). The processes and
their cleanup: tests/agent_cluster.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from rq.job import Job

from scheduler.control.audit import audit
from scheduler.control.execution import rq_job_id
from scheduler.control.journal import Journal
from scheduler.model import LIVE_STATES

from agent_cluster import cluster  # noqa: F401 (the fixture)
from agent_cluster import (HEARTBEAT_S, OVERLAP_BOUND_S, SMALL, STOP_TIMEOUT_S, alive, command_pids, job_tasks, marks,
                           namespace_pids, node_is_empty, paused, rq_client, signal_pid, states, submit, ticking,
                           ticks)


# ----------------------------------------------------------------------------- node loss
def _two_tasks_running_on(cluster, app, directory: Path, job_id: str, node: str, namespace: str):
    def running():
        tasks = job_tasks(app, job_id)
        started = marks(directory)
        return (states(tasks) == ["running", "running"] and all(t.node == node for t in tasks)
                and all(rq_job_id(namespace, t.id) in started for t in tasks))

    cluster.wait(running, f"both tasks running on {node}")
    return job_tasks(app, job_id)


def _replaced_on(cluster, app, job_id: str, lost_ids: list[str], node: str) -> list[dict]:
    def done():
        tasks = {t.id: t for t in job_tasks(app, job_id)}
        live = [t for t in tasks.values() if t.state in LIVE_STATES]
        return (all(tasks[i].state == "lost" for i in lost_ids)
                and len(live) == 2 and all(t.node == node and t.state == "running" for t in live)
                and live)

    return cluster.wait(done, f"the lost tasks to be replaced and running on {node}")


def _service_on_a(cluster, app, tmp_path, namespace):
    directory = tmp_path / "marks"
    directory.mkdir()
    cluster.agent("a", heartbeat=HEARTBEAT_S)
    cluster.worker()
    job_id = submit(app, {"id": "svc", "replicas": 2, "restart_delay": 0.1, "resources": SMALL,
                          "run": {"func": "agent_tasks:record_and_sleep", "args": [str(directory), 60]}})
    originals = _two_tasks_running_on(cluster, app, directory, job_id, "a", namespace)
    cluster.agent("b")
    return directory, job_id, [t.id for t in originals]


def test_killed_agent_node_goes_down_and_its_tasks_are_replaced(cluster, app, tmp_path, namespace):
    directory, job_id, lost_ids = _service_on_a(cluster, app, tmp_path, namespace)
    agent_a = cluster.processes[0][1]
    os.kill(agent_a.pid, signal.SIGKILL)  # the agent process itself: its heartbeat stops
    agent_a.wait(timeout=STOP_TIMEOUT_S)

    cluster.wait(lambda: app.store.get_node("a").status == "down", "node a to be marked down")
    replacements = _replaced_on(cluster, app, job_id, lost_ids, "b")
    for task_id in lost_ids:
        task = app.store.get_task(task_id)
        assert task.state == "lost" and task.message == "node a is down", task
    assert sorted(t.id for t in replacements) != sorted(lost_ids)
    assert node_is_empty(app, "a")
    assert app.store.node_task_ids("a") == []
    report = audit(app.store)
    assert report.ok, report.problems


def test_restarted_agent_does_not_keep_running_replaced_tasks(cluster, app, tmp_path, namespace):
    """The agent process dies (SIGKILL) while its RQ workers and work horses live on; its
    tasks are lost and replaced on b. An agent started again under the same name brings
    the node back, and the lost tasks stay lost and stop running there."""
    directory, job_id, lost_ids = _service_on_a(cluster, app, tmp_path, namespace)
    agent_a = cluster.processes[0][1]
    os.kill(agent_a.pid, signal.SIGKILL)
    agent_a.wait(timeout=STOP_TIMEOUT_S)
    cluster.wait(lambda: app.store.get_node("a").status == "down", "node a to be marked down")
    replacements = _replaced_on(cluster, app, job_id, lost_ids, "b")

    cluster.agent("a", heartbeat=HEARTBEAT_S)  # the same name comes back
    assert app.store.get_node("a").status == "ready"
    horses = {task_id: marks(directory)[rq_job_id(namespace, task_id)] for task_id in lost_ids}
    cluster.wait(lambda: not any(alive(pid) for pids in horses.values() for pid in pids),
               f"the work horses of the lost tasks {horses} to stop")
    time.sleep(0.5)  # give the returned agent a few sync rounds to misbehave
    started = marks(directory)
    for task_id in lost_ids:
        task = app.store.get_task(task_id)
        assert task.state == "lost", task
        assert len(started[rq_job_id(namespace, task_id)]) == 1, "a lost task was started again"
    assert app.store.node_task_ids("a") == []
    live = [t for t in job_tasks(app, job_id) if t.state in LIVE_STATES]
    assert sorted(t.id for t in live) == sorted(t.id for t in replacements)
    assert all(t.node == "b" for t in live)
    report = audit(app.store)
    assert report.ok, report.problems


def test_a_killed_agent_costs_its_task_no_retry_and_its_node_no_fault(cluster, app, tmp_path):
    """An agent is SIGKILLed while a batch task's second try runs on its node (the first
    failed, using the job's one retry): the node is declared down and the task ends lost,
    not failed; it is replaced once, with its retries unchanged, and the replacement runs
    to completion on b; only the first, real failure is a fault of the node. The run on the
    dead agent's node was frozen by its work horse, never finished, and is killed by an
    agent started again under the node's name."""
    ledger, marker = tmp_path / "ledger", tmp_path / "failed-once"
    agent = cluster.agent("a", heartbeat=HEARTBEAT_S)
    cluster.worker()
    script = (f'if [ ! -e "{marker}" ]; then touch "{marker}"; exit 3; fi; '
              f'echo "start $SCHED_TASK_ID 0" >> "{ledger}"; i=0; while [ $i -lt 40 ]; do sleep 0.1; '
              f'i=$((i+1)); done; echo "end $SCHED_TASK_ID 0" >> "{ledger}"')
    job_id = submit(app, {"id": "crunch", "type": "batch", "max_retries": 1, "restart_delay": 0, "resources": SMALL,
                          "run": {"command": ["sh", "-c", script]}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["failed", "running"] and ledger.exists(),
                 "the first try to fail and the second to run on a")
    first, second = job_tasks(app, job_id)
    assert second.retries == 1 and second.node == "a"
    cluster.agent("b")
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=STOP_TIMEOUT_S)
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["failed", "lost", "completed"],
                 "the second try to be lost and its replacement to complete on b", 30)
    third = job_tasks(app, job_id)[2]
    assert app.store.get_task(second.id).message == "node a is down"
    assert (third.node, third.retries) == ("b", 1)
    assert app.client.hget(app.keys.task(third.id), "replaces") == second.id
    assert app.client.zrange(app.keys.faults(job_id), 0, -1) == [f"a|{first.id}|{first.version}"]
    left = command_pids(second.id)
    assert left and all(paused(pid) for pid in left), "the dead agent's run was not frozen"
    cluster.agent("a", heartbeat=HEARTBEAT_S)
    cluster.wait(lambda: not command_pids(second.id), "the returned agent to kill the frozen run")
    words = [line.split()[:2] for line in ledger.read_text().splitlines()]
    assert words == [["start", second.id], ["start", third.id], ["end", third.id]], words
    report = audit(app.store)
    assert report.ok, report.problems


@pytest.mark.slow
def test_an_agent_started_again_resumes_the_runs_it_left_frozen(cluster, app, tmp_path, namespace):
    """The agent is SIGKILLed while a command (with a timeout) and a function run, and no
    scheduler worker runs meanwhile (the node cannot be declared down): a TTL after the
    agent's last heartbeat their work horses freeze them, the command's group and the
    function's horse. An agent started again under the node's name adopts them and resumes
    them; both complete, once, the command past its timeout in wall time, since the time
    it was frozen does not count."""
    ledger = tmp_path / "ledger"
    agent = cluster.agent("a", heartbeat="0.5")  # a TTL of 1.5 s
    worker = cluster.worker()
    script = (f'echo "start $SCHED_TASK_ID 0" >> "{ledger}"; i=0; while [ $i -lt 40 ]; do sleep 0.1; '
              f'i=$((i+1)); done; echo "end $SCHED_TASK_ID 0" >> "{ledger}"')
    submit(app, {"id": "cmd", "type": "batch", "max_retries": 0, "resources": SMALL,
                 "run": {"command": ["sh", "-c", script], "timeout": 6}})
    submit(app, {"id": "fn", "type": "batch", "max_retries": 0, "resources": SMALL,
                 "run": {"func": "agent_tasks:steps", "args": [str(ledger), "fn.0", 40, 0.1]}})
    cluster.wait(lambda: [t.state for t in app.store.tasks(["cmd.0", "fn.0"])] == ["running", "running"]
                 and len(ticks(ledger)) == 2, "both to run")
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=STOP_TIMEOUT_S)
    began = time.monotonic()
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=STOP_TIMEOUT_S)
    journal = Journal(Path(cluster.env["SCHED_HOME"]) / "agents" / namespace / "a" / "journal.sqlite3")
    horse = journal.get("fn.0").horse.pid  # the function runs in it
    cluster.wait(lambda: all(paused(pid) for pid in command_pids("cmd.0")) and paused(horse),
                 "the command and the function's work horse to be frozen")
    time.sleep(3)
    cluster.agent("a", heartbeat="0.5")
    cluster.wait(lambda: [t.state for t in app.store.tasks(["cmd.0", "fn.0"])] == ["completed", "completed"],
                 "both to complete", 30)
    assert time.monotonic() - began > 6  # the command's timeout, in wall time
    cmd, fn = app.store.tasks(["cmd.0", "fn.0"])
    assert (cmd.message, fn.message) == ("exited with code 0", "agent_tasks:steps returned '40 steps'")
    words = sorted(line.split()[:2] for line in ledger.read_text().splitlines())
    assert words == [["end", "cmd.0"], ["end", "fn.0"], ["start", "cmd.0"], ["start", "fn.0"]], words
    assert journal.get("cmd.0").frozen_s >= 3 and journal.get("fn.0").frozen_s >= 3


def test_a_node_frozen_past_two_ttls_and_thawed_stops_its_run_within_the_bound(cluster, app, tmp_path, namespace):
    """Every process of node a (agent, RQ workers, work horse, command) is paused, as a
    frozen machine: the node is declared down and the task replaced on b. When a thaws, its
    run must not go on beside the replacement: its watchdog's first look freezes it (the
    heartbeat is long overdue), and the agent, back on Redis, kills it. The two runs of the
    slot wrote lines at the same time for at most the bound (reliability.md, "No split
    brain")."""
    ledger = tmp_path / "ledger"
    cluster.agent("a", heartbeat=HEARTBEAT_S)
    cluster.worker()
    job_id = submit(app, {"id": "slot", "replicas": 1, "resources": SMALL, "run": {"command": ticking(ledger)}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"], "the task to run on a")
    original = job_tasks(app, job_id)[0].id
    cluster.wait(lambda: original in ticks(ledger), "its command to tick")
    cluster.agent("b")
    frozen = namespace_pids(namespace, "agent", "a") + command_pids(original)
    for pid in frozen:
        signal_pid(pid, signal.SIGSTOP)
    try:
        replacement = _replaced_on_b(cluster, app, job_id, original)
        cluster.wait(lambda: replacement in ticks(ledger), "the replacement's command to tick")
        time.sleep(0.5)
    finally:
        for pid in frozen:
            signal_pid(pid, signal.SIGCONT)
    cluster.wait(lambda: not command_pids(original), "the thawed node's agent to kill the lost task's command")
    seen = ticks(ledger)
    beside = [at for at in seen[original] if at >= min(seen[replacement])]
    overlap = max(beside) - min(beside) + 0.05 if beside else 0.0  # plus one tick of the command
    print(f"\noverlap {overlap:.3f} s ({len(beside)} lines of the thawed run beside its replacement)")
    assert overlap <= OVERLAP_BOUND_S
    task = app.store.get_task(original)
    assert task.state == "lost" and task.message == "node a is down", task


def test_partitioned_node_comes_back_and_stops_replaced_tasks(cluster, app, tmp_path, namespace, redis_url):
    """Every process of agent a is paused (a network partition, as far as Redis can tell):
    the node goes down and its tasks are replaced. When it resumes, the node is ready
    again and its agent stops the RQ jobs of the tasks it lost."""
    directory, job_id, lost_ids = _service_on_a(cluster, app, tmp_path, namespace)
    paused = namespace_pids(namespace, "agent", "a")
    assert len(paused) >= 3  # the agent, its RQ workers and the two work horses
    for pid in paused:
        signal_pid(pid, signal.SIGSTOP)
    try:
        cluster.wait(lambda: app.store.get_node("a").status == "down", "node a to be marked down")
        replacements = _replaced_on(cluster, app, job_id, lost_ids, "b")
    finally:
        for pid in paused:
            signal_pid(pid, signal.SIGCONT)

    cluster.wait(lambda: app.store.get_node("a").status == "ready", "node a to be ready again")
    horses = [pid for task_id in lost_ids for pid in marks(directory)[rq_job_id(namespace, task_id)]]
    cluster.wait(lambda: not any(alive(pid) for pid in horses), "the lost tasks' work horses to be stopped")
    connection = rq_client(redis_url)
    for task_id in lost_ids:
        job = Job.fetch(rq_job_id(namespace, task_id), connection=connection)
        cluster.wait(lambda: job.get_status(refresh=True) in ("stopped", "failed", "canceled"),
                   f"the RQ job of {task_id} to end")
        task = app.store.get_task(task_id)
        assert task.state == "lost", task
    live = [t for t in job_tasks(app, job_id) if t.state in LIVE_STATES]
    assert sorted(t.id for t in live) == sorted(t.id for t in replacements)
    assert all(t.node == "b" and t.state == "running" for t in live)
    assert app.store.node_task_ids("a") == []
    report = audit(app.store)
    assert report.ok, report.problems


def test_task_of_a_crashed_agent_does_not_stay_running_after_a_quick_restart(cluster, app, tmp_path, namespace):
    directory = tmp_path / "marks"
    directory.mkdir()
    cluster.agent("a", heartbeat="2.0")  # 6 s TTL: the node does not go down during the restart
    cluster.worker()
    job_id = submit(app, {"id": "once", "type": "batch", "max_retries": 1, "restart_delay": 0, "resources": SMALL,
                          "run": {"func": "agent_tasks:record_and_sleep", "args": [str(directory), 1]}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"] and marks(directory), "the task to run")
    task_id = job_tasks(app, job_id)[0].id
    for pid in namespace_pids(namespace, "agent", "a"):  # the agent, its RQ workers, the work horse
        signal_pid(pid, signal.SIGKILL)
    cluster.agent("a", heartbeat="2.0")
    cluster.wait(lambda: app.store.get_task(task_id).state != "running",
                 "the task whose work horse died to stop being 'running'", timeout_s=10)
    cluster.wait(lambda: "completed" in states(job_tasks(app, job_id)), "the job to complete")


def test_an_end_lost_in_a_failover_is_recorded_again_from_the_journal(cluster, app, tmp_path, namespace, redis_url):
    """The state goes back to a moment when the task was running (as a replica promoted
    before it received the task's end would have it): the agent sees the task running
    while the node's journal says its run has ended, and records the end again; nothing
    runs twice."""
    directory = tmp_path / "marks"
    directory.mkdir()
    cluster.agent("a")
    cluster.worker()
    job_id = submit(app, {"id": "once", "type": "batch", "max_retries": 0, "resources": SMALL,
                          "run": {"func": "agent_tasks:record_and_sleep", "args": [str(directory), 1]}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"] and marks(directory), "the task to run")
    raw = rq_client(redis_url)
    pattern = f"sched:{{{namespace}}}:*"
    before = {key: raw.dump(key) for key in raw.scan_iter(match=pattern, count=1000)}
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["completed"], "the task to complete")
    with raw.pipeline(transaction=True) as pipe:  # back to the moment it ran, in one step
        for key in raw.scan_iter(match=pattern, count=1000):
            if key not in before:
                pipe.delete(key)
        for key, value in before.items():
            pipe.restore(key, 0, value, replace=True)
        pipe.execute()
    assert states(job_tasks(app, job_id)) == ["running"]
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["completed"], "the agent to record the end again")
    assert node_is_empty(app, "a")
    assert len(marks(directory)) == 1 and len(next(iter(marks(directory).values()))) == 1  # it ran once
    report = audit(app.store)
    assert report.ok, report.problems


def _replaced_on_b(cluster, app, job_id: str, original: str) -> str:
    def replaced():
        tasks = {t.id: t for t in job_tasks(app, job_id)}
        live = [t for t in tasks.values() if t.state == "running" and t.node == "b"]
        return tasks[original].terminal and live and live[0].id

    return cluster.wait(replaced, "a's task to end and a replacement to run on b", 30)


@pytest.mark.parametrize("on_loss", ["freeze", "stop"])
def test_an_agent_paused_past_its_ttl_freezes_its_task_before_the_replacement_starts(cluster, app, tmp_path,
                                                                                      on_loss):
    """Only the agent's own process is paused (SIGSTOP): its work horse and command run on,
    as they would on a machine whose agent died. Its heartbeat lapses, and the task is
    replaced on b: the original's command must have done its last tick before the
    replacement's first. By default (``freeze``) the work horse's watchdog pauses the
    command a TTL after the last heartbeat, the node is declared down and the task lost;
    once the agent is back it kills the frozen command rather than resume it. With
    ``on_loss: stop`` the watchdog kills it, and the task ends lost (its agent's loss, not
    a failure of its own)."""
    ledger = tmp_path / "ledger"
    agent = cluster.agent("a", heartbeat="0.5")  # a TTL of 1.5 s
    cluster.worker()
    job_id = submit(app, {"id": "slot", "replicas": 1, "resources": SMALL, "run": {"command": ticking(ledger)},
                          "disconnect": {"on_loss": on_loss}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"], "the task to run on a")
    original = job_tasks(app, job_id)[0].id
    cluster.wait(lambda: original in ticks(ledger), "its command to tick")
    cluster.agent("b")
    signal_pid(agent.pid, signal.SIGSTOP)
    try:
        replacement = _replaced_on_b(cluster, app, job_id, original)
        cluster.wait(lambda: replacement in ticks(ledger), "the replacement's command to tick")
        left = command_pids(original)
        if on_loss == "freeze":
            assert left and all(paused(pid) for pid in left), [(pid, paused(pid)) for pid in left]
        else:
            assert not left
    finally:
        signal_pid(agent.pid, signal.SIGCONT)
    cluster.wait(lambda: not command_pids(original), "the returned agent to kill the lost task's command")
    seen = ticks(ledger)
    assert max(seen[original]) < min(seen[replacement]), "the two runs of the slot overlapped"
    task = app.store.get_task(original)
    assert task.state == "lost", task
    assert ("without a heartbeat" if on_loss == "stop" else "node a is down") in task.message, task
    assert job_tasks(app, job_id)[1].retries == 0 and app.client.zcard(app.keys.faults(job_id)) == 0


def test_a_job_that_keeps_running_when_disconnected_overlaps_until_the_agent_is_back(cluster, app, tmp_path):
    """The same, for a job that prefers availability (``disconnect: {stop_after: never}``):
    its command runs on beside the replacement while the agent is paused, and stops once
    the agent is back and sees the task lost."""
    ledger = tmp_path / "ledger"
    agent = cluster.agent("a", heartbeat="0.5")
    cluster.worker()
    job_id = submit(app, {"id": "slot", "replicas": 1, "resources": SMALL, "run": {"command": ticking(ledger)},
                          "disconnect": {"stop_after": "never"}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"], "the task to run on a")
    original = job_tasks(app, job_id)[0].id
    cluster.agent("b")
    signal_pid(agent.pid, signal.SIGSTOP)
    try:
        replacement = _replaced_on_b(cluster, app, job_id, original)
        cluster.wait(lambda: replacement in ticks(ledger), "the replacement's command to tick")
        assert app.store.get_task(original).state == "lost"
        assert command_pids(original), "the original stopped although its job keeps running when disconnected"
        # Both run: the original ticks after its replacement's first tick (waited for, not
        # sampled once, so a busy machine's scheduling cannot hide it).
        cluster.wait(lambda: max(ticks(ledger)[original]) > min(ticks(ledger)[replacement]),
                     "the original to tick beside its replacement")
    finally:
        signal_pid(agent.pid, signal.SIGCONT)
    cluster.wait(lambda: not command_pids(original), "the returned agent to stop the lost task's command")


def test_an_agent_restarted_at_once_adopts_the_run_it_left(cluster, app, tmp_path):
    """The agent process is SIGKILLed and started again under the same name before its
    heartbeat lapses: the run it left (its work horse and command live on) is adopted,
    not run again, and recorded as it ends."""
    ledger = tmp_path / "ledger"
    agent = cluster.agent("a", heartbeat="2.0")
    cluster.worker()
    job_id = submit(app, {"id": "long", "type": "batch", "max_retries": 0, "resources": SMALL,
                          "run": {"command": ["sh", "-c", f'echo "start $SCHED_TASK_ID 0" >> "{ledger}"; sleep 3; '
                                                          f'echo "end $SCHED_TASK_ID 0" >> "{ledger}"']}})
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["running"] and ledger.exists(), "the task to run")
    task_id = job_tasks(app, job_id)[0].id
    left = namespace_pids(app.keys.namespace, "rq-worker")
    signal_pid(agent.pid, signal.SIGKILL)
    agent.wait(timeout=STOP_TIMEOUT_S)
    cluster.agent("a", heartbeat="2.0")
    cluster.wait(lambda: not any(alive(pid) for pid in left), "the RQ workers the dead agent left to be stopped")
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["completed"], "the adopted run to be recorded")
    assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "end"]
    assert app.store.get_task(task_id).message == "exited with code 0"

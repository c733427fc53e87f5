"""Node agents and scheduler workers as real OS processes, running tasks through real RQ.

Every agent and worker is a ``sched`` subprocess in its own session, started by the
``cluster`` fixture, which always stops them (SIGTERM, then SIGKILL for anything left,
including the RQ workers and work horses an agent forked). Waits are liveness bounds
(poll until a condition holds, fail after LIVENESS_S), never speed thresholds.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from scheduler import Client
from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.execution import rq_job_id
from scheduler.control.journal import Journal
from scheduler.model import LIVE_STATES, make_node, parse_job

from restartable_redis import RestartableRedis
from scheduler.state.app import App
from worker_harness import wait_until

SCHED = str(Path(sys.executable).parent / "sched")
TESTS_DIR = str(Path(__file__).resolve().parent)
HEARTBEAT_S = "0.2"  # agents whose loss a test waits for: down 0.6 s after their last beat
OVERLAP_BOUND_S = 1.0  # the longest two runs of one slot may overlap (docs/reliability.md, "No split brain")
STEADY_HEARTBEAT_S = "1.0"  # the others: a busy machine must not take them down by accident
LIVENESS_S = 15.0  # a bound on "eventually", not a performance target
STOP_TIMEOUT_S = 10.0


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def paused(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def namespace_pids(namespace: str, *words: str) -> list[int]:
    """Live processes whose command line has ``--namespace NAMESPACE`` and every one of
    ``words`` as an argument: agents, their forked RQ workers and work horses (which keep
    the agent's command line), and scheduler workers."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        argv = _cmdline(int(entry))
        if any(a == "--namespace" and b == namespace for a, b in zip(argv, argv[1:])) \
                and all(word in argv for word in words) and alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


class Cluster:
    """Agents and workers for one test's namespace, as `sched` subprocesses."""

    def __init__(self, app, redis_url: str, namespace: str, logs: Path):
        self.app, self.url, self.namespace, self.logs = app, redis_url, namespace, logs
        self.processes: list[tuple[str, subprocess.Popen]] = []
        path = os.environ.get("PYTHONPATH")
        self.env = dict(os.environ, PYTHONPATH=TESTS_DIR + (os.pathsep + path if path else ""))
        for name in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE"):
            self.env.pop(name, None)
        self.env["SCHED_HOME"] = str(logs.parent / "home")  # the agents' state folders (their journals)

    def _start(self, label: str, *args: str) -> subprocess.Popen:
        log = self.logs / f"{len(self.processes):02d}-{label}.log"
        with open(log, "w") as out:
            process = subprocess.Popen([SCHED, "--redis-url", self.url, "--namespace", self.namespace, *args],
                                       stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)
        self.processes.append((label, process))
        return process

    def agent(self, name: str, *, cpu: str = "2", memory: str = "1GiB", labels=(), slots: int | None = 2,
              heartbeat: str = STEADY_HEARTBEAT_S, wait: bool = True, extra=()) -> subprocess.Popen:
        """``slots`` None: the agent's default (from ``cpu``)."""
        args = ["agent", name, "--cpu", cpu, "--memory", memory, "--heartbeat", heartbeat,
                *(["--slots", str(slots)] if slots is not None else []), *extra]
        for label in labels:
            args += ["--label", label]
        process = self._start(f"agent-{name}", *args)
        if wait:
            store, keys = self.app.store, self.app.keys

            def up():
                assert process.poll() is None, f"agent {name} exited with {process.returncode}:\n{self.logs_text()}"
                return (store.client.exists(keys.heartbeat(name))
                        and store.client.hget(keys.node(name), "status") == "ready")

            wait_until(up, LIVENESS_S, f"agent {name} to register and heartbeat", 0.05)
        return process

    def worker(self) -> subprocess.Popen:
        return self._start("worker", "worker")

    def wait(self, predicate, what: str, timeout_s: float = LIVENESS_S):
        """wait_until, showing the cluster's state and the processes' logs on a timeout."""
        return wait_until(predicate, timeout_s, what, 0.05, detail=self.snapshot)

    def snapshot(self) -> str:
        store = self.app.store
        tasks = [(t.id, t.state, t.node, t.message) for t in store.tasks(store.all_task_ids())]
        nodes = [(n.name, n.status, n.availability, n.tasks) for n in store.nodes()]
        return f"tasks: {tasks}\nnodes: {nodes}\n{self.logs_text()}"

    def logs_text(self, limit: int = 4000) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace")
            parts.append(f"--- {log.name}\n{text[-limit:]}")
        return "\n".join(parts)

    def close(self) -> None:
        # Stop every job first: agents then stop their RQ jobs, so their RQ workers'
        # warm shutdown does not wait for a long task.
        try:
            for job_id in self.app.store.job_ids():
                reconcile.stop(self.app.store, job_id)
        except redis.RedisError:
            pass
        for pid in namespace_pids(self.namespace):
            _signal(pid, signal.SIGCONT)  # anything a test paused
        for _, process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for _, process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        ours = os.getpgid(0)
        for _, process in self.processes:
            if process.poll() is None:
                _killpg(process.pid, ours)
                process.kill()
        for pid in namespace_pids(self.namespace):
            _killpg(pid, ours)
            _signal(pid, signal.SIGKILL)
        for _, process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            client = self.app.client
            for key in client.scan_iter(match=f"rq:*sched-{self.namespace}-*", count=1000):
                client.delete(key)
        except redis.RedisError:
            pass


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _killpg(pid: int, ours: int) -> None:
    try:
        group = os.getpgid(pid)
        if group != ours:
            os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture
def cluster(app, redis_url, namespace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    c = Cluster(app, redis_url, namespace, logs)
    try:
        yield c
    finally:
        c.close()


# ----------------------------------------------------------------------------- helpers
def submit(app, raw: dict) -> str:
    return reconcile.submit(app.store, parse_job(raw))["id"]


def job_tasks(app, job_id: str) -> list[dict]:
    return sorted(app.store.tasks(app.store.job_task_ids(job_id)), key=lambda t: int(t.index))


def states(tasks) -> list[str]:
    return [t.state for t in tasks]


def node_is_empty(app, name: str) -> bool:
    node = app.store.get_node(name)
    return node.tasks == 0 and all(v == 0 for v in node.allocated.values()) and not node.ports


def rq_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)  # RQ reads bytes


def marks(directory: Path) -> dict[str, list[int]]:
    """RQ job id -> pids of the work horses that started it (written by agent_tasks)."""
    out: dict[str, list[int]] = {}
    for entry in directory.iterdir():
        if entry.name.endswith(".tmp"):
            continue
        job_id, _, pid = entry.name.rpartition(".")
        out.setdefault(job_id, []).append(int(pid))
    return out


def command_pids(task_id: str) -> list[int]:
    """Live processes of a task's command: those with ``SCHED_TASK_ID=<task>`` in their
    environment (the command and whatever it started)."""
    wanted = f"SCHED_TASK_ID={task_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if wanted in environ and alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def ticks(ledger: Path) -> dict[str, list[float]]:
    """Task id -> the times its command wrote ``<word> <task> <time>`` lines to ``ledger``."""
    seen: dict[str, list[float]] = {}
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                seen.setdefault(parts[1], []).append(float(parts[2]))
    return seen


def ticking(ledger: Path) -> list[str]:
    """A command that writes a line to ``ledger`` every 50 ms until it is stopped."""
    return ["sh", "-c", f'while true; do echo "tick $SCHED_TASK_ID $(date +%s.%N)" >> "{ledger}"; sleep 0.05; done']


def event_states(pubsub, task_id: str, settle_s: float = 0.3) -> list[str]:
    """States published for one task, in order, from an already subscribed pubsub."""
    seen = []
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is None:
            continue
        event = json.loads(message["data"])
        if event.get("type") == "task" and event.get("id") == task_id:
            seen.append(event["state"])
        deadline = time.monotonic() + settle_s
    return seen


SMALL = {"cpu": 0.5, "memory": "64MiB"}


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
        _signal(pid, signal.SIGSTOP)
    try:
        replacement = _replaced_on_b(cluster, app, job_id, original)
        cluster.wait(lambda: replacement in ticks(ledger), "the replacement's command to tick")
        time.sleep(0.5)
    finally:
        for pid in frozen:
            _signal(pid, signal.SIGCONT)
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
        _signal(pid, signal.SIGSTOP)
    try:
        cluster.wait(lambda: app.store.get_node("a").status == "down", "node a to be marked down")
        replacements = _replaced_on(cluster, app, job_id, lost_ids, "b")
    finally:
        for pid in paused:
            _signal(pid, signal.SIGCONT)

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
        _signal(pid, signal.SIGKILL)
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
    assert "rq-worker" in _cmdline(rq_worker) or "agent" in _cmdline(rq_worker), _cmdline(rq_worker)
    _signal(rq_worker, signal.SIGKILL)
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


@contextmanager
def own_redis_cluster(tmp_path, namespace: str):
    """(server, app, cluster) on a redis-server of the test's own, which it may kill or pause."""
    server = RestartableRedis(tmp_path / "redis")
    server.start()
    app = App(redis_url=server.url, namespace=namespace)
    logs = tmp_path / "logs"
    logs.mkdir()
    cluster = Cluster(app, server.url, namespace, logs)
    try:
        yield server, app, cluster
    finally:
        cluster.close()
        app.close()
        server.stop()


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
    _signal(agent.pid, signal.SIGSTOP)
    try:
        replacement = _replaced_on_b(cluster, app, job_id, original)
        cluster.wait(lambda: replacement in ticks(ledger), "the replacement's command to tick")
        left = command_pids(original)
        if on_loss == "freeze":
            assert left and all(paused(pid) for pid in left), [(pid, paused(pid)) for pid in left]
        else:
            assert not left
    finally:
        _signal(agent.pid, signal.SIGCONT)
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
    _signal(agent.pid, signal.SIGSTOP)
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
        _signal(agent.pid, signal.SIGCONT)
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
    _signal(agent.pid, signal.SIGKILL)
    agent.wait(timeout=STOP_TIMEOUT_S)
    cluster.agent("a", heartbeat="2.0")
    cluster.wait(lambda: not any(alive(pid) for pid in left), "the RQ workers the dead agent left to be stopped")
    cluster.wait(lambda: states(job_tasks(app, job_id)) == ["completed"], "the adopted run to be recorded")
    assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "end"]
    assert app.store.get_task(task_id).message == "exited with code 0"

"""Node agents and scheduler workers as real OS processes, for the tests that run tasks
through real RQ (tests/test_agents.py, test_agent_loss.py, test_agent_faults.py and others).

Every agent and worker is a ``sched`` subprocess in its own session, started by the
``cluster`` fixture (or :func:`own_redis_cluster`), which always stops them (SIGTERM,
then SIGKILL for anything left, including the RQ workers and work horses an agent
forked). Waits are liveness bounds (poll until a condition holds, fail after
LIVENESS_S), never speed thresholds.
"""

from __future__ import annotations

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

from scheduler.control import reconcile
from scheduler.model import parse_job

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


def cmdline(pid: int) -> list[str]:
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
        argv = cmdline(int(entry))
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
            signal_pid(pid, signal.SIGCONT)  # anything a test paused
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
            signal_pid(pid, signal.SIGKILL)
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


def signal_pid(pid: int, sig) -> None:
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

"""A randomized fault soak of the execution half, as Jepsen runs them (slow: about 3 minutes).

Real processes: a redis-server with AOF and ``appendfsync always`` (scheduling state and
RQ alike), 3 node agents (heartbeat 1 s, so a TTL of 3 s), 2 scheduler workers. A
workload thread submits batch jobs and scales a service up and down; every task runs
``soak_command.py``, which appends ``start``/``tick``/``end`` lines with its task id to a
ledger. Every 4-10 s a fault, drawn from a seeded random generator:

- SIGKILL a scheduler worker (another is started);
- SIGKILL an agent's own process (started again 0.5-4 s later, under the same name);
- SIGKILL every process of a node: agent, RQ workers, work horses, commands (the agent
  is started again 1-4 s later);
- SIGKILL one RQ worker or work horse of a node;
- SIGSTOP Redis for 2-8 s;
- SIGKILL Redis, started again from its AOF 0.5-3 s later;
- SIGSTOP every process of a node for 4-9 s (past its TTL; often past the two TTLs after
  which the node is declared down and its tasks replaced).

A sampler thread reads the state every half second. Once the faults stop, everything is
made whole again (paused processes resumed, the dead started) and the soak waits for the
cluster to converge (the state as below, and no command left running for an ended task),
then judges, from the commands' own ledger: nothing lost or stuck (every batch job
completed its replicas, the service runs exactly its replicas, nothing pending); no task
id executed twice; a completed task ran once (one start, one end); **no command ran
twice** (a run that started and did not complete, so that its slot ran again) unless a
documented fault on its node during the run explains it (docs/reliability.md, the fault
table): its node declared down after its agent was killed or the whole node was killed or
paused, or its work horse killed with or without the rest of the node; a pause, a restart
of Redis or a scheduler worker's death explains none (runs are frozen, not stopped, while
their agent cannot renew its heartbeat); a run that wrote its end is recorded completed,
unless it was killed with its work horse or wrote its end after its node had been
declared down (a paused node's run resumes for an instant before its watchdog freezes it
again: the overlap below bounds that); no command runs for an ended task; the service
never had more open tasks than its replicas, and no node was overcommitted, in any
sample; the audit is clean; two runs of one slot (a task and the task that replaced it)
overlapped by at most ``OVERLAP_BOUND_S`` (docs/reliability.md).

The seed is printed; ``SCHED_SOAK_SEED=<seed>`` replays its faults and workload (the
processes' timing is the machine's), ``SCHED_SOAK_SEED=random`` draws a new one, and
without it the suite runs ``DEFAULT_SEED``, one of the seeds docs/reliability.md lists
as passed. ``SCHED_SOAK_SECONDS`` sets how long faults are injected (default 90).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
import redis

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import LIVE_STATES, parse_job
from scheduler.model.errors import SchedError
from scheduler.state.app import App

from restartable_redis import RestartableRedis
from agent_cluster import Cluster, alive, cmdline, namespace_pids, parent

SEED_ENV, SECONDS_ENV = "SCHED_SOAK_SEED", "SCHED_SOAK_SECONDS"
DEFAULT_SEED = 2
FAULT_S = float(os.environ.get(SECONDS_ENV) or 90)
AGENTS = ("n1", "n2", "n3")
HEARTBEAT_S = 1.0
TTL_S = 3 * HEARTBEAT_S
SLOTS = 4
SERVICE = "svc"
OVERLAP_BOUND_S = 1.0  # the longest two runs of one slot may overlap (docs/reliability.md, "No split brain")
CONVERGE_S = 150.0  # a bound on "eventually", not a performance target
COMMAND = str(Path(__file__).resolve().parent / "soak_command.py")
# What may cut a run short, by how its task ended (docs/reliability.md, the fault table): a fault on
# its node, begun before the task ended and after the run began.
INTERRUPTED = ("its run was interrupted", "its run was lost", "exited with code -9")  # killed with its horse
EXPLAINS = {"its node declared down": ("kill agent", "kill node", "pause node"),
            "killed with its work horse": ("kill node", "kill rq process")}
SCALED_DOWN = "scaled down to"  # the workload's doing: the slot is gone, it does not run again


@pytest.mark.slow
@pytest.mark.soak
def test_agents_converge_under_a_random_mix_of_faults(tmp_path):
    asked = os.environ.get(SEED_ENV) or str(DEFAULT_SEED)
    seed = random.SystemRandom().randrange(1 << 31) if asked == "random" else int(asked)
    print(f"\nsoak seed {seed} (replay with {SEED_ENV}={seed}), faults for {FAULT_S:g} s", file=sys.stderr)
    soak = Soak(tmp_path, seed)
    try:
        soak.run()
    finally:
        soak.close()


class Soak:
    def __init__(self, directory: Path, seed: int):
        self.rng = random.Random(seed)
        self.workload_rng = random.Random(seed + 1)
        self.redis = RestartableRedis(directory / "redis")
        self.redis.start()
        # A namespace of this run's own: processes are found by it, so two soaks on one
        # machine never signal each other's.
        self.namespace = f"soak{os.getpid()}"
        self.app = App(redis_url=self.redis.url, namespace=self.namespace)
        logs = directory / "logs"
        logs.mkdir()
        self.cluster = Cluster(self.app, self.redis.url, self.namespace, logs)
        self.ledger = directory / "ledger"
        self.agents: dict[str, object] = {}
        self.workers: list = []
        self.faults: list[tuple[float, str]] = []
        self.spans: list[tuple[str, str | None, float, float]] = []  # kind, node or None, wall-clock start, end
        self.violations: list[str] = []
        self.samples = 0
        self.done = threading.Event()
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ the run
    def run(self) -> None:
        for name in AGENTS:
            self.agents[name] = self._agent(name, wait=True)
        self.workers = [self.cluster.worker() for _ in range(2)]
        self._submit({"id": SERVICE, "replicas": 3, "restart_delay": 0.2, "resources": {"cpu": 0.5, "memory": "64MiB"},
                      "run": {"command": [sys.executable, COMMAND, str(self.ledger), "0"]}})
        threads = [threading.Thread(target=self._workload, daemon=True),
                   threading.Thread(target=self._sampler, daemon=True)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + FAULT_S
        try:
            while time.monotonic() < deadline:
                time.sleep(self.rng.uniform(4, 10))
                self._fault()
        finally:
            self.done.set()
            self._heal()
            for thread in threads:
                thread.join(timeout=60)
        self._converge()
        self._judge()

    def close(self) -> None:
        self._heal()
        try:
            self.cluster.close()
        finally:
            for pid in self._commands():
                _kill(pid, signal.SIGKILL)
            self.app.close()
            self.redis.stop()

    # ------------------------------------------------------------------ processes
    def _agent(self, name: str, wait: bool = False):
        return self.cluster.agent(name, cpu="4", memory="2GiB", heartbeat=str(HEARTBEAT_S), slots=SLOTS, wait=wait)

    def _node_processes(self, name: str) -> list[int]:
        """The node's agent, RQ workers and work horses, and the commands the horses run."""
        own = namespace_pids(self.namespace, "agent", name)
        commands = [pid for pid in self._commands() if _safe_parent(pid) in own]
        return own + commands

    def _commands(self) -> list[int]:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()
                and str(self.ledger) in cmdline(int(entry)) and alive(int(entry))]

    def _heal(self) -> None:
        """Resume whatever is paused, and start what is dead."""
        self.redis.resume()
        if not self.redis.answers() and (self.redis.process is None or self.redis.process.poll() is not None):
            self.redis.start()
        for pid in namespace_pids(self.namespace) + self._commands():
            _kill(pid, signal.SIGCONT)
        for name, process in list(self.agents.items()):
            if process.poll() is not None:
                self.agents[name] = self._agent(name)
        self.workers = [w if w.poll() is None else self.cluster.worker() for w in self.workers]

    # ------------------------------------------------------------------ faults
    def _fault(self) -> None:
        kind = self.rng.choice(["kill worker", "kill agent", "kill node", "kill rq process", "pause redis",
                                "kill redis", "pause node"])
        name = self.rng.choice(AGENTS)
        started, began = time.monotonic() - self.t0, time.time()
        if kind == "kill worker":
            index = self.rng.randrange(len(self.workers))
            _kill(self.workers[index].pid, signal.SIGKILL)
            self.workers[index].wait()
            time.sleep(self.rng.uniform(0.5, 2))
            self.workers[index] = self.cluster.worker()
            detail = f"worker {index}"
        elif kind == "kill agent":
            pause = self.rng.uniform(0.5, 4)
            _kill(self.agents[name].pid, signal.SIGKILL)
            self.agents[name].wait()
            time.sleep(pause)
            self.agents[name] = self._agent(name)
            detail = f"{name}, back after {pause:.1f} s"
        elif kind == "kill node":
            pause = self.rng.uniform(1, 4)
            victims = self._node_processes(name)
            for pid in victims:
                _kill(pid, signal.SIGKILL)
            self.agents[name].wait()
            time.sleep(pause)
            self.agents[name] = self._agent(name)
            detail = f"{name}: {len(victims)} processes, back after {pause:.1f} s"
        elif kind == "kill rq process":
            candidates = [pid for pid in namespace_pids(self.namespace, "agent", name, "rq-worker")]
            victim = self.rng.choice(candidates) if candidates else None
            if victim is not None:
                _kill(victim, signal.SIGKILL)
            role = "none found" if victim is None else ("work horse" if _safe_parent(victim) in candidates
                                                       else "RQ worker")
            detail = f"{name}: {role}"
        elif kind == "pause redis":
            pause = self.rng.uniform(2, 8)
            self.redis.pause()
            time.sleep(pause)
            self.redis.resume()
            detail = f"{pause:.1f} s"
        elif kind == "kill redis":
            pause = self.rng.uniform(0.5, 3)
            self.redis.kill()
            time.sleep(pause)
            self.redis.start()
            detail = f"back after {pause:.1f} s"
        else:  # pause node
            pause = self.rng.uniform(TTL_S + 1, 3 * TTL_S)
            victims = self._node_processes(name)
            for pid in victims:
                _kill(pid, signal.SIGSTOP)
            time.sleep(pause)
            for pid in victims:
                _kill(pid, signal.SIGCONT)
            detail = f"{name}: {len(victims)} processes for {pause:.1f} s"
        self.faults.append((started, f"{kind} ({detail})"))
        on_node = kind in ("kill agent", "kill node", "kill rq process", "pause node")
        self.spans.append((kind, name if on_node else None, began, time.time()))

    # ------------------------------------------------------------------ workload and samples
    def _workload(self) -> None:
        rng, number = self.workload_rng, 0
        next_scale = time.monotonic() + rng.uniform(5, 10)
        while not self.done.is_set():
            seconds = round(rng.uniform(1, 4), 1)
            self._submit({"id": f"b{number}", "type": "batch", "replicas": rng.randint(2, 4), "max_retries": 100,
                          "restart_delay": 0.2, "resources": {"cpu": 0.5, "memory": "64MiB"},
                          "run": {"command": [sys.executable, COMMAND, str(self.ledger), str(seconds)]}})
            number += 1
            if time.monotonic() >= next_scale:
                replicas = rng.randint(1, 4)
                try:
                    reconcile.scale(self.app.store, SERVICE, replicas)
                except (redis.RedisError, SchedError):
                    pass
                next_scale = time.monotonic() + rng.uniform(5, 10)
            self.done.wait(rng.uniform(1.5, 3))

    def _submit(self, raw: dict) -> None:
        try:
            reconcile.submit(self.app.store, parse_job(raw))
        except (redis.RedisError, SchedError):
            pass  # Redis away: the job may or may not exist; the judgement reads what does

    def _sampler(self) -> None:
        sampler = App(redis_url=self.redis.url, namespace=self.namespace)
        while not self.done.wait(0.5):
            try:
                self._sample(sampler.store)
            except (redis.RedisError, SchedError):
                continue
        sampler.close()

    def _sample(self, store) -> None:
        for node in store.nodes():
            for resource, capacity in node.capacity.items():
                if node.allocated.get(resource, 0) > capacity:
                    self.violations.append(f"node {node.name} overcommitted: {resource} "
                                           f"{node.allocated[resource]} > {capacity}")
        fields, tasks = reconcile.job_snapshot(store, SERVICE)
        if fields:
            replicas = orjson.loads(fields["spec"])["replicas"]
            open_tasks = [t.id for t in tasks if not t.terminal]
            if len(open_tasks) > replicas:
                self.violations.append(f"service above its replicas: {len(open_tasks)} open > {replicas}: "
                                       f"{open_tasks}")
        self.samples += 1

    # ------------------------------------------------------------------ convergence and judgement
    def _converge(self) -> None:
        store = self.app.store
        state = {}

        def converged() -> bool:
            state.clear()
            try:
                ids = store.job_ids()
                tasks = {job_id: store.tasks(store.job_task_ids(job_id)) for job_id in ids}
                replicas = {job_id: store.get_job(job_id)["spec"]["replicas"] for job_id in ids}
            except (redis.RedisError, SchedError) as exc:
                state["error"] = str(exc)
                return False
            ticking = self._ticking()
            live = {t.id for job_tasks in tasks.values() for t in job_tasks if t.state in LIVE_STATES}
            stray = [(pid, _task_of(pid)) for pid in self._commands() if _task_of(pid) not in live]
            if stray:
                state["commands of ended tasks"] = stray
            for job_id, job_tasks in tasks.items():
                open_tasks = [t for t in job_tasks if not t.terminal]
                if job_id == SERVICE:
                    running = [t for t in job_tasks if t.state == "running"]
                    if len(open_tasks) != replicas[job_id] or len(running) != len(open_tasks) or \
                            not all(t.id in ticking for t in running):
                        state[job_id] = [(t.id, t.state, t.node) for t in open_tasks]
                elif open_tasks or sum(t.state == "completed" for t in job_tasks) != replicas[job_id]:
                    state[job_id] = [(t.id, t.state, t.node, t.message) for t in job_tasks]
            return not state

        deadline = time.monotonic() + CONVERGE_S
        while not converged():
            if time.monotonic() > deadline:
                pytest.fail(f"not converged {CONVERGE_S:g} s after the faults stopped: {state}\n"
                            f"{self._summary()}\n{self.cluster.logs_text(2000)}")
            time.sleep(0.5)

    def _ticking(self, within_s: float = 1.5) -> set[str]:
        """Tasks whose command wrote a line in the last ``within_s`` seconds."""
        now, seen = time.time(), set()
        for word, task, at in _ledger(self.ledger):
            if now - at < within_s:
                seen.add(task)
        return seen

    def _judge(self) -> None:
        store, client, keys = self.app.store, self.app.client, self.app.keys
        tasks = {t.id: t for job_id in store.job_ids() for t in store.tasks(store.job_task_ids(job_id))}
        lines: dict[str, Counter] = {}
        times: dict[str, list[float]] = {}
        ends: dict[str, float] = {}
        for word, task, at in _ledger(self.ledger):
            lines.setdefault(task, Counter())[word] += 1
            times.setdefault(task, []).append(at)
            if word == "end":
                ends[task] = at
        problems = list(self.violations)
        cut_short: Counter = Counter()
        for task_id, counts in lines.items():
            task = tasks.get(task_id)
            if counts["start"] > 1:
                problems.append(f"task {task_id} executed {counts['start']} times")
            if task is None:
                problems.append(f"a command ran for {task_id}, which is no task")
                continue
            if task.state in ("completed", *LIVE_STATES) or (task.state == "stopped"
                                                             and task.message.startswith(SCALED_DOWN)):
                continue  # it ran to its end, runs still (the service), or its slot is gone
            # It ran, and its slot runs again: a fault on its node during the run must explain it.
            cause = self._cause(task)
            if cause is None:
                problems.append(f"task {task_id} ran and was cut short, {task.state}: {task.message}")
                continue
            if not self._fault_on(task.node, EXPLAINS[cause], (min(times[task_id]), task.ended_ms / 1000)):
                problems.append(f"task {task_id} was cut short ({cause}: {task.message}) with no fault on node "
                                f"{task.node} during its run")
                continue
            cut_short[cause] += 1
            if counts["end"] and cause == "its node declared down" and ends[task_id] * 1000 < task.ended_ms:
                problems.append(f"task {task_id} ran to its end before its node was declared down, but is "
                                f"{task.state}: {task.message}")
        for task in tasks.values():
            counts = lines.get(task.id, Counter())
            if task.state == "completed" and task.job != SERVICE and (counts["start"], counts["end"]) != (1, 1):
                problems.append(f"completed task {task.id} has {counts['start']} start and {counts['end']} end lines")
        for pid in self._commands():
            task_id = _task_of(pid)
            task = tasks.get(task_id)
            if task is None or task.state not in LIVE_STATES:
                problems.append(f"the command of {task_id} ({task.state if task else 'no task'}) still runs: pid {pid}")
        report = audit(store)
        problems += [f"audit: {problem}" for problem in report.problems]
        overlaps = []
        for task_id in tasks:
            replaced = client.hget(keys.task(task_id), "replaces")
            if replaced and replaced in times and task_id in times:
                overlaps.append((_overlap(times[replaced], times[task_id]), replaced, task_id))
        longest = max(overlaps, default=(0.0, "", ""))
        if longest[0] > OVERLAP_BOUND_S:
            problems.append(f"runs {longest[1]} and {longest[2]} of one slot overlapped for {longest[0]:.2f} s")
        summary = self._summary(tasks, overlaps, cut_short)
        print(summary, file=sys.stderr)
        assert not problems, "\n".join(problems[:50]) + "\n" + summary

    @staticmethod
    def _cause(task) -> str | None:
        """How a run that did not complete was cut short, if by a fault the table documents."""
        if task.state == "lost" and task.message == f"node {task.node} is down":
            return "its node declared down"
        if task.state in ("lost", "failed") and task.message.startswith(INTERRUPTED):
            return "killed with its work horse"
        return None

    def _fault_on(self, node: str, kinds: tuple[str, ...], span: tuple[float, float]) -> bool:
        """A fault of one of ``kinds`` on ``node`` that began before the run's task ended and
        lasted until after the run began."""
        first, ended = span
        return any(kind in kinds and on == node and began <= ended and until >= first
                   for kind, on, began, until in self.spans)

    def _summary(self, tasks=None, overlaps=(), cut_short=None) -> str:
        kinds = Counter(description.split(" (")[0] for _, description in self.faults)
        lines = [f"{len(self.faults)} faults: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))]
        lines += [f"  {at:6.1f} s  {description}" for at, description in self.faults]
        if tasks is not None:
            states = Counter(t.state for t in tasks.values())
            longest = max(overlaps, default=(0.0, "", ""))
            cut = cut_short or {}
            lines.append(f"{len(tasks)} tasks ({dict(states)}), {self.samples} samples, "
                         f"{len(overlaps)} replaced runs, longest overlap {longest[0]:.3f} s {longest[1:]}")
            lines.append(f"runs cut short: {sum(cut.values())} ("
                         + (", ".join(f"{n} {cause}" for cause, n in sorted(cut.items())) or "none") + ")")
        return "\n".join(lines)


def _overlap(first: list[float], second: list[float], tick_s: float = 0.1) -> float:
    """How long two runs worked at once, from their ledger lines: the span of the first
    run's lines written while the second ran (a paused run writes none), plus a tick."""
    start, end = min(second), max(second)
    during = [at for at in first if start <= at <= end]
    return max(during) - min(during) + tick_s if during else 0.0


def _ledger(path: Path):
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            yield parts[0], parts[1], float(parts[2])


def _task_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            for item in handle.read().split(b"\0"):
                if item.startswith(b"SCHED_TASK_ID="):
                    return item.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return "?"


def _safe_parent(pid: int) -> int:
    try:
        return parent(pid)
    except (OSError, ValueError, IndexError):
        return 0


def _kill(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

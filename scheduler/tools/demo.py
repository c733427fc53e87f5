"""``sched demo``: a small live cluster, end to end, on the embedded Redis by default.

It starts four node agents with different sizes and zones and two scheduler workers (all
as child processes, exactly as a person would run them), submits a mix of jobs (a
service spread over zones, a bin-packed batch job with a flaky task that is retried, a
global job, and one job that cannot fit anywhere), shows the queues and nodes live (and
on the dashboard, whose URL it prints first), and ends with what ran where and why each
job with pending tasks is still pending.

Run from a terminal, the cluster and the dashboard then keep running until Ctrl-C, so
that they can be looked at; otherwise (stdin not a terminal, as in tests and CI, or
``SCHED_DEMO_STAY=0``) the demo ends after its summary. Either way, on the way out (also
on Ctrl-C, SIGTERM or SIGHUP) it stops the jobs, every agent and worker it started and
the dashboard, marks the demo's nodes down (their agents are gone), removes its scratch
folder, and says what it leaves: the demo's records in Redis and, if it was used, the
embedded Redis server, which runs until ``sched server stop``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

import orjson
import redis
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from scheduler.control import reconcile
from scheduler.state.app import App
from scheduler.state.connection import resolve_url
from scheduler.control.worker_config import WorkerConfig
from scheduler.model import COMPLETED, DOWN, FAILED, PENDING, SchedError, parse_job
from scheduler.control.processes import process
from scheduler.tools.render import usage
from scheduler.tools.web import Background

STAY_ENV = "SCHED_DEMO_STAY"  # "1": stay after the summary until Ctrl-C, "0": end; unset: stay on a terminal

AGENTS = [
    ("eu-a1", "2", "4GiB", "eu-a"),
    ("eu-a2", "2", "4GiB", "eu-a"),
    ("eu-b1", "4", "8GiB", "eu-b"),
    ("us-c1", "1", "2GiB", "us-c"),
]


def demo_jobs(marker_dir: str) -> list[dict]:
    return [
        {"id": "web", "type": "service", "replicas": 6, "priority": 60,
         "resources": {"cpu": 0.25, "memory": "128MiB"}, "ports": [8080],
         "preferences": [{"spread": "node.labels.zone"}],
         "run": {"func": "scheduler.tools.demo_tasks:crunch", "args": [30, "web"]}},
        {"id": "etl", "type": "batch", "replicas": 8, "strategy": "binpack", "max_retries": 2,
         "restart_delay": 0.5, "resources": {"cpu": 0.5, "memory": "256MiB"},
         "run": {"func": "scheduler.tools.demo_tasks:crunch", "args": [2, "etl"]}},
        {"id": "report", "type": "batch", "replicas": 1, "max_retries": 2, "restart_delay": 0.5,
         "resources": {"cpu": 0.25, "memory": "64MiB"},
         "run": {"func": "scheduler.tools.demo_tasks:flaky", "args": [1, marker_dir, "report"]}},
        {"id": "log-agent", "type": "global", "resources": {"cpu": 0.1, "memory": "32MiB"},
         "constraints": ["node.labels.zone!=us-c"],
         "run": {"command": ["sleep", "30"]}},
        {"id": "train", "type": "batch", "replicas": 2, "resources": {"cpu": 1, "memory": "1GiB", "gpu": 1},
         "run": {"command": ["true"]}},
    ]


def _sched(app: App, *args: str) -> list[str]:
    # The URL goes to the children in their environment (see _child_env), not on their
    # command line, where any user of the machine could read its password.
    return [sys.executable, "-m", "scheduler", "--namespace", app.keys.namespace, *args]


def _child_env(app: App) -> dict[str, str]:
    return {**os.environ, "SCHED_REDIS_URL": app.url}


def _view(app: App) -> Group:
    store = app.store
    counts = app.queue.counts()
    queues = Table(title="queues", box=None, header_style="bold")
    for name in counts:
        queues.add_column(name)
    queues.add_row(*(str(v) for v in counts.values()))
    nodes = Table(title="nodes", box=None, header_style="bold")
    for column in ("node", "status", "tasks", "allocated/capacity", "zone"):
        nodes.add_column(column)
    for node in store.nodes():
        nodes.add_row(node.name, node.status, str(node.tasks), usage(node.capacity, node.allocated),
                      node.labels.get("zone", ""))
    jobs = Table(title="jobs", box=None, header_style="bold")
    jobs.add_column("job")
    jobs.add_column("tasks by state")
    for job_id in store.job_ids():
        states = Counter(t.state for t in store.tasks(store.job_task_ids(job_id)))
        jobs.add_row(job_id, "  ".join(f"{s} {n}" for s, n in sorted(states.items())))
    return Group(queues, nodes, jobs)


PROGRESS_EVERY_S = 2.0  # a line of progress this often when the output is no terminal


def _progress(app: App, console: Console, end: float) -> None:
    """Without a terminal (a pipe, a log, CI) a live view would be written once, at its
    end: one line every :data:`PROGRESS_EVERY_S` instead, then the whole view once."""
    started = time.monotonic()
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(PROGRESS_EVERY_S, left))
        counts = app.queue.counts()
        states = Counter(task.state for task in app.store.tasks(app.store.all_task_ids()))
        tasks = ", ".join(f"{state} {n}" for state, n in sorted(states.items(), key=lambda item: -item[1]))
        console.print(f"{time.monotonic() - started:4.0f} s  tasks: {tasks or 'none'}; queues: "
                      + ", ".join(f"{name} {n}" for name, n in counts.items()), soft_wrap=True, highlight=False)
    console.print(_view(app))


def _summary(app: App, console: Console) -> None:
    store = app.store
    placed: dict[str, Counter] = defaultdict(Counter)
    ended = Counter()
    every = store.tasks(store.all_task_ids())  # one reading: the table and the reasons agree
    for task in every:
        if task.node and (task.live or task.state in (COMPLETED, FAILED)):
            placed[task.job][task.node] += 1
        ended[(task.job, task.state)] += 1
    table = Table(title="what ran where (tasks per node)", header_style="bold")
    node_names = [name for name, *_ in AGENTS]
    table.add_column("job")
    for name in node_names:
        table.add_column(name, justify="right")
    table.add_column("states")
    for job_id in store.job_ids():
        states = ", ".join(f"{s} {n}" for (j, s), n in sorted(ended.items()) if j == job_id)
        table.add_row(job_id, *(str(placed[job_id].get(n, "")) for n in node_names), states)
    console.print(table)
    pending = [task for task in every if task.state == PENDING]
    for job_id in sorted({task.job for task in pending}):
        tasks = [task for task in pending if task.job == job_id]
        explained = next((task for task in tasks if task.explanation), None)
        why = (orjson.loads(explained.explanation)["message"] if explained
               else "waiting for a scheduler worker; no attempt has been made yet.")
        console.print(f"[bold]why {job_id} has {len(tasks)} pending task(s):[/bold] {why}", soft_wrap=True)


def wants_to_stay() -> bool:
    """Stay after the summary when a person can press Ctrl-C: stdin is a terminal, unless
    ``SCHED_DEMO_STAY`` says otherwise."""
    chosen = os.environ.get(STAY_ENV, "").strip()
    if chosen in ("0", "1"):
        return chosen == "1"
    return sys.stdin is not None and sys.stdin.isatty()


class _Interrupted(BaseException):
    """SIGTERM or SIGHUP, turned into an exception so that the demo cleans up as on Ctrl-C."""


def _raise_interrupted(signum, frame):
    raise _Interrupted(signal.Signals(signum).name)


def run_demo(app: App, seconds: float = 12.0, console: Console | None = None, stay: bool | None = None) -> int:
    """The demo; ``stay`` None decides by :func:`wants_to_stay`. Returns the exit code:
    0, or 130 when it was interrupted before its summary."""
    console = console or Console()
    stay = wants_to_stay() if stay is None else stay
    store = app.store
    store.clear_namespace()  # first, so that a Redis it cannot reach is one sentence on stderr, alone
    console.print(f"starting a demo cluster in namespace {app.keys.namespace}: the dashboard, {len(AGENTS)} node "
                  f"agents, 2 scheduler workers...", soft_wrap=True, highlight=False)
    children: list[subprocess.Popen] = []
    workers = process("worker-processes")(app.url, app.keys.namespace, [WorkerConfig(batch_size=16)] * 2,
                                          name="demo-worker")
    marker_dir = tempfile.mkdtemp(prefix="sched-demo-")
    dashboard = Background(app)
    summarised = False
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    try:
        url = dashboard.__enter__()
        console.print(f"[bold]dashboard:[/bold] {url}/?ns={app.keys.namespace} (watch the tasks move while the demo "
                      f"runs)", soft_wrap=True)
        for name, cpu, memory, zone in AGENTS:
            # A process group of their own: Ctrl-C reaches the demo alone, which then stops
            # the jobs before the agents (an RQ worker's warm shutdown waits for its task).
            children.append(subprocess.Popen(
                # Slots for every task the demo places on a node (its tasks are light), so
                # that what waits, waits for the resources it asks for.
                _sched(app, "agent", name, "--cpu", cpu, "--memory", memory, "--label", f"zone={zone}",
                       "--heartbeat", "0.5", "--slots", "5"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_child_env(app), process_group=0))
        workers.start()
        deadline = time.monotonic() + 20
        while len(store.node_names()) < len(AGENTS) and time.monotonic() < deadline:
            time.sleep(0.1)
        console.print(f"[bold]{len(store.node_names())} agents and 2 workers up[/bold] "
                      f"(namespace {app.keys.namespace}, redis {app.display_url})")
        for raw in demo_jobs(marker_dir):
            spec = parse_job(raw)
            reconcile.submit(store, spec)
            console.print(f"submitted [cyan]{spec.id}[/cyan] ({spec.type}, "
                          f"{'one per node' if spec.type == 'global' else spec.replicas})")
        end = time.monotonic() + seconds
        if console.is_terminal:
            with Live(_view(app), console=console, refresh_per_second=4, transient=False) as live:
                while time.monotonic() < end:
                    time.sleep(0.25)
                    live.update(_view(app))
        else:
            _progress(app, console, end)
        _summary(app, console)
        summarised = True
        if stay:
            _stay(app, console, url)
        return 0
    except (KeyboardInterrupt, _Interrupted):
        _say(console, "")
        return 0 if summarised else 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        try:
            _say(console, "stopping the demo's jobs, agents and workers...")
            _stop_everything(app, console, children, workers, dashboard, marker_dir)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _stay(app: App, console: Console, url: str) -> None:
    ns = app.keys.namespace
    console.print(f"\n[bold]The demo cluster keeps running[/bold]: its 4 agents, 2 workers and the dashboard "
                  f"({url}/?ns={ns}; why train waits, node by node: {url}/tasks/train.0?ns={ns}).\n"
                  f"In another shell, with sched on the PATH (. .venv/bin/activate in this checkout), try:\n"
                  f"  sched -n {ns} task ls --state pending\n"
                  f"  sched -n {ns} task explain train.0\n"
                  f"  sched -n {ns} job show web\n"
                  f"[bold]Press Ctrl-C to stop it.[/bold]", soft_wrap=True, highlight=False)
    while True:
        time.sleep(3600)


def _stop_everything(app: App, console: Console, children: list[subprocess.Popen], workers, dashboard,
                     marker_dir: str) -> None:
    """Everything the demo started, stopped; what stays, said."""
    store = app.store
    reachable = _attempt(console, "stop the demo's jobs", lambda: [reconcile.stop(store, job_id)
                                                                  for job_id in store.job_ids()])
    # The jobs are stopped while the agents still run: each stops its RQ jobs, so its RQ
    # workers' warm shutdown below does not wait for (or get killed over) a long task.
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    workers.stop()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    workers.join(timeout=10)
    nodes_down = reachable and _attempt(console, "mark the demo's nodes down", lambda: _nodes_down(app))
    if dashboard.thread.is_alive():
        dashboard.__exit__(None, None, None)
    else:
        dashboard.sock.close()
    shutil.rmtree(marker_dir, ignore_errors=True)
    _say(console, "stopped every agent and worker the demo started, and the dashboard.")
    if nodes_down:
        _say(console, f"The demo's {len(AGENTS)} nodes are marked down (their agents are gone); its jobs, tasks and "
                      f"nodes stay in namespace {app.keys.namespace} to look at (sched -n {app.keys.namespace} "
                      f"task ls) until the next demo clears it.")
    if resolve_url(app.redis_url) is None:
        _say(console, f"the embedded Redis server keeps running ({app.display_url}) with the demo's state; "
                      f"stop it with: sched server stop")


def _say(console: Console, text: str) -> None:
    """A line of the way out: one whose output is gone (a closed pipe) must not stop the cleanup."""
    try:
        console.print(text, soft_wrap=True, highlight=False)
    except OSError:
        pass


def _nodes_down(app: App) -> None:
    for name in app.store.node_names():
        app.store.forget_agent(name)  # no heartbeat is expected any more
        app.store.set_status(name, DOWN)


def _attempt(console: Console, what: str, do) -> bool:
    """Run one cleanup step that needs Redis; if Redis is gone, say so in one line and go on."""
    try:
        do()
        return True
    except (SchedError, redis.RedisError) as error:
        _say(console, f"could not {what}: {error}")
        return False

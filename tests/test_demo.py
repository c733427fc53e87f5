"""``sched demo`` end to end, as a person runs it: no Redis URL, so it starts the embedded
server under SCHED_HOME, runs four agents and two workers as child processes and the
dashboard, and must leave none of them running when it returns: only the embedded server
remains, as it says, and ``sched server stop`` stops it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import redis

from scheduler.state.app import App
from scheduler.control.audit import audit
from scheduler.model import LIVE_STATES

SCHED = str(Path(sys.executable).parent / "sched")
DEMO_JOBS = ("web", "etl", "report", "log-agent", "train")
DEMO_NODES = ("eu-a1", "eu-a2", "eu-b1", "us-c1")


def _processes_mentioning(text: str) -> dict[int, list[str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = [p.decode(errors="replace") for p in handle.read().split(b"\0") if p]
            with open(f"/proc/{entry}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except (OSError, IndexError):
            continue
        if any(text in part for part in argv):
            found[int(entry)] = argv
    return found


def _children_of_demo(home: Path) -> dict[int, list[str]]:
    """Agents, workers, RQ workers and work horses on the embedded server (not the server)."""
    return {pid: argv for pid, argv in _processes_mentioning(str(home)).items()
            if "redis-server" not in argv[0]}  # the server rewrites its title: "/usr/bin/redis-server unixsocket:..."


def _shutdown_embedded(home: Path) -> None:
    socket = home / "redis.sock"
    if socket.exists():
        try:
            redis.Redis(unix_socket_path=str(socket), socket_timeout=5).shutdown(nosave=True)
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # the server closes the connection as it exits
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(home)) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_demo_runs_a_live_cluster_and_leaves_nothing_running(tmp_path_factory):
    home = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if k not in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE")}
    env.update(SCHED_HOME=str(home), COLUMNS="200")
    try:
        done = subprocess.run([SCHED, "demo", "--seconds", "3"], env=env, cwd=home, capture_output=True,
                              text=True, timeout=120)
        out = done.stdout
        assert done.returncode == 0, (out, done.stderr)
        leftovers = _children_of_demo(home)
        assert not leftovers, f"the demo left processes running: {leftovers}"

        assert (home / "redis.sock").exists(), "the demo did not use the embedded server under SCHED_HOME"
        assert f"unix://{home / 'redis.sock'}" in out
        assert "4 agents and 2 workers up" in out
        assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/\?ns=demo ", out, re.M), out
        assert out.index("dashboard: http://") < out.index("submitted web ")
        for job in DEMO_JOBS:
            assert f"submitted {job} " in out, job
        assert re.search(r"^ *what ran where", out, re.M), out  # on a line of its own, after the live view
        summary = out[out.index("what ran where"):]
        header = next(line for line in summary.splitlines() if " job " in line)
        for node in DEMO_NODES:
            assert node in header
        rows = {m.group(1): line for line in summary.splitlines()
                if (m := re.match(r"^\W*\s([a-z-]+)\s+\W", line)) and m.group(1) in DEMO_JOBS}
        assert set(rows) == set(DEMO_JOBS), summary
        assert "pending 2" in rows["train"]  # it asks for a gpu, which no demo node has
        # One line per job with pending tasks, saying why: train (no node has a gpu), and web
        # (6 replicas on port 8080, 4 nodes).
        why = {line.split()[1]: line for line in out.splitlines() if line.startswith("why ")}
        with_pending = {job for job, row in rows.items() if "pending" in row}
        assert set(why) == with_pending and "train" in why, (why, rows)
        assert re.match(r"why train has 2 pending task\(s\): .*insufficient gpu", why["train"]), why
        assert all(re.match(r"why \S+ has \d+ pending task\(s\): \S", line) for line in why.values()), why
        assert "stopped every agent and worker the demo started, and the dashboard." in out
        assert "stop it with: sched server stop" in out

        # What the demo left in Redis: every job stopped, nothing allocated, invariants hold.
        app = App(redis_url=f"unix://{home / 'redis.sock'}", namespace="demo")
        tasks = app.store.tasks(app.store.all_task_ids())
        assert tasks and not [t.id for t in tasks if t.state in LIVE_STATES]
        assert {t.job for t in tasks} == set(DEMO_JOBS)
        for node in app.store.nodes():
            assert node.tasks == 0 and not any(node.allocated.values()), node
        report = audit(app.store)
        assert report.ok, report.problems
        app.client.close()

        # The embedded server is all that is left, until `sched server stop`.
        assert _processes_mentioning(str(home)), "the embedded server should still run"
        status = subprocess.run([SCHED, "server", "status"], env=env, capture_output=True, text=True, timeout=30)
        assert status.returncode == 0 and status.stdout.startswith("embedded server running: unix://"), status
        stop = subprocess.run([SCHED, "server", "stop"], env=env, capture_output=True, text=True, timeout=30)
        assert stop.returncode == 0 and stop.stdout.startswith("embedded server stopped"), stop
        assert not _processes_mentioning(str(home)), "sched server stop left the embedded redis-server running"
        again = subprocess.run([SCHED, "server", "stop"], env=env, capture_output=True, text=True, timeout=30)
        assert again.stdout.strip() == "embedded server was not running", again
        status = subprocess.run([SCHED, "server", "status"], env=env, capture_output=True, text=True, timeout=30)
        assert status.stdout.startswith("embedded server not running"), status
    finally:
        for pid in _children_of_demo(home):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        _shutdown_embedded(home)
    assert not _processes_mentioning(str(home)), "the embedded redis-server is still running"

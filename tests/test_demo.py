"""``sched demo`` end to end, as a person runs it: no Redis URL, so it starts the embedded
server under SCHED_HOME, runs four agents and two workers as child processes and the
dashboard, and must leave none of them running when it returns: only the embedded server
remains, as it says, and ``sched server stop`` stops it. Its nodes are down at the end
(no agent runs them any more) and its scratch folder is gone.

Without a terminal on stdin the demo ends after its summary; with ``SCHED_DEMO_STAY=1``
it keeps its cluster and dashboard running until Ctrl-C (SIGINT to its process group, as
a terminal sends it), then cleans up the same way."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import redis

from scheduler.state.app import App
from scheduler.control.audit import audit
from scheduler.model import DOWN, LIVE_STATES, READY

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


def _in_session(session: int) -> dict[int, list[str]]:
    """The processes of a session (a demo started with ``start_new_session``, and all it started)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = [p.decode(errors="replace") for p in handle.read().split(b"\0") if p]
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
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


def _demo_env(home: Path, scratch: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE", "SCHED_DEMO_STAY")}
    env.update(SCHED_HOME=str(home), COLUMNS="200", TMPDIR=str(scratch), **extra)
    return env


def _what_the_demo_left(home: Path, scratch: Path, out: str) -> None:
    """No process of the demo but the embedded server, no scratch folder, its nodes down
    and empty, every job stopped, the invariants holding; and it says so."""
    leftovers = _children_of_demo(home)
    assert not leftovers, f"the demo left processes running: {leftovers}"
    assert not list(scratch.glob("sched-demo-*")), "the demo left its scratch folder behind"
    assert "stopped every agent and worker the demo started, and the dashboard." in out
    assert "The demo's 4 nodes are marked down (their agents are gone)" in out
    assert "stop it with: sched server stop" in out
    app = App(redis_url=f"unix://{home / 'redis.sock'}", namespace="demo")
    tasks = app.store.tasks(app.store.all_task_ids())
    assert tasks and not [t.id for t in tasks if t.state in LIVE_STATES]
    assert {t.job for t in tasks} == set(DEMO_JOBS)
    nodes = app.store.nodes()
    assert sorted(node.name for node in nodes) == sorted(DEMO_NODES)
    for node in nodes:
        assert node.status == DOWN and node.tasks == 0 and not any(node.allocated.values()), node
    report = audit(app.store)
    assert report.ok, report.problems
    app.client.close()


def _clean_up(home: Path) -> None:
    for pid in _children_of_demo(home):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    _shutdown_embedded(home)
    assert not _processes_mentioning(str(home)), "the embedded redis-server is still running"


def test_demo_runs_a_live_cluster_and_leaves_nothing_running(tmp_path_factory):
    home, scratch = tmp_path_factory.mktemp("demo"), tmp_path_factory.mktemp("scratch")
    env = _demo_env(home, scratch)
    try:
        # stdin not a terminal: the demo ends after its summary by itself.
        demo = subprocess.Popen([SCHED, "demo", "--seconds", "6"], env=env, cwd=home, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        arrived: list[tuple[float, str]] = []  # each line with when it came: read as the demo runs
        reader = threading.Thread(target=lambda: arrived.extend((time.monotonic(), line) for line in demo.stdout),
                                  daemon=True)
        reader.start()
        err = demo.stderr.read()
        assert demo.wait(timeout=120) == 0, ("".join(line for _, line in arrived), err)
        reader.join(30)
        out = "".join(line for _, line in arrived)
        # Without a terminal it says how the run goes while it goes, with tasks running,
        # before the summary (a live view would be written only once, at its end).
        summary_at = next(at for at, line in arrived if "what ran where" in line)
        progress = [(at, line) for at, line in arrived if re.match(r"^ *\d+ s  tasks: ", line)]
        assert progress and progress[0][0] < summary_at - 0.5, out
        before = out[:out.index("what ran where")]
        assert re.search(r"running [1-9]", before), before
        assert "Press Ctrl-C" not in out
        assert not _in_session(demo.pid), "processes the demo started are still running"
        _what_the_demo_left(home, scratch, out)

        assert (home / "redis.sock").exists(), "the demo did not use the embedded server under SCHED_HOME"
        assert f"unix://{home / 'redis.sock'}" in out
        assert "4 agents and 2 workers up" in out
        assert out.startswith("starting a demo cluster in namespace demo: "), out  # before anything slow
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
        _clean_up(home)


class _Lines:
    """A process's stdout read on a thread, so that a test can wait for a line."""

    def __init__(self, stream):
        self.text = ""
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self.changed:
                self.text += line
                self.changed.notify_all()

    def wait_for(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self.changed:
            while needle not in self.text:
                left = deadline - time.monotonic()
                assert left > 0, f"{needle!r} did not appear in: {self.text}"
                self.changed.wait(left)
            return self.text


def test_demo_stays_up_until_ctrl_c_then_cleans_up(tmp_path_factory):
    home, scratch = tmp_path_factory.mktemp("demo"), tmp_path_factory.mktemp("scratch")
    demo = subprocess.Popen([SCHED, "demo", "--seconds", "1"], env=_demo_env(home, scratch, SCHED_DEMO_STAY="1"),
                            cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        lines = _Lines(demo.stdout)
        out = lines.wait_for("Press Ctrl-C to stop it.", timeout=120)
        assert "The demo cluster keeps running" in out and "stopped every agent" not in out
        # Still up after its summary: the dashboard answers, the agents and workers run, the nodes are ready.
        page = re.search(r"^dashboard: (http://127\.0\.0\.1:\d+/\?ns=demo) ", out, re.M).group(1)
        with urllib.request.urlopen(page, timeout=10) as response:
            assert response.status == 200 and b"Cluster overview" in response.read()
        agents = {argv[argv.index("agent") + 1] for argv in _in_session(demo.pid).values() if "agent" in argv}
        assert agents == set(DEMO_NODES), agents
        app = App(redis_url=f"unix://{home / 'redis.sock'}", namespace="demo")
        assert {node.status for node in app.store.nodes()} == {READY}
        app.client.close()
        assert list(scratch.glob("sched-demo-*")), "the scratch folder is there while the demo runs"

        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the foreground process group
        assert demo.wait(timeout=60) == 0
        lines.thread.join(timeout=10)
        _what_the_demo_left(home, scratch, lines.text)
        assert not _in_session(demo.pid), "processes the demo started are still running"
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        _clean_up(home)


def test_a_demo_whose_output_goes_away_still_stops_what_it_started(tmp_path_factory):
    """Its reader gone (``sched demo | head -1``): writing fails, and the cleanup still runs."""
    home, scratch = tmp_path_factory.mktemp("demo"), tmp_path_factory.mktemp("scratch")
    demo = subprocess.Popen([SCHED, "demo", "--seconds", "2"], env=_demo_env(home, scratch), cwd=home,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        assert demo.stdout.readline().startswith("starting a demo cluster")
        while "agents and 2 workers up" not in (line := demo.stdout.readline()):  # the agents run: the reader goes
            assert line, "the demo ended before its agents were up"
        demo.stdout.close()
        demo.wait(timeout=60)
        assert not _in_session(demo.pid), "processes the demo started are still running"
        assert not list(scratch.glob("sched-demo-*"))
        app = App(redis_url=f"unix://{home / 'redis.sock'}", namespace="demo")
        assert sorted((node.name, node.status) for node in app.store.nodes()) == [(n, DOWN) for n in DEMO_NODES]
        app.client.close()
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        _clean_up(home)

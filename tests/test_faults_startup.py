"""Long-running processes started while Redis is not there yet wait for it and then work;
one-shot commands still fail fast (docs/reliability.md, "Redis down at start").

Each test points real ``sched`` processes at a unix socket where nothing listens, checks
that they are alive and say they are waiting, then brings a redis-server (already holding
the nodes and the job) onto that path by renaming its socket there, so that the work
exists the moment Redis first answers."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.app import App
from scheduler.state.embedded import start_server

from agent_cluster import SCHED, Cluster
from worker_harness import wait_until

LIVENESS_S = 30.0  # a bound on "eventually", not a performance target


@pytest.fixture
def late_redis(tmp_path):
    """(the URL processes are given, a function that makes Redis answer there, the App
    on the server before it does)."""
    directory = tmp_path / "redis"
    directory.mkdir()
    real = directory / "real.sock"
    target = tmp_path / "late.sock"
    server = start_server(directory, real, daemonize=False)
    app = App(redis_url=f"unix://{real}", namespace="late")

    def arrive():
        os.rename(real, target)  # the listening socket now answers at the processes' path

    yield f"unix://{target}", arrive, app
    app.close()
    server.terminate()
    server.wait(timeout=10)


def _start(url: str, logs, label: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE")}
    out = open(logs / f"{label}.log", "w")
    return subprocess.Popen([SCHED, "--redis-url", url, "--namespace", "late", *args], stdout=out,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def test_one_shot_commands_fail_fast_with_one_sentence(tmp_path):
    done = subprocess.run([SCHED, "--redis-url", f"unix://{tmp_path}/none.sock", "node", "ls"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: cannot reach Redis at unix://")
    assert len(done.stderr.strip().splitlines()) == 1


def test_workers_started_before_redis_wait_then_schedule(late_redis, tmp_path):
    url, arrive, app = late_redis
    single = _start(url, tmp_path, "single", "worker", "--until-idle")
    several = _start(url, tmp_path, "several", "worker", "--concurrency", "2", "--until-idle")
    try:
        def both_waiting():
            return all("waiting for Redis at unix://" in (tmp_path / f"{n}.log").read_text()
                       for n in ("single", "several"))

        wait_until(both_waiting, LIVENESS_S, "both workers to say they wait for Redis", 0.05)
        assert single.poll() is None and several.poll() is None
        for name in ("n1", "n2"):
            app.store.put_node(make_node(name, cpu="4", memory="4GiB"))
        reconcile.submit(app.store, parse_job({"id": "web", "replicas": 6, "resources": {"cpu": 1, "memory": "256MiB"}}))
        arrive()
        assert single.wait(timeout=LIVENESS_S) == 0, (tmp_path / "single.log").read_text()
        assert several.wait(timeout=LIVENESS_S) == 0, (tmp_path / "several.log").read_text()
    finally:
        for process in (single, several):
            if process.poll() is None:
                process.kill()
                process.wait()
    states = sorted(t.state for t in app.store.tasks(app.store.job_task_ids("web")))
    assert states == ["assigned"] * 6
    assert "crashed 0" in (tmp_path / "several.log").read_text()


def test_agent_started_before_redis_waits_then_runs_tasks(late_redis, tmp_path):
    url, arrive, app = late_redis
    logs = tmp_path / "logs"
    logs.mkdir()
    cluster = Cluster(app, url, "late", logs)
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        agent = cluster.agent("a1", cpu="4", memory="4GiB", wait=False)
        wait_until(lambda: "waiting for Redis at unix://" in cluster.logs_text(), LIVENESS_S,
                   "the agent to say it waits for Redis", 0.05)
        assert agent.poll() is None
        reconcile.submit(app.store, parse_job({
            "id": "touch", "type": "batch", "replicas": 3, "resources": {"cpu": 1, "memory": "64MiB"},
            "run": {"command": ["sh", "-c", f'echo started >> "{marks}/$SCHED_TASK_ID"']}}))
        arrive()
        cluster.url = url
        cluster.worker()
        cluster.wait(lambda: sorted(t.state for t in app.store.tasks(app.store.job_task_ids("touch")))
                     == ["completed"] * 3, "the agent to run the three tasks")
        assert sorted(os.listdir(marks)) == ["touch.0", "touch.1", "touch.2"]
        assert agent.poll() is None
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=LIVENESS_S) == 0
    finally:
        cluster.close()


def test_a_running_agent_and_worker_outlive_a_redis_restart(tmp_path):
    """Redis goes away under a running agent and worker and comes back (same socket, same
    data from its AOF): both are still running and the next job's tasks run."""
    directory = tmp_path / "redis"
    directory.mkdir()
    socket = directory / "redis.sock"
    url = f"unix://{socket}"
    server = start_server(directory, socket, daemonize=False)
    app = App(redis_url=url, namespace="late")
    logs = tmp_path / "logs"
    logs.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    cluster = Cluster(app, url, "late", logs)

    def job(job_id: str):
        reconcile.submit(app.store, parse_job({
            "id": job_id, "type": "batch", "replicas": 2, "resources": {"cpu": 1, "memory": "64MiB"},
            "run": {"command": ["sh", "-c", f'echo started >> "{marks}/$SCHED_TASK_ID"']}}))

    def done(job_id: str):
        return sorted(t.state for t in app.store.tasks(app.store.job_task_ids(job_id))) == ["completed"] * 2

    try:
        agent = cluster.agent("a1", cpu="4", memory="4GiB")
        worker = cluster.worker()
        job("before")
        cluster.wait(lambda: done("before"), "the first job to run")
        app.close()
        server.terminate()
        assert server.wait(timeout=30) == 0
        # Both have run into the missing Redis: the agent's loop and the worker's loop logged it.
        wait_until(lambda: "agent a1: " in cluster.logs_text() and "Redis did not answer" in cluster.logs_text(),
                   LIVENESS_S, "the agent and the worker to notice Redis is gone", 0.05)
        server = start_server(directory, socket, daemonize=False)
        job("after")
        cluster.wait(lambda: done("after"), "the second job to run after Redis came back", LIVENESS_S)
        assert agent.poll() is None and worker.poll() is None
        assert sorted(os.listdir(marks)) == ["after.0", "after.1", "before.0", "before.1"]
    finally:
        cluster.close()
        app.close()
        server.terminate()
        server.wait(timeout=30)


def test_worker_processes_refused_a_password_say_so_in_one_sentence(own_redis, tmp_path):
    """A refused password does not fix itself: ``sched worker --concurrency 2`` exits at
    once with the one sentence other commands print, not a traceback per child process."""
    server, url = own_redis
    App(redis_url=url).client.config_set("requirepass", "right-one")
    wrong = url.replace("unix://", "unix://:wrong-one@")
    done = subprocess.run([SCHED, "--redis-url", wrong, "worker", "--concurrency", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"Error: cannot reach Redis at {url.replace('unix://', 'unix://:***@')}: "
                                        "invalid username-password pair or user is disabled."]
    assert done.stdout == ""

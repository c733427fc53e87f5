"""The agents' HTTP and TCP health checks (workers/health.py) against real listeners.

The listener is a real process: ``python -m http.server`` serving a folder with a
``healthz`` file (200), an ``app`` folder (a 301 redirect to ``/app/``, followed: 200),
and nothing else (404); the same process is the TCP listener. Killing it is what makes a
healthy task unhealthy. The checks run in the agent's own ``HealthChecks`` thread against
a task running on a registered node; the health changes are read from the namespace's
event stream, in order. A last test has a real agent run the HTTP server as the task
itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from scheduler.control import process_groups, reconcile
from scheduler.control.journal import Journal
from scheduler.model.disconnect import DEFAULT
from scheduler.model import make_node, parse_job
from scheduler.model.update import HealthCheck
from workers.health import HealthChecks, check
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from redis_topologies import free_port
from agent_cluster import Cluster, cluster  # noqa: F401 (the fixture)
from worker_harness import wait_until

LIVENESS_S = 30.0  # a bound for a check to come round on a shared machine, not a target


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def http_server(folder, port: int):
    """``python -m http.server`` on 127.0.0.1:port, serving ``folder``, until the block ends
    (or :meth:`Popen.kill` is called on what it yields)."""
    (folder / "healthz").write_text("ok\n")
    (folder / "app").mkdir(exist_ok=True)
    (folder / "app" / "index.html").write_text("<p>app</p>\n")
    process = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                "--directory", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: process.poll() is None and answers(port), LIVENESS_S, f"http.server on port {port}", 0.05)
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


# ----------------------------------------------------------------------------- one check
def test_http_and_tcp_checks_against_a_real_server(tmp_path):
    port = free_port()
    with http_server(tmp_path, port):
        assert check(HealthCheck("http", port=port, path="/healthz"), "t.0") == (True, "GET /healthz answered 200")
        # A redirect is followed (/app -> /app/).
        assert check(HealthCheck("http", port=port, path="/app"), "t.0") == (True, "GET /app answered 200")
        assert check(HealthCheck("http", port=port, path="/missing"), "t.0") == (False, "GET /missing answered 404")
        assert check(HealthCheck("tcp", port=port), "t.0") == (True, f"port {port} accepted a connection")
    passed, said = check(HealthCheck("http", port=port, path="/healthz"), "t.0")
    assert not passed and said.startswith("http check failed: ") and "refused" in said.lower()
    passed, said = check(HealthCheck("tcp", port=port), "t.0")
    assert not passed and said.startswith("tcp check failed: ") and "refused" in said.lower()


# ----------------------------------------------------------------------------- a task's health over time
def running_task(app, health: dict) -> str:
    """A one-task service running on node n1 (registered without an agent), checked by ``health``."""
    app.store.put_node(make_node("n1", cpu=2, memory="1GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 1, "resources": {"cpu": 0.5},
                                           "restart_delay": 60, "health": health}))
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    assert app.store.start_task("web.0", "n1")
    return "web.0"


@contextmanager
def health_events(app):
    """The health values published for web.0, in order, as a list that fills while the block runs."""
    seen: list[str] = []
    pubsub = app.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(app.keys.events)
    stop = threading.Event()

    def listen():
        while not stop.is_set():
            message = pubsub.get_message(timeout=0.1)
            if message:
                event = orjson.loads(message["data"])
                if event.get("type") == "health" and event["id"] == "web.0":
                    seen.append(event["health"])

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        pubsub.close()


@contextmanager
def checks_on(app, node: str, journal: Path | None = None):
    """The node's health checks, as its agent runs them (with its journal), until the block ends."""
    stop = threading.Event()
    HealthChecks(app, node, stop, Journal(journal) if journal else None).start()
    try:
        yield
    finally:
        stop.set()


@pytest.mark.parametrize("kind", ["http", "tcp"])
def test_a_task_turns_healthy_then_unhealthy_when_its_listener_goes(app, tmp_path, kind):
    port = free_port()
    health = {"http": {"port": port, "path": "/healthz"}} if kind == "http" else {"tcp": {"port": port}}
    task_id = running_task(app, {**health, "interval": 0.1, "timeout": 1, "failures": 3})
    with health_events(app) as seen, http_server(tmp_path, port) as server, checks_on(app, "n1"):
        wait_until(lambda: app.store.get_task(task_id).health == "healthy", LIVENESS_S, "the task to be healthy", 0.05)
        said = "GET /healthz answered 200" if kind == "http" else f"port {port} accepted a connection"
        assert app.store.get_task(task_id).health_check == said
        server.kill()
        wait_until(lambda: app.store.get_task(task_id).state == "failed", LIVENESS_S, "the task to fail", 0.05)
        wait_until(lambda: len(seen) == 3, LIVENESS_S, "three health events", 0.05)
    task = app.store.get_task(task_id)
    assert task.health == "unhealthy" and seen == ["starting", "healthy", "unhealthy"]
    assert task.message.startswith(f"health check failed 3 time(s) in a row: {kind} check failed: ")
    # Its job replaces it, as any failed task.
    assert [t.id for t in app.store.tasks(app.store.job_task_ids("web")) if not t.terminal] == ["web.1"]


def test_a_path_that_is_not_there_never_turns_healthy(app, tmp_path):
    port = free_port()
    task_id = running_task(app, {"http": {"port": port, "path": "/nope"}, "interval": 0.1, "failures": 2})
    with health_events(app) as seen, http_server(tmp_path, port), checks_on(app, "n1"):
        wait_until(lambda: app.store.get_task(task_id).state == "failed", LIVENESS_S, "the task to fail", 0.05)
        wait_until(lambda: len(seen) == 2, LIVENESS_S, "two health events", 0.05)
    assert seen == ["starting", "unhealthy"]
    assert app.store.get_task(task_id).message == "health check failed 2 time(s) in a row: GET /nope answered 404"


def test_a_frozen_task_is_not_checked_nor_a_check_it_froze_during_counted(app, tmp_path):
    """A run frozen for want of its agent's heartbeat cannot answer: while the node's journal
    says it is frozen its checks are not run, and one that was under way as it froze is
    forgotten, so it is still healthy, and running, once it is resumed."""
    port = free_port()
    task_id = running_task(app, {"http": {"port": port, "path": "/healthz"}, "interval": 0.1, "timeout": 0.3,
                                 "failures": 2})
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    journal.started(task_id, "rq", process_groups.identify(os.getpid()), DEFAULT)
    with http_server(tmp_path, port) as server, checks_on(app, "n1", path):
        wait_until(lambda: app.store.get_task(task_id).health == "healthy", LIVENESS_S, "the task to be healthy", 0.05)
        journal.frozen(task_id)
        server.send_signal(signal.SIGSTOP)
        time.sleep(2)  # checks every 0.1 s failing after 0.3 s would have made it unhealthy by now
        task = app.store.get_task(task_id)
        assert (task.state, task.health) == ("running", "healthy")
        server.send_signal(signal.SIGCONT)
        journal.thawed(task_id)
        time.sleep(0.5)
        task = app.store.get_task(task_id)
        assert (task.state, task.health) == ("running", "healthy")


def test_an_agent_checks_the_http_server_its_task_runs(cluster, app):
    """End to end: the task is the HTTP server, run by a real agent, checked over HTTP."""
    port = free_port()
    cluster.agent("n1", cpu="2", memory="1GiB")
    cluster.worker()
    reconcile.submit(app.store, parse_job({
        "id": "site", "replicas": 1, "resources": {"cpu": 0.5, "memory": "64MiB"}, "ports": [port],
        "run": {"command": [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]},
        "health": {"http": {"port": port, "path": "/"}, "interval": 0.2, "failures": 3, "grace": 30}}))
    cluster.wait(lambda: app.store.get_task("site.0").health == "healthy", "the server task to be healthy")
    task = app.store.get_task("site.0")
    assert task.state == "running" and task.health_check == "GET / answered 200"

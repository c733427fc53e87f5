"""Test fixtures: one real redis-server per test session, on a unix socket in a temporary
folder (never the machine's default port), and a fresh namespace for every test."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from click.testing import CliRunner

from scheduler import native
from scheduler.state.app import App
from scheduler.state.embedded import start_server
from scheduler.tools.cli import main


def pytest_collection_modifyitems(config, items):
    """The state machine's deep run (minutes) is left out of the suite unless asked for
    with SCHED_STATEFUL_DEEP (tests/test_stateful.py): deselected, not skipped."""
    if os.environ.get("SCHED_STATEFUL_DEEP"):
        return
    deep = [item for item in items if item.get_closest_marker("stateful_deep")]
    if deep:
        config.hook.pytest_deselected(items=deep)
        items[:] = [item for item in items if not item.get_closest_marker("stateful_deep")]


def pytest_report_header(config):
    return f"sched hot path: {native.STATE}"


@pytest.fixture(scope="session", autouse=True)
def sched_home(tmp_path_factory):
    """What the processes the tests start keep on disk (agents' journals, an embedded
    server) goes in a folder of the session's own, never the user's: a journal left by an
    earlier run must not meet a namespace of the same name."""
    home = tmp_path_factory.mktemp("sched-home")
    before = os.environ.get("SCHED_HOME")
    os.environ["SCHED_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("SCHED_HOME", None)
    else:
        os.environ["SCHED_HOME"] = before


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("redis")
    socket = directory / "redis.sock"
    process = start_server(directory, socket, daemonize=False)
    yield f"unix://{socket}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of the test's own, on a unix socket, for tests that pause, kill or
    load it: (its process, its URL)."""
    directory = tmp_path / "own-redis"
    directory.mkdir()
    socket = directory / "redis.sock"
    server = start_server(directory, socket, daemonize=False)
    yield server, f"unix://{socket}"
    os.kill(server.pid, signal.SIGCONT)  # in case the test left it paused
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def app(redis_url, namespace) -> App:
    """An App on the test server, in a namespace no other test uses."""
    application = App(redis_url=redis_url, namespace=namespace)
    yield application
    client = application.client
    for key in client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def sched(redis_url, namespace, app):
    """Run ``sched --redis-url ... --namespace ... ARGS``; ``app`` (same namespace) cleans up."""
    runner = CliRunner()

    def run(*args, input=None, ok=True):
        result = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace, *map(str, args)],
                               input=input)
        if ok:
            assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result

    return run


class FakeClock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def clocked_app(redis_url, namespace, clock) -> App:
    """An App whose queue takes backoff and flush times from ``clock``."""
    application = App(redis_url=redis_url, namespace=namespace, clock=clock)
    yield application
    client = application.client
    for key in client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture(params=["scan", "columns"])
def both_placement_paths(request, monkeypatch):
    """Run a test with the placer's per-node scan and with its numpy candidate path
    (normally used only from 512 nodes), so both give what the test expects."""
    if request.param == "columns":
        from scheduler.engine.placement import Placer

        original = Placer.__init__

        def init(self, options=None):
            original(self, options)
            self.options.vector_min_nodes = 1

        monkeypatch.setattr(Placer, "__init__", init)
    return request.param


from redis_topologies import cluster_factory, redis_cluster, redis_sentinel, sentinel_factory  # noqa: E402,F401

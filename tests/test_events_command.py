"""``sched events`` and ``sched events --json`` exactly as typed, with no other option, on
each topology: the command runs as a process of its own, follows the namespace from the
moment it starts and prints each event as it happens (read from its pipe while it runs),
until Ctrl-C ends it with status 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import orjson
import pytest

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.app import App

from worker_harness import wait_until

SCHED = str(Path(sys.executable).parent / "sched")
WAIT_S = 60  # deadlines only


class Following:
    """``sched events [ARGS]`` running, as typed (the Redis and the namespace come from
    the environment, as a user's shell would give them), its lines gathered by a thread
    as they come."""

    def __init__(self, url: str, namespace: str, *args: str):
        self.process = subprocess.Popen([SCHED, "events", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env={**os.environ, "SCHED_REDIS_URL": url,
                                                        "SCHED_NAMESPACE": namespace})
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        try:
            status = self.process.wait(WAIT_S)
        finally:
            self.process.kill()
        self.reader.join(WAIT_S)
        return status, self.process.stderr.read()


def _follow_a_job(app: App, url: str, *args: str) -> list[str]:
    """Start the command, make events until it prints one (it follows from when it has
    started, which the test cannot see otherwise), then submit a job of two tasks and
    gather what it prints about it; returns those lines."""
    follower = Following(url, app.keys.namespace, *args)
    try:
        probes = 0

        def heard_a_probe():
            nonlocal probes
            if follower.process.poll() is not None:
                raise AssertionError(f"sched events ended: {follower.process.stderr.read()}")
            if follower.lines:
                return True
            app.store.put_node(make_node(f"probe{probes}", cpu="1", memory="1GiB"))
            probes += 1
            return False

        wait_until(heard_a_probe, WAIT_S, "sched events to print a node event", interval_s=0.2)
        reconcile.submit(app.store, parse_job({"id": "web", "replicas": 2, "resources": {"cpu": "1"}}))
        wait_until(lambda: sum("web" in line for line in follower.lines) >= 3, WAIT_S,
                   "the job's three events (the job submitted, two tasks pending)", detail=lambda: follower.lines)
    finally:
        status, errors = follower.stop()
    assert status == 0 and "Traceback" not in errors, errors
    return [line for line in follower.lines if "web" in line]


def _check_plain(lines: list[str]) -> None:
    assert "job web submitted" in lines[0], lines
    assert [line.split("  ")[1] for line in lines[1:]] == ["task web.0 pending", "task web.1 pending"], lines
    assert all(line.endswith("]") for line in lines)  # each with its stream id, for --since


def _check_json(lines: list[str]) -> None:
    events = [orjson.loads(line) for line in lines]
    assert [(e["type"], e["id"]) for e in events] == [("job", "web"), ("task", "web.0"), ("task", "web.1")]
    assert all(list(e)[0] == "stream_id" for e in events)


def _on(url: str) -> App:
    return App(redis_url=url, namespace="ev" + uuid.uuid4().hex[:8])


def test_sched_events_with_no_option_follows_as_events_happen(redis_url):
    app = _on(redis_url)
    _check_plain(_follow_a_job(app, redis_url))


def test_sched_events_json_with_no_other_option_follows_as_events_happen(redis_url):
    app = _on(redis_url)
    _check_json(_follow_a_job(app, redis_url, "--json"))


def test_sched_events_with_the_stream_off_follows_the_channel(redis_url):
    app = _on(redis_url)
    app.store.stream.set_maxlen(0)
    events = [orjson.loads(line) for line in _follow_a_job(app, redis_url, "--json")]
    assert [(e["type"], e["id"]) for e in events] == [("job", "web"), ("task", "web.0"), ("task", "web.1")]


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["redis_cluster", "redis_sentinel"])
def test_sched_events_with_no_option_and_json_follow_on_a_cluster_and_under_sentinel(topology, request):
    url = request.getfixturevalue(topology).url
    _check_plain(_follow_a_job(_on(url), url))
    _check_json(_follow_a_job(_on(url), url, "--json"))

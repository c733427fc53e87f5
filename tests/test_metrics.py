"""Prometheus metrics and the start log lines, as an operator sees them: real ``sched``
processes serving ``/metrics`` over HTTP, parsed with prometheus_client's own parser,
checked against what the test did. Waits are liveness bounds, never speed thresholds."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.tools.web import Background

from redis_topologies import free_port, port_free
from worker_harness import wait_until

SCHED = str(Path(sys.executable).parent / "sched")
LIVENESS_S = 30.0


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a /metrics page."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def try_scrape(url: str) -> dict:
    try:
        return scrape(url)
    except OSError:
        return {}


@pytest.fixture
def processes(tmp_path):
    started: list[subprocess.Popen] = []
    env = {k: v for k, v in os.environ.items() if k not in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE",
                                                            "SCHED_LOG_LEVEL", "SCHED_LOG_FORMAT")}

    def start(redis_url: str, namespace: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{len(started)}-{args[0]}.log"
        with open(log, "w") as err:
            process = subprocess.Popen([SCHED, "--redis-url", redis_url, "--namespace", namespace, *args],
                                       stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
        started.append(process)
        return process, log

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
    for process in started:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


def submit(app, raw: dict) -> None:
    reconcile.submit(app.store, parse_job(raw))


def test_worker_serves_its_placements_and_logs_json(app, redis_url, namespace, processes):
    app.store.put_node(make_node("m1", cpu="8", memory="8GiB"))
    submit(app, {"id": "web", "replicas": 5, "resources": {"cpu": 0.5, "memory": "64MiB"}})
    port = free_port()
    worker, log = processes(redis_url, namespace, "worker", "--metrics-port", str(port), "--log-format", "json")
    url = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: try_scrape(url).get(("sched_placements_total", ())) == 5, LIVENESS_S,
               "the worker's /metrics to count 5 placements", 0.1)
    samples = scrape(url)
    assert samples[("sched_claim_seconds_count", ())] >= 1
    assert samples[("sched_commit_seconds_count", ())] >= 1
    assert samples[("sched_submit_to_assigned_seconds_count", ())] == 5
    assert samples[("sched_batches_total", ())] >= 1
    assert samples[("sched_preemptions_total", ())] == 0
    assert [t.state for t in app.store.tasks(app.store.all_task_ids())] == ["assigned"] * 5

    first = json.loads(log.read_text().splitlines()[0])
    assert {"time", "level", "logger", "message"} <= first.keys()
    assert first["level"] == "info" and first["logger"] == "sched.worker"
    assert first["namespace"] == namespace and first["metrics_port"] == port
    assert "started" in first["message"] and namespace in first["message"]
    worker.terminate()
    assert worker.wait(timeout=20) == 0
    for line in log.read_text().splitlines():  # every line is one JSON object
        json.loads(line)


def free_port_pair() -> int:
    """A port that is free now with the one after it (bind(0) guarantees one port only,
    and its neighbour is often some connection's own)."""
    while True:
        port = random.randint(20000, 30000)  # below the ephemeral ports of outgoing connections
        if port_free(port) and port_free(port + 1):
            return port


def test_worker_concurrency_serves_one_port_per_process(app, redis_url, namespace, processes):
    port = free_port_pair()
    worker, log = processes(redis_url, namespace, "worker", "--concurrency", "2", "--metrics-port", str(port))
    for i in range(2):
        url = f"http://127.0.0.1:{port + i}/metrics"
        wait_until(lambda: ("sched_placements_total", ()) in try_scrape(url), LIVENESS_S,
                   f"worker process {i} to serve /metrics on {port + i}", 0.1)
    wait_until(lambda: log.read_text().count(" started: ") == 2, LIVENESS_S, "two start lines", 0.1)
    text = log.read_text()
    assert f"metrics on :{port}/metrics" in text and f"metrics on :{port + 1}/metrics" in text


def test_worker_start_line_says_each_thing_once_in_text_and_keeps_every_field_in_json(app, redis_url, namespace,
                                                                                     processes):
    """Text: the start line's message says the namespace, Redis and the metrics port, and
    the fields after it are only what it does not say; a line whose message says none of
    its fields (the scheduling summary) keeps them all. JSON: every field of the record."""
    app.store.put_node(make_node("m1", cpu="8", memory="8GiB"))
    submit(app, {"id": "web", "replicas": 2, "resources": {"cpu": 0.5, "memory": "64MiB"}})
    text_worker, text_log = processes(redis_url, namespace, "worker", "--until-idle")
    assert text_worker.wait(timeout=LIVENESS_S) == 0
    json_worker, json_log = processes(redis_url, namespace, "worker", "--until-idle", "--log-format", "json")
    assert json_worker.wait(timeout=LIVENESS_S) == 0

    lines = text_log.read_text().splitlines()
    start = next(line for line in lines if " started: " in line)
    said = f"worker-{text_worker.pid} started: namespace {namespace}, Redis {redis_url}, no metrics port"
    assert start.endswith(f"sched.worker: {said} batch_size=512 pid={text_worker.pid}"), start
    for thing in (namespace, redis_url, "metrics", "batch_size", "pid="):
        assert start.count(thing) == 1, (thing, start)
    summaries = [line for line in lines if ": scheduling " in line]
    assert sum(int(word.removeprefix("placed=")) for line in summaries for word in line.split()
               if word.startswith("placed=")) == 2, summaries

    entries = [json.loads(line) for line in json_log.read_text().splitlines()]
    entry = next(entry for entry in entries if " started: " in entry["message"])
    assert entry["message"] == f"worker-{json_worker.pid} started: namespace {namespace}, Redis {redis_url}, " \
                               f"no metrics port"
    assert {key: entry[key] for key in ("namespace", "redis", "metrics_port", "batch_size", "pid")} == {
        "namespace": namespace, "redis": redis_url, "metrics_port": None, "batch_size": 512, "pid": json_worker.pid}


def test_agent_serves_tasks_started_and_finished_and_logs_text(app, redis_url, namespace, processes):
    port = free_port()
    agent, log = processes(redis_url, namespace, "agent", "a1", "--cpu", "2", "--memory", "1GiB",
                           "--metrics-port", str(port))
    processes(redis_url, namespace, "worker")
    url = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: ("sched_agent_heartbeat_age_seconds", ()) in try_scrape(url), LIVENESS_S,
               "the agent to serve /metrics", 0.1)
    submit(app, {"id": "once", "type": "batch", "replicas": 1, "resources": {"cpu": 0.5, "memory": "64MiB"},
                 "run": {"command": ["true"]}})
    finished = ("sched_agent_tasks_finished_total", (("outcome", "completed"),))
    wait_until(lambda: try_scrape(url).get(finished) == 1, LIVENESS_S, "the agent to count 1 completed task", 0.1)
    samples = scrape(url)
    assert samples[("sched_agent_tasks_started_total", ())] == 1
    assert samples[("sched_agent_heartbeat_age_seconds", ())] >= 0
    assert app.store.get_task("once.0").state == "completed"
    first = log.read_text().splitlines()[0]
    assert " info " in first and "sched.agent: agent a1 started: namespace " + namespace in first
    assert f"metrics on :{port}/metrics" in first and redis_url in first
    # Each said once, not again as a field (the state folder's path names the namespace too).
    for thing in (f"namespace {namespace}", redis_url, str(port), " a1 "):
        assert first.count(thing) == 1, (thing, first)
    assert "namespace=" not in first and "metrics_port=" not in first, first


def test_dashboard_metrics_show_the_cluster(app, namespace):
    for name in ("r1", "r2", "d1"):
        app.store.put_node(make_node(name, cpu="4", memory="8GiB"))
    app.store.set_status("d1", "down")
    submit(app, {"id": "big", "replicas": 3, "resources": {"cpu": 64, "memory": "64MiB"},
                 "disruption_budget": {"min_available": 2}})
    with Background(app) as base:
        samples = scrape(f"{base}/metrics")
    ns = ("namespace", namespace)
    assert samples[("sched_queue_tasks", (ns, ("queue", "active")))] == 3
    assert samples[("sched_nodes", (ns, ("status", "ready")))] == 2
    assert samples[("sched_nodes", (ns, ("status", "down")))] == 1
    assert samples[("sched_tasks", (ns, ("state", "pending")))] == 3
    assert samples[("sched_capacity", (ns, ("resource", "cpu")))] == 8.0  # ready nodes only, in cores
    assert samples[("sched_capacity", (ns, ("resource", "memory")))] == 2 * 8 * 2**30
    assert samples[("sched_allocated", (ns, ("resource", "cpu")))] == 0.0
    assert samples[("sched_jobs", (ns,))] == 1
    assert samples[("sched_drains", (ns,))] == 0
    job = ("job", "big")
    assert samples[("sched_budget_expected", (job, ns))] == 3  # its tasks wait: none healthy, none may go
    assert samples[("sched_budget_healthy", (job, ns))] == 0
    assert samples[("sched_budget_desired_healthy", (job, ns))] == 2
    assert samples[("sched_budget_disruptions_allowed", (job, ns))] == 0
    assert samples[("sched_budget_evictions_total", (job, ns))] == 0

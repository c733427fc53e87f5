"""A drain with real agents running real commands, real health checks and a real worker
process: `sched node drain n3` of a node holding 3 replicas of a 4-replica service with
`max_unavailable: 1` never has 2 down at once (a sampler reads the healthy count every
few ms throughout). Waits are liveness bounds, never speed thresholds."""

from __future__ import annotations

import subprocess
import time

import pytest

from scheduler.control import budgets, reconcile
from scheduler.model import parse_job

from agent_cluster import SCHED, cluster  # noqa: F401 (the fixture)
from budget_helpers import Sampler, healthy_count

LIVENESS_S = 120.0
WEB = {"id": "web", "replicas": 4, "resources": {"cpu": 0.5, "memory": "32MiB"}, "restart_delay": 0.2,
       "run": {"command": ["sleep", "600"]},
       "health": {"command": ["true"], "interval": 0.2, "timeout": 2, "failures": 2},
       "disruption_budget": {"max_unavailable": 1}}


@pytest.mark.slow
def test_a_drain_of_three_replicas_of_four_never_has_two_down(cluster, app, redis_url, namespace):
    cluster.agent("n3", cpu="1.5", memory="1GiB", slots=3)
    cluster.agent("n1", cpu="0.5", memory="1GiB", slots=1)
    cluster.worker()
    reconcile.submit(app.store, parse_job(WEB))
    cluster.wait(lambda: healthy_count(app, "web", checked=True) == 4, "web to run healthy")
    # The drain reads the budget as the worker's upkeep last counted it: wait for a count
    # that saw all four healthy, so that the first step's words are known.
    cluster.wait(lambda: budgets.status(app.store, "web")["healthy"] == 4, "the budget to count four healthy")
    on_n3 = [t for t in app.store.tasks(app.store.job_task_ids("web")) if t.live and t.node == "n3"]
    assert len(on_n3) == 3
    cluster.agent("n2", cpu="2", memory="1GiB", slots=4)  # where they go
    began = time.monotonic()
    with Sampler(app, "web", checked=True, every_s=0.002) as sampler:
        done = subprocess.run([SCHED, "--redis-url", redis_url, "--namespace", namespace, "node", "drain", "n3"],
                              capture_output=True, text=True, timeout=LIVENESS_S, env=cluster.env)
        took = time.monotonic() - began
        cluster.wait(lambda: healthy_count(app, "web", checked=True) == 4, "the last replacement to be healthy")
    assert done.returncode == 0, done.stdout + done.stderr
    print("\n" + done.stdout)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("node n3 draining (deadline ") and lines[0].endswith(
        "1 task(s) stopped; 1 replacement(s) queued; waiting on job web's budget, 1 of 1 unavailable")
    assert lines[-1] == "node n3 drained: 3 task(s) moved"
    assert sampler.low == 3, f"{sampler.low} healthy at the lowest"
    assert all(t.node != "n3" for t in app.store.tasks(app.store.job_task_ids("web")) if t.live)
    print(f"\ndrain of 3 of 4 replicas, max_unavailable 1: {took:.1f} s, {len(sampler.samples)} samples, "
          f"fewest healthy {sampler.low}")


@pytest.mark.slow
def test_a_drain_goes_on_when_a_worker_is_killed_midway(cluster, app, redis_url, namespace):
    """Two worker processes share the drain's steps; one is SIGKILLed after the first
    eviction; the other finishes the drain, still never two down."""
    cluster.agent("n3", cpu="1.5", memory="1GiB", slots=3)
    cluster.agent("n1", cpu="0.5", memory="1GiB", slots=1)
    doomed, _ = cluster.worker(), cluster.worker()
    reconcile.submit(app.store, parse_job(WEB))
    cluster.wait(lambda: healthy_count(app, "web", checked=True) == 4, "web to run healthy")
    cluster.agent("n2", cpu="2", memory="1GiB", slots=4)
    with Sampler(app, "web", checked=True, every_s=0.002) as sampler:
        done = subprocess.run([SCHED, "--redis-url", redis_url, "--namespace", namespace, "node", "drain", "n3",
                               "--detach"], capture_output=True, text=True, timeout=LIVENESS_S, env=cluster.env)
        assert done.returncode == 0, done.stderr
        cluster.wait(lambda: app.store.drain_record("n3").get("stopped") == "2", "a second eviction")
        doomed.kill()
        cluster.wait(lambda: app.store.drain_record("n3").get("state") == "complete", "the drain to complete")
        cluster.wait(lambda: healthy_count(app, "web", checked=True) == 4, "the last replacement to be healthy")
    assert sampler.low == 3, f"{sampler.low} healthy at the lowest"

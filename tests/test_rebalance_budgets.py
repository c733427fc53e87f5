"""Rebalancing within disruption budgets, with a real scheduler worker loop and the nodes
running in threads (scripts/rebalance_bench.py's, which the measure of
docs/benchmarks.md runs): the measure scenario itself, asserting skew and budgets, and
moves beside a drain evicting through the same gate at the same time. A sampler reads
the tasks every few milliseconds throughout; waits are liveness bounds."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from scheduler import Client
from scheduler.model import RUNNING
from scheduler.model.update import HEALTHY
from worker_harness import wait_until

from rebalance_helpers import add_nodes, per_node, service

ROOT = Path(__file__).resolve().parent.parent
LIVENESS_S = 120.0


def bench():
    spec = importlib.util.spec_from_file_location("rebalance_bench", ROOT / "scripts" / "rebalance_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_measure_scenario_restores_a_skew_of_one_within_every_budget(app):
    def done() -> float:
        return REGISTRY.get_sample_value("sched_rebalance_moves_total", {"outcome": "done"}) or 0.0

    before = done()
    result = bench().measure(app, timeout_s=LIVENESS_S)
    assert done() - before == result["moves_done"]  # the worker's upkeep counted each move it saw done
    assert result["moves_planned"] > 0 and result["moves_done"] == result["moves_planned"]
    assert result["moves_abandoned"] == 0
    assert max(result["skew_before"].values()) > 1
    assert all(skew <= 1 for skew in result["skew_after"].values()), result
    assert result["samples"] > 10 and result["samples_over_budget"] == 0
    for job, fewest in result["fewest_healthy"].items():
        assert fewest >= result["floor"][job], (job, result)


def healthy(app, job: str) -> int:
    store = app.store
    return sum(t.state == RUNNING and t.health == HEALTHY for t in store.tasks(store.job_task_ids(job)))


@pytest.mark.slow
def test_moves_and_a_drain_at_the_same_time_never_exceed_the_budget_together(app):
    """web has 6 replicas and max_unavailable 1: never fewer than 5 healthy, whatever the
    rebalance's stops and `sched node drain n1` (its tasks evicted through the same gate as
    the budget allows, each replaced elsewhere, advanced by the same worker) do together."""
    module = bench()
    add_nodes(app, ["n1", "n2"])
    client = Client(app=app)
    client.submit(service("web", 6, budget={"max_unavailable": 1}))
    worker, nodes = module.Worker(app), module.Nodes(app, healthy_after_s=0.2)
    worker.start()
    nodes.start()
    fewest, samples, halt = [6], [0], threading.Event()

    def sample():
        while not halt.wait(0.003):
            fewest[0] = min(fewest[0], healthy(app, "web"))
            samples[0] += 1

    try:
        wait_until(lambda: healthy(app, "web") == 6, LIVENESS_S, "web healthy")
        add_nodes(app, ["n3", "n4"])
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        done = client.rebalance()
        assert len(done["applied"]["moves"]) == 2
        drained = client.drain_report("n1")
        assert drained["stopped"] or drained["state"] == "draining"
        ended = client.wait_moves(done["applied"]["moves"], LIVENESS_S)
        wait_until(lambda: healthy(app, "web") == 6 and not per_node(app, "web")["n1"], LIVENESS_S,
                   "web healthy again, off n1")
        halt.set()
        sampler.join()
    finally:
        halt.set()
        worker.worker.stop()
        nodes.halt.set()
        worker.join(timeout=30)
        nodes.join(timeout=30)
    assert samples[0] > 10
    assert fewest[0] >= 5  # 6 replicas, max_unavailable 1
    assert {m["state"] for m in ended} <= {"done", "abandoned"}
    assert sum(not t.terminal for t in app.store.tasks(app.store.job_task_ids("web"))) == 6

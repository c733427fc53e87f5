"""Compaction's lower bound is a bound: never above the fewest nodes that place a trace,
with or without waiting, on mixed node shapes too; the peak demand is reported beside it.
Known answers first, then random small traces against real compactions (replays through
the worker and its scripts)."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.tools.simulate import Settings, Simulator
from scheduler.tools.simulate.bounds import Capacity, lower_bound
from scheduler.tools.simulate.compact import compact
from scheduler.tools.simulate.trace import read_jsonl


def trace_of(*events: dict):
    return read_jsonl(io.StringIO("\n".join(json.dumps(e) for e in events)), "test trace")


def node(name: str, cpu, memory: str) -> dict:
    return {"kind": "node", "time": 0, "name": name, "cpu": cpu, "memory": memory}


def task(time: float, job: str, count: int, duration, cpu, memory: str, **more) -> dict:
    return {"kind": "task", "time": time, "job": job, "count": count, "duration": duration,
            "resources": {"cpu": cpu, "memory": memory}, **more}


@pytest.fixture
def simulator(redis_url, namespace):
    return Simulator(redis_url, namespace)


def test_capacity_counts_the_largest_nodes_first_and_repeats_the_inventory_beyond_it():
    capacity = Capacity(trace_of(node("s", 2, "2GiB"), node("big", 8, "8GiB"), node("m", 4, "4GiB")).nodes)
    assert [capacity.of("cpu", n) for n in range(7)] == [0, 8000, 12000, 14000, 22000, 26000, 28000]
    assert [capacity.nodes_for("cpu", amount) for amount in (0, 1, 8000, 8001, 14000, 14001, 28001)] == \
        [0, 1, 1, 2, 3, 4, 7]
    assert capacity.nodes_for("gpu", 1) is None and capacity.nodes_for("gpu", 0) == 0


def test_with_no_wait_the_bound_is_the_peak_demand(simulator):
    trace = trace_of(node("n0", 4, "8GiB"), task(0, "a", 10, 100, 1, "1GiB"), task(0, "b", 2, 100, 2, "1GiB"))
    found = compact(simulator.replay, trace, Settings(), max_wait_s=0)
    assert (found["lower_bound"], found["peak_demand_nodes"], found["nodes_needed"]) == (4, 4, 4)  # 14 cores at once
    assert found["lower_bound_per_resource"] == {"cpu": 4, "memory": 2}


def test_tasks_that_arrive_at_once_and_never_end_are_held_at_once(simulator):
    # a static workload: every task at 0, none ending; the replay ends at 0, holding them all
    trace = trace_of(node("n0", 4, "8GiB"), task(0, "a", 10, None, 1, "1GiB"), task(0, "b", 2, None, 2, "1GiB"))
    assert lower_bound(trace)["nodes"] == lower_bound(trace)["peak_demand_nodes"] == 4  # 14 cores at once
    found = compact(simulator.replay, trace, Settings(), max_wait_s=0)
    assert (found["lower_bound"], found["nodes_needed"]) == (4, 4)


def test_with_waiting_the_bound_is_demand_seconds_over_capacity_seconds(simulator):
    trace = trace_of(node("n0", 4, "8GiB"), task(0, "a", 10, 100, 1, "1GiB"), task(0, "b", 2, 100, 2, "1GiB"))
    found = compact(simulator.replay, trace, Settings(), max_wait_s=100)
    # 1,400 core-seconds by 200 s at the latest (the last to start waits 100 s, runs 100):
    # 7 cores, 2 nodes; and 2 nodes do. The peak (4 nodes) is no bound when tasks may wait.
    assert (found["lower_bound"], found["nodes_needed"], found["peak_demand_nodes"]) == (2, 2, 4)


def test_on_mixed_node_shapes_the_bound_counts_what_few_large_nodes_offer(simulator):
    # One 8-core task: the 8-core node alone places it. Over the mean node (5 cores) the
    # peak demand would say 2.
    trace = trace_of(node("big", 8, "8GiB"), node("small", 2, "2GiB"), task(0, "a", 1, 10, 8, "1GiB"))
    found = compact(simulator.replay, trace, Settings(), max_wait_s=0)
    assert (found["nodes_needed"], found["lower_bound"], found["peak_demand_nodes"]) == (1, 1, 1)


def test_a_late_burst_binds_through_its_own_window():
    # 4 nodes' work arriving at 1,000 s, with 10 s of waiting allowed: over the whole
    # replay it is little, over its own window (1,000 s to 1,020 s at the latest) it is not.
    trace = trace_of(node("n0", 4, "8GiB"), task(0, "early", 1, 10, 1, "1GiB"),
                     task(1000, "burst", 16, 10, 1, "1GiB"))
    bound = lower_bound(trace, max_wait_s=10)
    assert bound["nodes"] == 2  # 160 core-seconds in 20 s: 8 cores
    assert lower_bound(trace)["nodes"] == bound["peak_demand_nodes"] == 4


def test_tasks_without_a_duration_hold_room_until_the_end():
    trace = trace_of(node("n0", 4, "8GiB"), task(0, "forever", 6, None, 1, "1GiB"), task(100, "last", 1, 5, 1, "1GiB"))
    # Six cores from at most 30 s to the end (105 s at the earliest): 2 nodes at once.
    assert lower_bound(trace, max_wait_s=30)["nodes"] == 2
    assert lower_bound(trace, max_wait_s=30, until_s=20)["nodes"] == 0  # stopped before any must run


shapes = st.sampled_from([(1, "2GiB"), (2, "2GiB"), (2, "8GiB"), (4, "4GiB"), (8, "16GiB")])
requests = st.sampled_from([("250m", "256MiB"), ("500m", "1GiB"), (1, "512MiB"), (1, "2GiB"), (2, "1GiB"),
                            (3, "3GiB")])
arrivals = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 4), st.one_of(st.integers(1, 60), st.none()),
                              requests, st.sampled_from([50, 50, 200])), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inventory=st.lists(shapes, min_size=1, max_size=3), work=arrivals, max_wait=st.sampled_from([0, 5, 30]))
def test_the_bound_is_never_above_the_fewest_nodes_found(simulator, inventory, work, max_wait):
    events = [node(f"n{i}", cpu, memory) for i, (cpu, memory) in enumerate(inventory)]
    events += [task(time, f"j{i}", count, duration, cpu, memory, priority=priority)
               for i, (time, count, duration, (cpu, memory), priority) in enumerate(work)]
    trace = trace_of(*events)
    found = compact(simulator.replay, trace, Settings(), max_wait_s=max_wait)
    bound = found["lower_bound"]
    if bound > 1:  # one node fewer than the bound never places (compaction starts at the bound)
        fewer = simulator.replay(trace, Settings(nodes=bound - 1))
        assert fewer["pending_at_end"] > 0 or fewer["longest_wait_s"] > max_wait, (found, fewer)
    if found["nodes_needed"] is not None:
        assert bound <= found["nodes_needed"], found
    if max_wait == 0 and found["nodes_needed"] is not None:
        assert found["peak_demand_nodes"] <= found["nodes_needed"]

"""Binpack against the exact optimum: on static traces small enough for CP-SAT to prove its
answer (every task at time 0, none ending: vector bin packing over cpu, memory and gpus,
on uniform and mixed node shapes), the fewest nodes with which ``sched simulate
--compact`` places everything with binpack is never more than one node over the optimum
and is the optimum on at least four traces in five, and spread never needs fewer nodes
than binpack on a batch trace. (On optima this small, 3 % is less than a node: the
traces where binpack is one node over are the distance left to that target.) The scheduler places through its own
worker, queue and commit (``sched simulate``); the traces and the solver are in
``tests/static_traces.py``. docs/benchmarks.md gives the figures."""

from __future__ import annotations

import functools
import io
import json

import pytest
from click.testing import CliRunner
from static_traces import SHAPES, optimum, static_trace

from scheduler.tools.cli import main
from scheduler.tools.simulate import Settings, Simulator
from scheduler.tools.simulate.compact import compact
from scheduler.tools.simulate.generate import generate
from scheduler.tools.simulate.trace import read_jsonl

pytestmark = pytest.mark.slow

# Every shape at three sizes, two seeds each: 30 traces of 60 to 250 tasks, each solved
# and proven by CP-SAT in about a second.
TRACES = [(shape, seed, tasks) for tasks in (60, 120, 250) for shape in SHAPES for seed in (1, 2)]
OVER = 1  # nodes binpack may need beyond the optimum on any one trace
AT_OPTIMUM = 0.8  # the share of the traces where it needs exactly the optimum, at least


def trace_of(events: list[dict]):
    return read_jsonl(io.StringIO("\n".join(json.dumps(e) for e in events)), "static trace")


@functools.cache
def static(shape: str, seed: int, tasks: int):
    return trace_of(static_trace(shape, seed, tasks))


@functools.cache
def best(shape: str, seed: int, tasks: int) -> int:
    found = optimum(static(shape, seed, tasks))
    assert found["proven"], f"CP-SAT did not prove its answer on {shape}/{seed}/{tasks}: {found}"
    return found["nodes"]


@pytest.fixture(scope="module")
def simulator(redis_url):
    return Simulator(redis_url, namespace="packing-optimum")


def needed(simulator, trace, strategy: str) -> int:
    """The fewest nodes of the inventory with which every task places at once."""
    found = compact(simulator.replay, trace, Settings(strategy=strategy), max_wait_s=0)
    assert found["nodes_needed"] is not None
    return found["nodes_needed"]


def test_the_command_reports_binpack_at_most_a_node_over_the_optimum(tmp_path):
    events = static_trace("mixed", 2, 120)
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events))
    result = CliRunner().invoke(main, ["simulate", str(path), "--strategy", "binpack", "--compact", "--max-wait",
                                       "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["nodes_needed"] <= best("mixed", 2, 120) + OVER


def test_binpack_needs_the_optimum_on_most_traces_and_never_more_than_a_node_over(simulator):
    over = {}
    for shape, seed, tasks in TRACES:
        opt = best(shape, seed, tasks)
        got = needed(simulator, static(shape, seed, tasks), "binpack")
        assert opt <= got <= opt + OVER, f"binpack needs {got} nodes where {opt} do ({shape}/{seed}/{tasks})"
        over[(shape, seed, tasks)] = got - opt
    at_optimum = sum(1 for extra in over.values() if extra == 0)
    assert at_optimum >= AT_OPTIMUM * len(TRACES), f"at the optimum on {at_optimum} of {len(TRACES)}: {over}"


def test_the_optimum_is_exact_on_a_trace_whose_answer_is_known():
    # 9 tasks of 5 cores on 16-core nodes: 3 a node, so 3 nodes, though 45 cores would fit in 2.9
    trace = trace_of([{"kind": "node", "time": 0, "name": "n", "cpu": 16, "memory": "64GiB"},
                      {"kind": "task", "time": 0, "job": "j", "count": 9, "resources": {"cpu": 5, "memory": "1GiB"}}])
    assert optimum(trace) == {"nodes": 3, "bound": 3, "proven": True, "wall_s": pytest.approx(0, abs=30)}
    # 3 tasks of 8 cores: the large node alone holds them, but taken in turn (as compaction
    # takes the inventory) it comes after two small ones
    mixed = trace_of([{"kind": "node", "time": 0, "name": "small", "cpu": 8, "memory": "32GiB"},
                      {"kind": "node", "time": 0, "name": "small-2", "cpu": 8, "memory": "32GiB"},
                      {"kind": "node", "time": 0, "name": "large", "cpu": 24, "memory": "96GiB"},
                      {"kind": "task", "time": 0, "job": "j", "count": 3, "resources": {"cpu": 8, "memory": "1GiB"}}])
    assert optimum(mixed, prefix=False)["nodes"] == 1
    assert optimum(mixed)["nodes"] == 3


def test_spread_never_needs_fewer_nodes_than_binpack_on_a_batch_trace(simulator):
    for seed in (1, 3):
        trace = trace_of(list(generate("batch", 300, 8, seed)))
        assert needed(simulator, trace, "spread") >= needed(simulator, trace, "binpack")

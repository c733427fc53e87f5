"""Scorers alone, and the rankings they form; no Redis."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine.node_table import NodeTable
from scheduler.model import Node, make_node, parse_job
from scheduler.engine.scoring import (BINPACK_STEPS, FULLNESS_WEIGHT, BinPack, Context, FaultyNode, JobSpread,
                                      LeastTasks, Ranking, Scorer, faulty_nodes, ranking)

GIB = 2**30


def node(name, *, cpu=4, memory="4GiB", tasks=0, allocated=None):
    n = make_node(name, cpu=cpu, memory=memory)
    n.tasks = tasks
    n.allocated.update(allocated or {})
    return n


def job(**spec):
    return parse_job({"id": "web", **spec})


def test_job_spread_prefers_fewer_tasks_of_the_job():
    score = JobSpread().bind(Context(job()))
    assert score(node("a"), 0) > score(node("a"), 1) > score(node("a"), 5)


def test_least_tasks_prefers_fewer_tasks_in_total():
    score = LeastTasks().bind(Context(job()))
    assert score(node("a", tasks=0), 3) > score(node("b", tasks=2), 0)


def binpack_score(cosine: float, fullness: float) -> float:
    """The match of request and free room, in steps (a node not in use)."""
    return round(BINPACK_STEPS * (cosine + FULLNESS_WEIGHT * fullness) / (1 + FULLNESS_WEIGHT))


@pytest.mark.parametrize("allocated, expected", [
    ({"cpu": 3000, "memory": 3 * GIB}, BINPACK_STEPS),  # free room the task's shape, full after it
    ({}, binpack_score(1.0, 0.25)),  # free room the task's shape, a quarter full after it
    # one core and all the memory free: the angle between (1, 1) and (1, 4)
    ({"cpu": 3000}, binpack_score(5 / (2**0.5 * 17**0.5), (1.0 + 0.25) / 2)),
])
def test_binpack_scores_the_match_of_request_and_free_room_then_fullness(allocated, expected):
    score = BinPack().bind(Context(job(resources={"cpu": 1, "memory": "1GiB"})))
    assert score(node("a", allocated=allocated), 0) == expected


def test_binpack_sends_a_task_where_what_is_free_matches_what_it_asks():
    cpu_heavy = BinPack().bind(Context(job(resources={"cpu": 2, "memory": "256MiB"})))
    memory_heavy = BinPack().bind(Context(job(resources={"cpu": "250m", "memory": "2GiB"})))
    memory_used = node("memory-used", allocated={"memory": 3 * GIB})  # cpu left
    cpu_used = node("cpu-used", allocated={"cpu": 3000})  # memory left
    assert cpu_heavy(memory_used, 0) > cpu_heavy(cpu_used, 0)
    assert memory_heavy(cpu_used, 0) > memory_heavy(memory_used, 0)


def test_binpack_prefers_the_fuller_of_nodes_that_match_alike():
    score = BinPack().bind(Context(job(resources={"cpu": 1, "memory": "1GiB"})))
    half = node("half", allocated={"cpu": 2000, "memory": 2 * GIB})
    bigger = node("bigger", cpu=8, memory="8GiB", allocated={"cpu": 2000, "memory": 2 * GIB})
    empty = node("empty")
    cpu_only = node("cpu-only", allocated={"cpu": 3000})  # full in cpu, idle in memory: matches worse
    ranked = sorted([empty, cpu_only, bigger, half], key=lambda n: -score(n, 0))
    assert [n.name for n in ranked] == ["half", "bigger", "empty", "cpu-only"]
    # a task asking for one resource matches every node alike: the fullest wins
    cpu = BinPack().bind(Context(job(resources={"cpu": 1})))
    assert sorted([empty, half, cpu_only], key=lambda n: -cpu(n, 0))[0].name == "half"
    # matches stay within 0..BINPACK_STEPS, also for a node with no memory capacity at all
    assert 0 <= score(node("nomem", memory=0), 0) <= BINPACK_STEPS
    assert 0 <= score(empty, 0) <= BINPACK_STEPS


def test_binpack_puts_nodes_holding_tasks_or_opened_for_the_claim_first():
    spec = job(resources={"cpu": 1, "memory": "1GiB"})
    score = BinPack().bind(Context(spec, opening=frozenset({"opened"})))
    # in use but matching the request badly (memory left, the task mostly cpu) still comes first
    busy = node("busy", tasks=1, allocated={"memory": 3 * GIB})
    idle, opened = score(node("idle"), 0), score(node("opened"), 0)
    assert score(busy, 0) > idle and opened == idle + BINPACK_STEPS + 1
    # a job asking for nothing fills nothing: being in use counts for nothing
    nothing = BinPack().bind(Context(job(), opening=frozenset({"opened"})))
    assert nothing(node("busy", tasks=1), 0) == nothing(node("idle"), 0) == nothing(node("opened"), 0)


@pytest.mark.parametrize("faults, threshold, faulty", [
    ({}, 5, set()),
    ({"a": 4}, 5, set()),
    ({"a": 5, "b": 9, "c": 1}, 5, {"a", "b"}),
    ({"a": 5}, 0, set()),  # 0 turns the penalty off
    ({"a": 1}, 1, {"a"}),
])
def test_faulty_nodes(faults, threshold, faulty):
    ctx = Context(job(), faults, threshold)
    assert faulty_nodes(ctx) == faulty
    score = FaultyNode().bind(ctx)
    if not faulty:
        assert score is None  # sits the batch out: no cost per node
    else:
        assert all(score(node(name), 0) < score(node("healthy"), 0) for name in faulty)


def sort_names(rank, nodes_and_counts, ctx):
    key = rank.bind(ctx)
    return [n.name for n, count in sorted(nodes_and_counts, key=lambda pair: key(*pair))]


def test_spread_ranking_is_job_tasks_then_total_tasks_with_faulty_last():
    spec = job()
    candidates = [
        (node("busy-no-job", tasks=9), 0),
        (node("idle-one-job", tasks=1), 1),
        (node("quiet-no-job", tasks=2), 0),
        (node("faulty-empty", tasks=0), 0),
    ]
    assert ranking(spec).names() == [["faulty_node"], ["job_spread"], ["least_tasks"]]
    ctx = Context(spec, {"faulty-empty": 5})
    assert sort_names(ranking(spec), candidates, ctx) == ["quiet-no-job", "busy-no-job", "idle-one-job", "faulty-empty"]


def test_binpack_ranking_is_in_use_match_and_fullness_then_spread():
    spec = job(strategy="binpack", resources={"cpu": 1, "memory": "1GiB"})
    candidates = [
        (node("empty"), 0),
        (node("full-two-job", allocated={"cpu": 2000, "memory": 2 * GIB}), 2),
        (node("full-one-job", allocated={"cpu": 2000, "memory": 2 * GIB}), 1),
    ]
    assert ranking(spec).names() == [["faulty_node"], ["binpack"], ["job_spread"], ["least_tasks"]]
    assert sort_names(ranking(spec), candidates, Context(spec)) == ["full-one-job", "full-two-job", "empty"]


class Fixed(Scorer):
    def __init__(self, name, scores):
        self.name, self.scores = name, scores

    def bind(self, ctx):
        return lambda n, count: self.scores[n.name]


def test_weights_combine_scorers_within_a_tier():
    a = Fixed("a", {"x": 100, "y": 0})
    b = Fixed("b", {"x": 0, "y": 60})
    nodes_and_counts = [(node("x"), 0), (node("y"), 0)]
    ctx = Context(job())
    assert sort_names(Ranking((((a, 1), (b, 1)),)), nodes_and_counts, ctx) == ["x", "y"]
    assert sort_names(Ranking((((a, 1), (b, 2)),)), nodes_and_counts, ctx) == ["y", "x"]
    # tiers are lexicographic: a later tier only breaks ties left by earlier ones
    assert sort_names(Ranking((((a, 1),), ((b, 100),))), nodes_and_counts, ctx) == ["x", "y"]
    assert sort_names(Ranking((((Fixed("tie", {"x": 1, "y": 1}), 1),), ((b, 1),))), nodes_and_counts, ctx) == ["y", "x"]
    # up to any number of tiers
    tiers = tuple(((Fixed(f"t{i}", {"x": 0, "y": 0}), 1),) for i in range(4)) + (((b, 1),),)
    assert sort_names(Ranking(tiers), nodes_and_counts, ctx) == ["y", "x"]


@settings(max_examples=150, deadline=None)
@given(capacities=st.lists(st.tuples(st.sampled_from([0, 500, 4000, 16000]), st.sampled_from([0, GIB, 64 * GIB]),
                                     st.sampled_from([None, 0, 2, 8])), min_size=1, max_size=12),
       used=st.lists(st.floats(0, 1.2), min_size=36, max_size=36),
       request=st.tuples(st.sampled_from([0, 100, 1000, 3000]), st.sampled_from([0, 2**20, GIB, 8 * GIB]),
                         st.sampled_from([0, 1])),
       tasks=st.lists(st.integers(0, 3), min_size=12, max_size=12), opened=st.sets(st.integers(0, 11)))
def test_binpack_scores_the_same_per_node_and_as_columns(capacities, used, request, tasks, opened):
    """The per-node scorers (small clusters) and their columns (large ones) give the same
    numbers, to the last bit, so both paths rank nodes alike."""
    nodes = []
    for i, (cpu, memory, gpu) in enumerate(capacities):
        capacity = {"cpu": cpu, "memory": memory, **({"gpu": gpu} if gpu is not None else {})}
        n = Node(name=f"n{i}", capacity=capacity, tasks=tasks[i],
                 allocated={r: int(amount * used[3 * i + k]) for k, (r, amount) in enumerate(capacity.items())})
        nodes.append(n)
    cpu, memory, gpu = request
    spec = job(resources={"cpu": f"{cpu}m", "memory": memory, **({"gpu": gpu} if gpu else {})})
    ctx = Context(spec, opening=frozenset(f"n{i}" for i in opened))
    table = NodeTable()
    table.sync(nodes)
    rows = np.arange(len(nodes))
    per_node = BinPack().bind(ctx)
    assert BinPack().vector(ctx, table, rows, np.zeros(len(nodes))).tolist() == [per_node(n, 0) for n in nodes]

"""Scorers alone, and the rankings they form; no Redis."""

import pytest

from scheduler.model import make_node, parse_job
from scheduler.engine.scoring import (MAX_NODE_SCORE, BinPack, Context, FaultyNode, JobSpread, LeastTasks, Ranking,
                               Scorer, faulty_nodes, ranking)

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


@pytest.mark.parametrize("allocated, expected", [
    ({"cpu": 3000, "memory": 3 * GIB}, MAX_NODE_SCORE),  # exactly full after the task
    ({}, pytest.approx(MAX_NODE_SCORE * (20 - 10**0.75 - 10**0.75) / 18)),
    ({"cpu": 3000}, pytest.approx(MAX_NODE_SCORE * (20 - 1 - 10**0.75) / 18)),
])
def test_binpack_scores_fullness_after_placement(allocated, expected):
    score = BinPack().bind(Context(job(resources={"cpu": 1, "memory": "1GiB"})))
    assert score(node("a", allocated=allocated), 0) == expected


def test_binpack_prefers_the_node_left_fullest_across_cpu_and_memory():
    score = BinPack().bind(Context(job(resources={"cpu": 1, "memory": "1GiB"})))
    half = node("half", allocated={"cpu": 2000, "memory": 2 * GIB})
    cpu_only = node("cpu-only", allocated={"cpu": 3000})  # full in cpu, idle in memory
    empty = node("empty")
    bigger = node("bigger", cpu=8, memory="8GiB", allocated={"cpu": 2000, "memory": 2 * GIB})
    ranked = sorted([empty, cpu_only, bigger, half], key=lambda n: -score(n, 0))
    assert [n.name for n in ranked] == ["half", "cpu-only", "bigger", "empty"]
    # scores stay within 0..MAX_NODE_SCORE, also for a node with no memory capacity at all
    assert 0 <= score(node("nomem", memory=0), 0) <= MAX_NODE_SCORE
    assert 0 <= score(empty, 0) <= MAX_NODE_SCORE


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


def test_binpack_ranking_is_fullness_then_spread():
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

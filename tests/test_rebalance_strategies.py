"""The rebalance strategies, pure: each on small clusters written out as tables (what runs
where before, what may move), checked for where tasks end and what each move says.
No Redis: the plan runs on a copy of the cluster (scheduler/engine/cluster.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.engine import rebalance
from scheduler.engine.cluster import Cluster, Resident
from scheduler.engine.rebalance.job_spread import skew
from scheduler.model import make_node, parse_job
from scheduler.model.domains import node_domains
from scheduler.model.quantities import CPU, MEMORY


@dataclass
class Case:
    name: str
    nodes: dict[str, dict]  # node -> make_node keywords beyond the name (cpu 4, memory 8GiB by default)
    tasks: dict[str, dict[str, int]]  # job -> node -> how many of its tasks run there
    specs: dict[str, dict] = field(default_factory=dict)  # job -> spec fields beyond the defaults
    strategy: str = "spread"
    max_moves: int | None = None
    job: str | None = None
    moves: int | None = None  # how many moves the plan has (None: not checked)
    after: dict[str, dict[str, int]] | None = None  # job -> node -> tasks after the plan
    strategies: set[str] | None = None  # the strategies that found the moves


def build(case: Case) -> Cluster:
    nodes = [make_node(name, **{"cpu": 4, "memory": "8GiB", **extra}) for name, extra in case.nodes.items()]
    by_name = {node.name: node for node in nodes}
    specs = {}
    for job, where in case.tasks.items():
        raw = {"id": job, "replicas": sum(where.values()), "resources": {"cpu": 0.5, "memory": "256MiB"},
               **case.specs.get(job, {})}
        specs[job] = parse_job(raw)
    residents = []
    for job, where in case.tasks.items():
        spec = specs[job]
        for name, count in sorted(where.items()):
            node = by_name[name]
            for i in range(count):
                for resource, amount in spec.resources.items():
                    node.allocated[resource] = node.allocated.get(resource, 0) + amount
                node.tasks += 1
                residents.append(Resident(f"{job}.{name}.{i}", job, name, dict(spec.resources), (), spec.priority,
                                          movable=spec.type == "service",
                                          domains=tuple(node_domains(node)) if spec.counted else None))
    return Cluster(nodes, residents, specs)


def counts(cluster: Cluster, job: str) -> dict[str, int]:
    return {node: n for node, n in cluster.counts.get(job, {}).items() if n}


FOUR = {f"n{i}": {} for i in range(1, 5)}
FIVE = {f"n{i}": {} for i in range(1, 6)}
CASES = [
    Case("two new nodes get the tasks of the crowded ones", FIVE, {"web": {"n1": 3, "n2": 3, "n3": 2}},
         moves=2, after={"web": {"n1": 2, "n2": 2, "n3": 2, "n4": 1, "n5": 1}}, strategies={"job-spread"}),
    Case("a spread within one already moves nothing", FIVE, {"web": {"n1": 2, "n2": 2, "n3": 1, "n4": 1, "n5": 1}},
         moves=0),
    Case("batch tasks are never moved", FIVE, {"crunch": {"n1": 6}}, specs={"crunch": {"type": "batch"}}, moves=0),
    Case("a binpack job is left packed", FIVE, {"db": {"n1": 4}}, specs={"db": {"strategy": "binpack"}}, moves=0),
    Case("max_moves bounds the plan", FIVE, {"web": {"n1": 8}}, max_moves=3, moves=3),
    Case("only the job asked for moves", FIVE, {"web": {"n1": 4}, "api": {"n2": 4}}, job="api",
         after={"web": {"n1": 4}, "api": {"n2": 1, "n3": 1, "n4": 1, "n5": 1}}),
    Case("a node without room gets nothing", {"n1": {}, "n2": {"cpu": 0.25}}, {"web": {"n1": 4}}, moves=0),
    Case("constraints the node no longer meets", {"n1": {"labels": {"zone": "b"}}, "n2": {"labels": {"zone": "a"}},
                                                  "n3": {"labels": {"zone": "a"}}},
         {"web": {"n1": 1, "n2": 1}}, specs={"web": {"constraints": ["node.labels.zone == a"]}},
         after={"web": {"n2": 1, "n3": 1}}, strategies={"node-affinity"}),
    Case("a NoSchedule taint the job does not tolerate", {"n1": {"taints": ["dedicated=gpu:NoSchedule"]}, "n2": {}},
         {"web": {"n1": 1}}, strategy="node-taints", after={"web": {"n2": 1}}, strategies={"node-taints"}),
    Case("a tolerated taint keeps the task", {"n1": {"taints": ["dedicated=gpu:NoSchedule"]}, "n2": {}},
         {"web": {"n1": 1}}, specs={"web": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}},
         strategy="node-taints", moves=0),
    Case("duplicates down to the upper average", FOUR, {"web": {"n1": 4, "n2": 1}}, strategy="duplicates",
         after={"web": {"n1": 2, "n2": 1, "n3": 1, "n4": 1}}, strategies={"duplicates"}),
    Case("a broken topology spread", {"a1": {"labels": {"zone": "a"}}, "a2": {"labels": {"zone": "a"}},
                                      "b1": {"labels": {"zone": "b"}}, "b2": {"labels": {"zone": "b"}}},
         {"web": {"a1": 2, "a2": 2}}, specs={"web": {"topology_spread": [{"attribute": "node.labels.zone"}]}},
         strategy="topology-spread", moves=2, strategies={"topology-spread"}),
    Case("busy nodes give to idle ones", {"n1": {}, "n2": {}, "n3": {}},
         {"a": {"n1": 4}, "b": {"n1": 2}, "c": {"n2": 3}}, strategy="low-utilization",
         after={"a": {"n1": 2, "n3": 2}, "b": {"n1": 2}, "c": {"n2": 3}}, strategies={"low-utilization"}),
    Case("pack empties the least used node", {"n1": {}, "n2": {}, "n3": {}},
         {"a": {"n1": 3, "n2": 1}, "b": {"n1": 1, "n3": 1}}, strategy="pack", moves=2,
         after={"a": {"n1": 4}, "b": {"n1": 2}}, strategies={"high-utilization"}),
    Case("pack keeps a node whose batch task cannot move, and empties the other onto it", {"n1": {}, "n2": {}},
         {"a": {"n1": 3, "n2": 1}, "crunch": {"n2": 1}}, specs={"crunch": {"type": "batch"}}, strategy="pack",
         moves=3, after={"a": {"n2": 4}, "crunch": {"n2": 1}}),
    Case("pack moves nothing that would only open an empty node", {"n1": {}, "n2": {}}, {"a": {"n1": 1}},
         strategy="pack", moves=0),
    Case("pack leaves a node whose tasks do not all fit elsewhere", {"n1": {"cpu": 2}, "n2": {}},
         {"a": {"n1": 3, "n2": 2}}, strategy="pack", moves=0),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_strategy(case: Case):
    cluster = build(case)
    moves = rebalance.plan(cluster, case.strategy, case.max_moves, case.job)
    if case.moves is not None:
        assert len(moves) == case.moves, [m.to_dict() for m in moves]
    if case.after is not None:
        for job, where in case.after.items():
            assert counts(cluster, job) == where, (job, [m.to_dict() for m in moves])
    if case.strategies is not None:
        assert {m.strategy for m in moves} == case.strategies
    for move in moves:
        said = move.to_dict()
        assert said["from"] != said["to"] and said["score"]["gain"] > 0 and said["reason"]
        assert case.job is None or move.job == case.job


def test_each_move_says_what_it_improves_and_by_how_much():
    cluster = build(CASES[0])
    first = rebalance.plan(cluster, "spread")[0].to_dict()
    assert first["strategy"] == "job-spread" and first["from"] in ("n1", "n2") and first["to"] in ("n4", "n5")
    assert first["score"] == {"name": "tasks of the job on its node", "before": 3, "after": 1, "gain": 2}
    assert "skew over 5 nodes goes from 3 to 3" in first["reason"]


def test_moves_are_make_before_break_on_the_copy():
    """A target needs room for the new task while the old one still holds its node:
    here the only other node has room for one task at a time."""
    case = Case("", {"n1": {"cpu": 2}, "n2": {"cpu": 0.5}}, {"web": {"n1": 2}})
    cluster = build(case)
    moves = rebalance.plan(cluster, "job-spread")
    assert len(moves) == 1 and counts(cluster, "web") == {"n1": 1, "n2": 1}
    assert cluster.nodes["n2"].allocated[CPU] == 500 and cluster.nodes["n1"].allocated[CPU] == 500


def test_preferences_are_balanced_by_their_attribute_first():
    nodes = {"a1": {"labels": {"zone": "a"}}, "a2": {"labels": {"zone": "a"}}, "b1": {"labels": {"zone": "b"}}}
    case = Case("", nodes, {"web": {"a1": 2, "a2": 2}}, specs={"web": {"preferences": [{"spread":
                                                                                        "node.labels.zone"}]}})
    cluster = build(case)
    moves = rebalance.plan(cluster, "job-spread")
    assert counts(cluster, "web") == {"a1": 1, "a2": 1, "b1": 2}
    assert "node.labels.zone a holds 4, b 0" in moves[0].reason


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=2, max_size=7),
       st.integers(min_value=0, max_value=4))
def test_spread_ends_with_a_skew_of_at_most_one_and_never_moves_more_than_it_must(layout, new_nodes):
    """Any crowding over old nodes and any number of new ones: the job ends within a skew
    of 1, in no more moves than the tasks above the even share."""
    names = [f"n{i}" for i in range(len(layout) + new_nodes)]
    where = {name: n for name, n in zip(names, layout) if n}
    if not where:
        return
    case = Case("", {name: {"cpu": 8, "memory": "16GiB"} for name in names}, {"web": where})
    cluster = build(case)
    moves = rebalance.plan(cluster, "job-spread")
    final = [cluster.count("web", name) for name in names]
    assert sum(final) == sum(layout) and max(final) - min(final) <= 1
    share = math.ceil(sum(layout) / len(names))
    assert len(moves) <= sum(max(0, n - share) for n in layout) + len(names)
    assert skew(cluster.counts["web"], list(cluster.nodes.values())) <= 1

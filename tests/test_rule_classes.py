"""The rule path by classes of alike nodes (scheduler/engine/rule_classes.py) places
exactly as the node-by-node loop it stands in for (scheduler/engine/rule_placement.py):
the same assignments in the same order, and the same nodes, job counts and domain counts
after, over random clusters, jobs, rules and counts (hypothesis); no Redis."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.engine import rule_classes, rule_placement
from scheduler.engine.domains import DomainCounts
from scheduler.engine.node_table import NodeTable
from scheduler.engine.placement import PlacementOptions, Placer
from scheduler.engine.scoring import Context, faulty_nodes
from scheduler.model import DOWN, Node, make_node, parse_job
from scheduler.model.domains import node_domains
from scheduler.model.placement_rules import AffinityRule, AntiRule, DistinctRule, Rules, SoftTerm, SpreadRule

GIB = 2**30
JOBS = ("j", "x", "y")  # j is the job placed
ATTRIBUTES = ("node.labels.zone", "node.labels.rack", "node.hostname", "node.name")
TAINTS = ("spot:PreferNoSchedule", "slow:PreferNoSchedule", "maint:NoExecute", "gpu:NoSchedule")


@st.composite
def clusters(draw):
    nodes = []
    for i in range(draw(st.integers(1, 14))):
        labels = {}
        zone, rack = draw(st.sampled_from(["a", "b", "c", ""])), draw(st.sampled_from(["r1", "r2", ""]))
        if zone:
            labels["zone"] = zone
        if rack:
            labels["rack"] = rack
        cpu = draw(st.sampled_from([1, 2, 4]))
        node = make_node(f"n{i}", cpu=cpu, memory=4 * GIB, labels=labels,
                         hostname=draw(st.sampled_from([None, None, "h1", "h2"])),
                         taints=draw(st.lists(st.sampled_from(TAINTS), unique=True, max_size=2)) or None)
        node.allocated = {"cpu": 1000 * draw(st.sampled_from([0, 0, 1])),
                          "memory": draw(st.sampled_from([0, 0, GIB, 2 * GIB]))}
        node.tasks = draw(st.integers(0, 3))
        cpu = max(cpu, 1 + node.allocated["cpu"] // 1000)
        node.capacity["cpu"] = 1000 * cpu
        node.slots = draw(st.sampled_from([0, 0, node.tasks + 1, node.tasks + 3]))
        if draw(st.integers(0, 9)) == 0:
            node.status = DOWN
        if draw(st.integers(0, 9)) == 0:
            node.ports = {80: "old"}
        nodes.append(node)
    return nodes


@st.composite
def cases(draw):
    nodes = draw(clusters())
    names = [n.name for n in nodes]
    spec = {"id": "j", "resources": {"cpu": draw(st.sampled_from(["100m", "250m", "500m", "1"])), "memory": "256MiB"},
            "max_per_node": draw(st.sampled_from([0, 0, 0, 1, 2])), "labels": {"app": "j"},
            "strategy": draw(st.sampled_from(["spread", "spread", "binpack"])),
            "ports": draw(st.sampled_from([[], [], [], [80]]))}
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.sampled_from([[{"key": "spot", "operator": "Exists"}],
                                                    [{"key": "maint", "operator": "Exists", "effect": "NoExecute",
                                                      "toleration_seconds": 5}],
                                                    [{"key": "gpu", "operator": "Exists"}]]))
    if draw(st.booleans()):
        spec["affinities"] = [{"attribute": "node.labels.zone", "value": draw(st.sampled_from("abc")),
                               "weight": draw(st.sampled_from([-50, 20, 50]))}]
    preference = draw(st.sampled_from([None, {"spread": "node.labels.zone"},
                                       {"spread": "node.labels.zone", "targets": {"a": 60, "b": 20}}]))
    if preference:
        spec["preferences"] = [preference]
    job = parse_job(spec)
    attributes = st.sampled_from(ATTRIBUTES)
    jobs = st.lists(st.sampled_from(JOBS), min_size=1, max_size=2, unique=True).map(lambda js: tuple(sorted(js)))
    values = ["a", "b", "c", "r1", "r2", "h1", "h2", *names]
    spreads = tuple(SpreadRule(a, draw(st.integers(1, 2)), draw(st.integers(0, 3)), js, draw(st.booleans()),
                               tuple(draw(st.lists(st.sampled_from(values), unique=True, max_size=4))),
                               draw(st.booleans()), "missing", "skew")
                    for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=2)))
    distinct = tuple(DistinctRule(a, draw(st.integers(1, 6)), "missing", "reached")
                     for a in draw(st.lists(attributes, max_size=1)) if draw(st.booleans()))
    affinity = tuple(AffinityRule(a, js, draw(st.booleans()), "not met")
                     for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=1)))
    anti = tuple(AntiRule(a, js, "anti") for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=1))
                 if draw(st.booleans()))
    soft = tuple(SoftTerm(a, js, draw(st.sampled_from([-80, 30, 100])))
                 for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=2)))
    rules = Rules("j", True, spreads, distinct, affinity, anti, soft) if draw(st.integers(0, 5)) else None
    counts = DomainCounts()
    for job_id in JOBS:
        for node in nodes:
            for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 2)) == 0 else 0):
                counts.add(job_id, node)
    job_counts = {name: c for name in names if (c := draw(st.integers(0, 2)) if draw(st.booleans()) else 0)}
    faults = {name: 5 for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=2))}
    return nodes, job, rules, counts, job_counts, faults, draw(st.integers(1, 20)), draw(st.integers(0, 3))


def place_with(module, case):
    nodes, job, rules, counts, job_counts, faults, tasks, seed = copy.deepcopy(case)
    table = NodeTable()
    table.sync(nodes)
    noise = np.random.default_rng(seed).random(len(nodes)) if seed else np.zeros(0)
    if seed == 2:  # ties: whole-number noise
        noise = np.floor(noise * 2)
    ctx = Context(job, faults, 5)
    placed = module.place(table, np.arange(len(nodes)), job, [f"j.{i}" for i in range(tasks)], job_counts, True,
                          ctx, faulty_nodes(ctx), rules, counts, noise)
    state = [(n.name, n.tasks, n.allocated, n.ports) for n in nodes]
    columns = (table.tasks.tolist(), {r: c.tolist() for r, c in table.allocated.items()})
    return placed, state, job_counts, counts.counts, columns


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_classes_place_as_the_node_by_node_loop(case):
    expected = place_with(rule_placement, case)
    got = place_with(rule_classes, case)
    event(f"by classes: {got[0] is not None}")
    if got[0] is None:  # not a group for classes: nothing was changed
        nodes, _, _, counts, job_counts, _, _, _ = case
        assert got[1:4] == ([(n.name, n.tasks, n.allocated, n.ports) for n in nodes], job_counts, counts.counts)
        return
    event(f"placed {len(expected[0])}")
    assert got == expected, describe(case)


def describe(case) -> str:
    nodes, job, rules, counts, job_counts, faults, tasks, seed = case
    lines = [f"{n.name} {n.labels} host={n.hostname} taints={[str(t) for t in n.taints]} cap={n.capacity} "
             f"alloc={n.allocated} tasks={n.tasks} slots={n.slots} {n.status} ports={n.ports}" for n in nodes]
    return "\n".join([*lines, f"job {job}", f"rules {rules}", f"counts {counts.counts}", f"job_counts {job_counts}",
                      f"faults {faults} tasks {tasks} seed {seed}"])


def test_a_large_cluster_is_placed_by_classes_and_agrees():
    """The bench's shape at a smaller size: 400 nodes in 4 zones and 40 racks, one in 10
    with a PreferNoSchedule taint; a hard zone spread, anti-affinity by hostname, a soft
    zone affinity; the classes are few and their placements the loop's."""
    nodes = [make_node(f"n{i:03d}", cpu=4, memory=8 * GIB, labels={"zone": f"z{i % 4}", "rack": f"r{i % 40}"},
                       taints=["spot:PreferNoSchedule"] if i % 10 == 5 else None) for i in range(400)]
    for i, node in enumerate(nodes):
        node.tasks = i % 3
    job = parse_job({"id": "j", "resources": {"cpu": 1}, "labels": {"app": "j"},
                     "affinities": [{"attribute": "node.labels.zone", "value": "z1", "weight": 50}]})
    rules = Rules("j", True, (SpreadRule("node.labels.zone", 1, 0, ("j",), True, ("z0", "z1", "z2", "z3"), True,
                                         "missing", "skew"),),
                  anti=(AntiRule("node.hostname", ("j",), "anti"),))
    case = (nodes, job, rules, DomainCounts(), {}, {}, 120, 1)
    got = place_with(rule_classes, case)
    assert got[0] is not None and len(got[0]) == 120
    assert got == place_with(rule_placement, case)
    zones = [int(name[1:]) % 4 for _, name in got[0]]
    assert max(zones.count(z) for z in range(4)) - min(zones.count(z) for z in range(4)) <= 1
    assert len({name for _, name in got[0]}) == 120  # one per host


def test_the_placer_uses_classes_where_it_can():
    nodes = [make_node(f"n{i}", cpu=4, memory=8 * GIB, labels={"zone": f"z{i % 2}"}) for i in range(8)]
    job = parse_job({"id": "j", "replicas": 4, "labels": {"app": "j"},
                     "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 1}]})
    used = []
    original = rule_classes.place

    def spy(*args):
        used.append(original(*args))
        return used[-1]

    rule_classes.place, saved = spy, rule_classes.place
    try:
        from scheduler.engine.rules import RuleIndex, resolve

        placer = Placer(PlacementOptions(seed=1))
        rules = resolve(job, RuleIndex(), lambda attribute: ["z0", "z1"])
        result = placer.place(nodes, job, [f"j.{i}" for i in range(4)], job_counts={}, rules=rules,
                              domains=DomainCounts())
    finally:
        rule_classes.place = saved
    assert used and used[0] is not None and len(result.assignments) == 4
    assert sorted(int(name[1:]) % 2 for _, name in result.assignments) == [0, 0, 1, 1]


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_explanations_from_the_table_count_the_domain_rules_as_node_by_node(case):
    """What a group that does not fit is told: the filters answered from the table's
    columns, then the domain rules of each node that passes them, count as asking every
    node in turn does."""
    from scheduler.engine.explanations import explain_rules, explain_table
    from scheduler.engine.filters import filter_pipeline
    from scheduler.engine.placement import _static_key
    from scheduler.engine.rules import domain_misfit

    nodes, job, rules, counts, job_counts, _, _, _ = case
    if rules is None or not rules.hard:
        return
    pipeline = filter_pipeline(job)
    table = NodeTable()
    table.sync(nodes)
    got = explain_table(table, pipeline, job_counts, _static_key(job), lambda node: domain_misfit(node, rules, counts))
    assert got == explain_rules(pipeline, nodes, job_counts, rules, counts)


@settings(max_examples=100, deadline=None)
@given(nodes=clusters(), affinities=st.lists(st.tuples(st.sampled_from(["node.labels.zone", "node.labels.rack",
                                                                        "node.hostname"]),
                                                       st.sampled_from(["==", "!="]),
                                                       st.sampled_from(["a", "b", "r1", "h1"]),
                                                       st.sampled_from([-100, -30, 10, 50, 100])),
                                             min_size=1, max_size=3))
def test_the_affinity_column_is_each_nodes_score(nodes, affinities):
    """The soft affinity scores the rule path reads from the node table, worked out once
    per attribute value, are each node's own (Nomad's node affinity)."""
    from scheduler.engine import affinity
    from scheduler.engine.rule_placement import affinity_column

    job = parse_job({"id": "j", "affinities": [{"attribute": a, "operator": op, "value": v, "weight": w}
                                               for a, op, v, w in affinities]})
    table = NodeTable()
    table.sync(nodes)
    assert affinity_column(table, job.affinities).tolist() == [affinity.score(n, job.affinities) for n in nodes]

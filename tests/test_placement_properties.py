"""Properties of placement over random clusters and jobs (hypothesis); no Redis.

Safety: no placement exceeds a node's capacity or its agent's task slots, breaks a
constraint or plugin or readiness rule, reuses a host port or passes max_per_node. Completeness: a task is left
unplaced only when no node fits. Evenness: a batch spreads as evenly as one-at-a-time
placement; with bin packing, a node is filled before the next is opened.
"""

import copy
from collections import Counter
from contextlib import contextmanager

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import fewest
from scheduler.engine.filters import filter_pipeline
from scheduler.model import DOWN, DRAIN, PAUSE, Node, parse_job
from scheduler.engine.explanations import explain_table
from scheduler.engine.placement import PlacementOptions, Placer, _static_key

GIB = 2**30
PORTS = (80, 443)
CONSTRAINTS = ("node.labels.zone!=c", "node.labels.ssd is_set", "node.platform.os==linux", "node.role in worker")


@pytest.fixture(autouse=True)
def _each_placement_path(both_placement_paths):
    """Every test here runs on both placement paths (see conftest)."""


@st.composite
def nodes_st(draw, min_size=1, max_size=10):
    count = draw(st.integers(min_size, max_size))
    nodes = []
    for i in range(count):
        capacity = {"cpu": draw(st.sampled_from([0, 500, 1000, 2000, 4000])),
                    "memory": draw(st.sampled_from([0, GIB, 4 * GIB]))}
        if draw(st.booleans()):
            capacity["gpu"] = draw(st.integers(0, 2))
        allocated = {r: draw(st.integers(0, amount)) for r, amount in capacity.items()}
        labels = {}
        zone = draw(st.sampled_from(["a", "b", "c", None]))
        if zone:
            labels["zone"] = zone
        if draw(st.booleans()):
            labels["ssd"] = "yes"
        nodes.append(Node(
            name=f"n{i}", capacity=capacity, allocated=allocated, labels=labels,
            os=draw(st.sampled_from(["linux", "linux", "windows"])),
            role=draw(st.sampled_from(["worker", "worker", "manager"])),
            plugins=frozenset(draw(st.lists(st.sampled_from(["net", "vol"]), unique=True))),
            availability=draw(st.sampled_from(["active"] * 4 + [PAUSE, DRAIN])),
            status=draw(st.sampled_from(["ready"] * 5 + [DOWN])),
            ports={p: "old" for p in draw(st.lists(st.sampled_from(PORTS), unique=True, max_size=1))},
            tasks=(tasks := draw(st.integers(0, 6))),
            # an agent's task slots near its live tasks (fewer: lowered by a restart); 0: no agent
            slots=draw(st.sampled_from([0, 0, 0, max(1, tasks - 1), tasks or 1, tasks + 1, tasks + 2])),
        ))
    return nodes


@st.composite
def jobs_st(draw, strategy=None, preferences=None, ports=None, max_per_node=None):
    resources = {"cpu": f"{draw(st.sampled_from([0, 250, 500, 1000]))}m",
                 "memory": draw(st.sampled_from([0, 256 * 2**20, GIB]))}
    if draw(st.booleans()):
        resources["gpu"] = draw(st.integers(0, 1))
    spec = {
        "id": "job",
        "resources": resources,
        "constraints": draw(st.lists(st.sampled_from(CONSTRAINTS), unique=True, max_size=2)),
        "plugins": draw(st.lists(st.sampled_from(["net", "vol"]), unique=True, max_size=1)),
        "ports": ports if ports is not None else draw(st.lists(st.sampled_from(PORTS), unique=True, max_size=1)),
        "max_per_node": max_per_node if max_per_node is not None else draw(st.sampled_from([0, 0, 1, 2, 3])),
        "strategy": strategy or draw(st.sampled_from(["spread", "binpack"])),
    }
    if preferences is None:
        preferences = draw(st.sampled_from([[], [{"spread": "node.labels.zone"}],
                                            [{"spread": "node.labels.zone"}, {"spread": "node.labels.ssd"}]]))
    spec["preferences"] = preferences
    return parse_job(spec)


def initial_counts(draw_nodes, data):
    return {n.name: c for n in draw_nodes if (c := data.draw(st.integers(0, 3))) > 0}


def fits(node, job, job_counts) -> bool:
    return filter_pipeline(job).check(node, job_counts.get(node.name, 0)) is None


def run(nodes, job, tasks, job_counts, faults=None, seed=0, one_at_a_time=False):
    placer = Placer(PlacementOptions(seed=seed))
    ids = [f"t{i}" for i in range(tasks)]
    if not one_at_a_time:
        return placer.place(nodes, job, ids, job_counts=job_counts, faults=faults).assignments
    assignments = []
    for task_id in ids:
        assignments += placer.place(nodes, job, [task_id], job_counts=job_counts, faults=faults).assignments
    return assignments


@settings(max_examples=120, deadline=None)
@given(nodes=nodes_st(), job=jobs_st(), tasks=st.integers(1, 25), data=st.data(),
       faults=st.dictionaries(st.sampled_from([f"n{i}" for i in range(10)]), st.integers(0, 8), max_size=3))
def test_placements_are_safe_and_complete(nodes, job, tasks, data, faults):
    before = copy.deepcopy(nodes)
    counts = initial_counts(nodes, data)
    start_counts = dict(counts)
    placer = Placer(PlacementOptions(seed=data.draw(st.integers(0, 3))))
    result = placer.place(nodes, job, [f"t{i}" for i in range(tasks)], job_counts=counts, faults=faults)

    assert [t for t, _ in result.assignments] + result.unplaced == [f"t{i}" for i in range(tasks)]
    placed = Counter(name for _, name in result.assignments)
    pipeline = filter_pipeline(job)
    for old, new in zip(before, nodes):
        got = placed.get(new.name, 0)
        assert counts.get(new.name, 0) == start_counts.get(new.name, 0) + got
        assert new.tasks == old.tasks + got
        if not got:
            assert (new.allocated, new.ports) == (old.allocated, old.ports)
            continue
        # it fitted when it was chosen: static filters hold, and so does the dynamic rule
        assert pipeline.static_check(new) is None
        assert all(c.matches(new) for c in job.constraints) and set(job.plugins) <= new.plugins
        assert new.status == "ready" and new.availability == "active"
        assert not new.slots or new.tasks <= new.slots  # an agent's slots are never overfilled
        for resource, amount in job.resources.items():
            assert new.allocated.get(resource, 0) == old.allocated.get(resource, 0) + got * amount
            if amount:
                assert new.allocated[resource] <= new.capacity.get(resource, 0)
        if job.ports:
            assert got == 1 and not set(job.ports) & set(old.ports)
            assert {new.ports[p] for p in job.ports} == {t for t, name in result.assignments if name == new.name}
        if job.max_per_node:
            assert counts[new.name] <= max(job.max_per_node, start_counts.get(new.name, 0))
    # complete: a task is left over only when no node can take one more
    if result.unplaced:
        assert not any(fits(n, job, counts) for n in nodes)
        assert result.explanation.available == 0 and result.explanation.nodes_evaluated == len(nodes)
        assert sum(result.explanation.reasons.values()) == len(nodes)
    else:
        assert result.explanation is None


def assert_as_even_as_one_at_a_time(nodes, job, start, counts):
    """A node that got a task now holds at most one more than any node that still has room:
    the bound one-at-a-time placement keeps, since it always picks the fewest."""
    with_room = [counts.get(n.name, 0) for n in nodes if fits(n, job, counts)]
    got = [counts[n.name] for n in nodes if counts.get(n.name, 0) > start.get(n.name, 0)]
    if with_room and got:
        assert max(got) <= min(with_room) + 1


@settings(max_examples=100, deadline=None)
@given(nodes=nodes_st(), job=jobs_st(strategy="spread", preferences=[]), tasks=st.integers(1, 30), data=st.data())
def test_batched_spread_is_as_even_as_one_at_a_time(nodes, job, tasks, data):
    counts = initial_counts(nodes, data)
    single_nodes, single_counts = copy.deepcopy(nodes), dict(counts)
    start = dict(counts)

    batched = run(nodes, job, tasks, counts, seed=1)
    one_by_one = run(single_nodes, job, tasks, single_counts, seed=1, one_at_a_time=True)

    assert len(batched) == len(one_by_one)
    assert_as_even_as_one_at_a_time(nodes, job, start, counts)
    assert_as_even_as_one_at_a_time(single_nodes, job, start, single_counts)


@settings(max_examples=60, deadline=None)
@given(tasks=st.integers(1, 60), per_batch=st.integers(1, 20), cpu=st.sampled_from([1000, 1500, 4000]))
def test_spread_counts_on_eligible_nodes_with_room_differ_by_at_most_one(tasks, per_batch, cpu):
    # uniform nodes: whatever the batching, the job's counts end within one of each other
    nodes = [Node(name=f"n{i}", capacity={"cpu": cpu, "memory": 8 * GIB}) for i in range(7)]
    job = parse_job({"id": "job", "resources": {"cpu": "500m"}})
    counts, placer, done = {}, Placer(PlacementOptions(seed=tasks)), 0
    while done < tasks:
        ids = [f"t{i}" for i in range(done, min(tasks, done + per_batch))]
        placer.place(nodes, job, ids, job_counts=counts)
        done += len(ids)
    room = [counts.get(n.name, 0) for n in nodes if fits(n, job, counts)]
    full = [counts.get(n.name, 0) for n in nodes if not fits(n, job, counts)]
    if room:
        assert max(room) - min(room) <= 1
        assert all(c <= min(room) + 1 for c in full)


@settings(max_examples=80, deadline=None)
@given(nodes=nodes_st(max_size=12), job=jobs_st(strategy="spread", preferences=[{"spread": "node.labels.zone"}]),
       tasks=st.integers(1, 30), data=st.data())
def test_preference_groups_stay_within_one_while_they_have_room(nodes, job, tasks, data):
    counts = initial_counts(nodes, data)
    start = dict(counts)
    run(nodes, job, tasks, counts, seed=2)

    def group_total(zone):
        return sum(counts.get(n.name, 0) for n in nodes if n.labels.get("zone", "") == zone)

    zones = {n.labels.get("zone", "") for n in nodes}
    with_room = [group_total(z) for z in zones
                 if any(fits(n, job, counts) for n in nodes if n.labels.get("zone", "") == z)]
    got = [group_total(z) for z in zones
           if any(counts.get(n.name, 0) > start.get(n.name, 0) for n in nodes if n.labels.get("zone", "") == z)]
    if with_room and got:
        assert max(got) <= min(with_room) + 1
    for zone in zones:  # and within each group, as with no preference
        assert_as_even_as_one_at_a_time([n for n in nodes if n.labels.get("zone", "") == zone], job, start, counts)


@settings(max_examples=80, deadline=None)
@given(nodes=nodes_st(), tasks=st.integers(1, 30), cpu=st.sampled_from([250, 500, 1000]))
def test_binpack_fills_one_node_before_opening_the_next(nodes, tasks, cpu):
    job = parse_job({"id": "job", "strategy": "binpack", "resources": {"cpu": f"{cpu}m", "memory": "256MiB"}})
    counts = {}
    assignments = run(nodes, job, tasks, counts, seed=3)
    used = [n for n in nodes if counts.get(n.name)]
    # every node it moved on from was full: at most the last one opened still has room
    assert sum(fits(n, job, counts) for n in used) <= 1
    order = list(dict.fromkeys(name for _, name in assignments))
    assert [name for _, name in assignments] == [name for name in order for _ in range(counts[name])]


@settings(max_examples=150, deadline=None)
@given(nodes=nodes_st(max_size=14), job=jobs_st(), data=st.data())
def test_explanations_from_columns_match_the_pipeline(nodes, job, data):
    """The placer's column-based explanation counts exactly what the filter pipeline says,
    node by node, nominations included."""
    if data.draw(st.booleans()):
        from scheduler.model import Nomination

        nodes[0].nominations = {"other.1": Nomination("other.1", "other", data.draw(st.integers(0, 100)),
                                                      10**15, {"cpu": 500}, (80,))}
    counts = {n.name: data.draw(st.integers(0, 3)) for n in nodes}
    placer = Placer(PlacementOptions(seed=0, vector_min_nodes=1))
    placer._table.sync(nodes)
    from_columns = explain_table(placer._table, filter_pipeline(job), counts, _static_key(job))
    assert from_columns == filter_pipeline(job).explain(nodes, counts)


def test_the_column_path_is_taken_only_when_asked(both_placement_paths):
    nodes = [Node(name=f"n{i}", capacity={"cpu": 1000, "memory": GIB}) for i in range(3)]
    placer = Placer(PlacementOptions(seed=0))
    placement = placer.place(nodes, parse_job({"id": "j", "replicas": 2}), ["j.0", "j.1"], job_counts={})
    assert len(placement.assignments) == 2
    assert (len(placer._table.nodes) == 3) == (both_placement_paths == "columns")


class _ColumnsOnly(Placer):
    """The placer without its shortcut for rankings that come down to task counts."""

    @staticmethod
    def _ranks_by_tasks_alone(batch, ctx):
        return False


@settings(max_examples=150, deadline=None)
@given(nodes=nodes_st(max_size=14), job=jobs_st(strategy="spread", ports=[], max_per_node=0),
       tasks=st.integers(1, 12), independent=st.booleans())
def test_fewest_tasks_shortcut_places_as_the_columns_do(nodes, job, tasks, independent):
    """A spread job with nothing placed yet ranks nodes by their task count alone; the
    shortcut for it chooses exactly the nodes the full ranking columns choose."""
    ids = [f"t{i}" for i in range(tasks)]
    results = []
    for kind in (Placer, _ColumnsOnly):
        copies = copy.deepcopy(nodes)
        placer = kind(PlacementOptions(seed=3, vector_min_nodes=1))
        results.append(placer.place(copies, job, ids, job_counts={}, independent=independent).assignments)
    assert results[0] == results[1]
    assert results[0] or not any(fits(n, job, {}) for n in nodes)


@contextmanager
def _sorting_at_once():
    """The order is kept from a round's first call on (not only once sorting pays), so
    that these short runs walk it."""
    patience, fewest.PATIENCE = fewest.PATIENCE, 1
    try:
        yield
    finally:
        fewest.PATIENCE = patience


@settings(max_examples=100, deadline=None)
@given(nodes=nodes_st(max_size=14), jobs=st.lists(jobs_st(strategy="spread", ports=[], max_per_node=0), min_size=2,
                                                  max_size=6),
       tasks=st.lists(st.integers(1, 4), min_size=6, max_size=6), rounds=st.lists(st.booleans(), min_size=6,
                                                                                   max_size=6))
def test_fewest_tasks_order_kept_across_placements_places_as_the_columns_do(nodes, jobs, tasks, rounds):
    """Placements change task counts between calls, and a new round redraws the
    tie-breaks: the order the shortcut keeps must follow both, placing as the columns do."""
    results = []
    with _sorting_at_once():
        for kind in (Placer, _ColumnsOnly):
            copies = copy.deepcopy(nodes)
            placer = kind(PlacementOptions(seed=5, vector_min_nodes=1))
            out = []
            for i, job in enumerate(jobs):
                if rounds[i]:
                    placer.replaced([])
                ids = [f"{job.id}-{i}.{t}" for t in range(tasks[i])]
                out.append(placer.place(copies, job, ids, job_counts={}, independent=True).assignments)
            results.append(out)
    assert results[0] == results[1]


def test_fewest_tasks_shortcut_gives_way_when_few_nodes_qualify():
    """Nodes that qualify are too rare to find by walking the order (the shortcut gives
    up and the columns are scanned); either way the choice is the columns' one."""
    nodes = [Node(name=f"n{i:03d}", capacity={"cpu": 1000, "memory": GIB}, labels={"ssd": "yes"} if i % 97 == 5 else {},
                  tasks=i % 7) for i in range(300)]
    job = parse_job({"id": "j", "constraints": ["node.labels.ssd is_set"], "resources": {"cpu": "100m"}})
    results = []
    with _sorting_at_once():
        for kind in (Placer, _ColumnsOnly):
            placer = kind(PlacementOptions(seed=1, vector_min_nodes=1))
            results.append(placer.place(copy.deepcopy(nodes), job, ["j.0", "j.1"], job_counts={}).assignments)
    assert results[0] == results[1]
    assert {node for _, node in results[0]} <= {f"n{i:03d}" for i in range(300) if i % 97 == 5}

"""The pure parts of sched capacity: the binpacking estimator and the expanders, table-driven."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.engine.estimator import Item, estimate
from scheduler.engine.expanders import Option, choose, parse_chain, waste
from scheduler.model import SpecError

GIB = 1024 ** 3
NODE = {"cpu": 4000, "memory": 8 * GIB}


def items(n: int, cpu: int, memory_gib: float = 1, **extra) -> list[Item]:
    return [Item({"cpu": cpu, "memory": int(memory_gib * GIB)}, **extra) for _ in range(n)]


@pytest.mark.parametrize("tasks, limit, nodes, unplaced", [
    (items(8, 1000), None, 2, 0),                         # four 1-core tasks per 4-core node
    (items(9, 1000), None, 3, 0),                         # the ninth opens a node
    (items(3, 1000, 4), None, 2, 0),                      # memory binds: two 4 GiB tasks per 8 GiB
    (items(2, 3000) + items(2, 1000), None, 2, 0),        # decreasing: each small one fills a big one's node
    (items(1, 5000), None, 0, 1),                         # bigger than an empty node: left out
    (items(6, 2000), 2, 2, 2),                            # the limit leaves the rest out
    (items(4, 500, job="web", max_per_node=1), None, 4, 0),  # max_per_node: one per node
    (items(3, 500, ports=(80,)), None, 3, 0),             # a host port once per node
    ([Item({"cpu": 1000, "gpu": 1})], None, 0, 1),        # a resource the shape has none of
])
def test_the_estimator_packs_first_fit_decreasing(tasks, limit, nodes, unplaced):
    got = estimate(tasks, NODE, limit)
    assert got.nodes == nodes
    assert len(got.unplaced) == unplaced
    assert sorted(got.placed + got.unplaced) == list(range(len(tasks)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4000), st.integers(1, 8)), min_size=1, max_size=60))
def test_no_node_of_an_estimate_is_overfull_and_it_needs_at_most_11_9_of_the_bound_plus_one(sizes):
    tasks = [Item({"cpu": cpu, "memory": gib * GIB}) for cpu, gib in sizes]
    got = estimate(tasks, NODE)
    for members in got.bins:
        assert sum(tasks[i].resources["cpu"] for i in members) <= NODE["cpu"]
        assert sum(tasks[i].resources["memory"] for i in members) <= NODE["memory"]
    bound = max(sum(c for c, _ in sizes) / NODE["cpu"], sum(g for _, g in sizes) * GIB / NODE["memory"])
    assert got.nodes >= bound - 1e-9
    # First-fit decreasing in two dimensions has no 11/9 guarantee; every node but one is
    # at least half full in some resource, so it never needs more than twice the bound, plus one.
    assert got.nodes <= 2 * bound + 1


def option(pool, nodes, tasks, cpu_used, mem_used_gib, cost=1.0, priority=0):
    return Option(pool, nodes, tasks, {"cpu": 4000 * nodes, "memory": 8 * GIB * nodes},
                  {"cpu": cpu_used, "memory": mem_used_gib * GIB}, cost * nodes, priority)


CHEAP_WASTEFUL = option("cheap", 2, 4, 4000, 4, cost=1.0)     # half idle, 2 for 4 tasks
SNUG_DEAR = option("snug", 1, 4, 4000, 8, cost=3.0)           # nothing idle, 3 for 4 tasks
TOP = option("top", 3, 4, 4000, 4, cost=1.0, priority=10)


@pytest.mark.parametrize("chain, chosen", [
    (["least-waste"], "snug"),
    (["price"], "cheap"),
    (["priority"], "top"),
    (["most-tasks"], "snug"),                     # all place 4: the fewest nodes settle the tie
    (["priority", "least-waste"], "top"),
    (["price", "least-waste"], "cheap"),
])
def test_each_expander_chooses_as_the_autoscalers(chain, chosen):
    assert choose([CHEAP_WASTEFUL, SNUG_DEAR, TOP], chain).pool == chosen


def test_waste_is_idle_cpu_share_plus_idle_memory_share():
    assert waste(SNUG_DEAR) == pytest.approx(0.0)
    assert waste(CHEAP_WASTEFUL) == pytest.approx(0.5 + 0.75)


def test_an_option_that_places_nothing_is_never_chosen():
    assert choose([option("empty", 1, 0, 0, 0)], ["least-waste"]) is None
    assert choose([], ["price"]) is None


@pytest.mark.parametrize("text, names", [(None, ["least-waste"]), ("price", ["price"]),
                                         ("priority, least-waste", ["priority", "least-waste"])])
def test_an_expander_chain_is_read_from_text(text, names):
    assert parse_chain(text) == names


def test_a_misspelt_expander_is_one_sentence_with_a_guess():
    with pytest.raises(SpecError, match="'cheapest' is not one of .*did you mean 'price'"):
        parse_chain("cheapest")
    with pytest.raises(SpecError, match="did you mean 'least-waste'"):
        parse_chain("least-wast")

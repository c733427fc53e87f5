"""The placer's node columns follow the nodes they were built from: a new list is
compared object by object; a list kept by its owner and updated in place is followed
through the names the owner says it replaced or changed in place."""

from __future__ import annotations

from dataclasses import replace

from scheduler.model import make_node
from scheduler.engine.node_table import NodeTable


def cluster(count=4):
    return [make_node(f"n{i}", cpu="4", memory="8GiB", labels={"zone": f"z{i % 2}"}) for i in range(count)]


def test_replaced_entries_of_the_same_list_are_rewritten():
    nodes = cluster()
    table = NodeTable()
    table.sync(nodes)
    nodes[2] = replace(nodes[2], allocated={"cpu": 3000}, tasks=3)
    table.sync(nodes)  # the same list again: taken to hold the same objects
    assert table.allocated["cpu"][2] == 0
    table.replaced({"n2"})
    assert table.allocated["cpu"][2] == 3000 and table.tasks[2] == 3
    assert table.room({"cpu": 2000}).tolist() == [True, True, False, True]


def test_a_replacement_with_a_new_description_or_resource_is_followed():
    nodes = cluster()
    table = NodeTable()
    table.sync(nodes)
    epoch = table.epoch
    nodes[1] = replace(nodes[1], labels={"zone": "z9"})
    table.replaced({"n1"})
    assert table.epoch > epoch  # static verdicts and groups are recomputed
    nodes[3] = make_node("n3", cpu="4", memory="8GiB", resources={"gpu": 2})
    table.replaced({"n3"})
    assert table.capacity["gpu"].tolist() == [0, 0, 0, 2]


def test_a_name_that_is_not_in_place_makes_the_next_sync_start_over():
    nodes = cluster()
    table = NodeTable()
    table.sync(nodes)
    nodes[0] = replace(nodes[0], allocated={"cpu": 4000})
    table.replaced({"elsewhere"})
    table.sync(nodes)
    assert table.allocated["cpu"][0] == 4000


def test_entries_changed_in_place_are_rewritten_and_an_unknown_one_starts_over():
    """Another worker's commit is applied to the same node object (its deltas): the row
    takes the new values; a name the table does not know lays every row out anew, since
    comparing objects cannot find changes made in place."""
    nodes = cluster()
    table = NodeTable()
    table.sync(nodes)
    nodes[1].allocated["cpu"], nodes[1].tasks = 2000, 2
    table.changed({"n1"})
    assert table.allocated["cpu"].tolist() == [0, 2000, 0, 0] and table.tasks[1] == 2
    nodes[3].allocated["cpu"] = 1000
    table.changed({"n3", "elsewhere"})
    table.sync(nodes)
    assert table.allocated["cpu"].tolist() == [0, 2000, 0, 1000]

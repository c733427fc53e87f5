"""Node by node, why one more task of a job would or would not go there now
(scheduler/engine/verdicts.py): the filter pipeline's reason for each node, with what the
node has free for each resource the task needs. Pure: no Redis."""

from __future__ import annotations

from scheduler.engine.filters import filter_pipeline
from scheduler.engine.verdicts import HELD_FOR_PREEMPTOR, needs, verdicts
from scheduler.model import Nomination, make_node, parse_job

GiB = 2**30


def job(**extra):
    return parse_job({"id": "web", "replicas": 3, "priority": 50, "resources": {"cpu": 1, "memory": "2GiB"},
                      **extra})


def test_each_node_says_why_with_what_it_has_free_and_fits_come_first():
    big = make_node("big", cpu=8, memory="16GiB")
    tight = make_node("tight", cpu=2, memory="4GiB")
    tight.allocated = {"cpu": 1500, "memory": 3 * GiB}  # 0.5 cpu and 1 GiB free
    almost = make_node("almost", cpu=2, memory="4GiB")
    almost.allocated = {"cpu": 1200}  # 0.8 cpu free: closer than tight
    paused = make_node("paused", cpu=8, memory="16GiB")
    paused.availability = "pause"
    elsewhere = make_node("elsewhere", cpu=8, memory="16GiB", labels=["zone=us"])
    spec = job(constraints=["node.labels.zone!=us"])

    found = verdicts(spec, [paused, tight, elsewhere, big, almost], {})

    assert [v.node for v in found] == ["big", "almost", "tight", "elsewhere", "paused"]
    by_node = {v.node: v for v in found}
    assert by_node["big"].fits and by_node["big"].reason is None and not by_node["big"].short
    assert by_node["tight"].reason == "insufficient cpu"
    assert by_node["tight"].free == {"cpu": 500, "memory": GiB} and by_node["tight"].short == {"cpu", "memory"}
    assert by_node["almost"].free["cpu"] == 800 and by_node["almost"].short == {"cpu"}
    assert by_node["elsewhere"].reason == "constraint node.labels.zone!=us not met" and not by_node["elsewhere"].short
    assert by_node["paused"].reason == "node paused"
    assert needs(spec) == {"cpu": 1000, "memory": 2 * GiB}


def test_the_verdicts_are_the_placers_reasons():
    nodes = [make_node(f"n{i}", cpu=i, memory=f"{i}GiB") for i in range(1, 6)]
    for node in nodes[:2]:
        node.allocated = {"cpu": 500}
    spec = job(max_per_node=1)
    counts = {"n5": 1}
    found = {v.node: v.reason for v in verdicts(spec, nodes, counts)}
    pipeline = filter_pipeline(spec)
    assert found == {node.name: pipeline.check(node, counts.get(node.name, 0)) for node in nodes}
    assert found["n5"] == "max_per_node reached" and found["n3"] is None


def test_host_ports_name_their_holder_and_nominated_room_counts_as_taken():
    spec = job(ports=[8080])
    taken = make_node("taken", cpu=8, memory="16GiB")
    taken.ports = {8080: "api.0"}
    held = make_node("held", cpu=2, memory="16GiB")
    held.nominations = {"urgent.0": Nomination("urgent.0", "urgent", 90, 0, {"cpu": 1500}, (8080,))}
    mine = make_node("mine", cpu=2, memory="16GiB")  # held for a task of lower priority: free for this one
    mine.nominations = {"low.0": Nomination("low.0", "low", 10, 0, {"cpu": 1500}, (8080,))}

    by_node = {v.node: v for v in verdicts(spec, [taken, held, mine], {})}

    assert by_node["taken"].reason == "host port 8080 in use" and by_node["taken"].ports == {8080: "api.0"}
    assert by_node["held"].reason == "insufficient cpu" and by_node["held"].free["cpu"] == 500
    assert by_node["held"].ports == {8080: HELD_FOR_PREEMPTOR}
    assert by_node["mine"].fits and by_node["mine"].free["cpu"] == 2000 and by_node["mine"].ports == {}

"""The state machine's checker catches what a commit that let a wrong placement through
would leave: events written here by hand, as such a commit would announce them, each
breaking one hard rule, are each reported; placements that keep every rule are not."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.model.taints import parse_taint

from budget_ledger import EVICT_REASON
from placement_ledger import Ledger


def announce(app, task_id: str, state: str, node: str) -> None:
    event = {"type": "task", "id": task_id, "job": task_id.rpartition(".")[0], "state": state, "node": node}
    app.client.xadd(app.keys.stream, {"event": orjson.dumps(event).decode()})


@pytest.fixture
def ledger(app) -> Ledger:
    app.store.put_node(make_node("n1", cpu=2, memory="4GiB", labels={"zone": "a", "rack": "r1"}))
    app.store.put_node(make_node("n2", cpu=2, memory="4GiB", labels={"zone": "b"}))
    app.store.put_node(dataclasses.replace(make_node("a1", cpu=8, memory="4GiB", labels={"zone": "c"}), slots=1))
    app.store.taint("n2", parse_taint("k1:NoSchedule"))
    ledger = Ledger(app)
    assert ledger.take() == []  # the nodes' own events
    return ledger


def submit(app, **raw) -> None:
    reconcile.submit(app.store, parse_job(raw))


CASES = {
    "constraint": ([{"id": "c", "constraints": ["node.labels.zone==a"],
                     "tolerations": [{"operator": "Exists"}]}], [("c.0", "n2")], "constraint node.labels.zone==a"),
    "taint": ([{"id": "t"}], [("t.0", "n2")], "taint k1:NoSchedule not tolerated"),
    "resources": ([{"id": "r", "replicas": 2, "resources": {"cpu": 1.5}}], [("r.0", "n1"), ("r.1", "n1")],
                  "cpu 1500 + 1500 over its capacity 2000"),
    "ports": ([{"id": "p", "replicas": 2, "ports": [8080]}], [("p.0", "n1"), ("p.1", "n1")], "host port 8080"),
    "max_per_node": ([{"id": "m", "replicas": 2, "max_per_node": 1}], [("m.0", "n1"), ("m.1", "n1")],
                     "max_per_node 1"),
    "slots": ([{"id": "s", "replicas": 2}], [("s.0", "a1"), ("s.1", "a1")], "task slots"),
    "spread": ([{"id": "z", "replicas": 2, "topology_spread": [{"attribute": "node.labels.zone"}]}],
               [("z.0", "n1"), ("z.1", "n1")], "topology_spread over node.labels.zone"),
    "distinct_property": ([{"id": "d", "replicas": 2, "constraints": ["node.labels.rack distinct_property"]}],
                          [("d.0", "n1"), ("d.1", "n1")], "distinct_property node.labels.rack=r1"),
    "anti-affinity": ([{"id": "db", "labels": {"app": "db"}},
                       {"id": "web", "job_anti_affinity": [{"match": {"app": "db"}, "attribute": "node.labels.zone",
                                                            "required": True}]}],
                      [("db.0", "n1"), ("web.0", "n1")], "job_anti_affinity {'app': 'db'}"),
    "anti-affinity of the other job": ([{"id": "db", "labels": {"app": "db"}, "job_anti_affinity": [
        {"match": {"app": "web"}, "attribute": "node.hostname", "required": True}]},
        {"id": "web", "labels": {"app": "web"}}], [("db.0", "n1"), ("web.0", "n1")], "holds a task of ['db']"),
    "affinity": ([{"id": "db", "labels": {"app": "db"}},
                  {"id": "web", "job_affinity": [{"match": {"app": "db"}, "attribute": "node.labels.zone",
                                                  "required": True}],
                   "tolerations": [{"operator": "Exists"}]}],
                 [("db.0", "n1"), ("web.0", "n2")], "job_affinity {'app': 'db'}"),
    "node paused": ([{"id": "q"}], [("q.0", "n1")], "node ready and pause"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_broken_rule_is_reported(app, ledger, case):
    specs, placements, words = CASES[case]
    for spec in specs:
        submit(app, **spec)
    if case == "node paused":
        app.store.set_availability("n1", "pause")
    for task_id, node in placements:
        announce(app, task_id, "assigned", node)
    problems = ledger.take()
    assert len(problems) == 1 and words in problems[0] and problems[0].startswith(placements[-1][0]), problems


def test_placements_that_keep_every_rule_are_not_reported(app, ledger):
    submit(app, id="z", replicas=3, topology_spread=[{"attribute": "node.labels.zone"}], ports=[8080],
           tolerations=[{"key": "k1", "operator": "Exists"}], resources={"cpu": 1})
    submit(app, id="db", labels={"app": "db"})
    submit(app, id="web", job_affinity=[{"match": {"app": "db"}, "attribute": "node.labels.zone", "required": True}])
    for task_id, node in [("z.0", "n1"), ("z.1", "n2"), ("z.2", "a1"), ("db.0", "n1"), ("web.0", "n1")]:
        announce(app, task_id, "assigned", node)
    assert ledger.take() == [] and ledger.placements == 5
    announce(app, "z.0", "stopped", "n1")  # an end frees its room and its port
    announce(app, "db.0", "assigned", "n1")  # (db.0 again: the ledger follows the events)
    assert ledger.take() == []


def test_an_eviction_before_its_toleration_seconds_is_reported(app, ledger):
    submit(app, id="e", tolerations=[{"key": "k2", "operator": "Exists", "effect": "NoExecute",
                                      "toleration_seconds": 10}])
    announce(app, "e.0", "assigned", "n1")
    app.client.hset(app.keys.task("e.0"), mapping={"assigned_at": 1_000_000})
    app.store.taint("n1", parse_taint("k2:NoExecute"))
    added = next(t.added_ms for t in app.store.get_node("n1").taints if t.key == "k2")
    app.client.hset(app.keys.task("e.0"), mapping={"state": "stopped", "ended_at": added + 4_000,
                                                   "message": "evicted from node n1 by its taint k2:NoExecute"})
    announce(app, "e.0", "stopped", "n1")
    problems = ledger.take()
    assert len(problems) == 1 and "4000 ms after it met the taint, tolerated for 10 s" in problems[0], problems


@pytest.mark.parametrize("budget, evicted, reported", [({"max_unavailable": 1}, 1, False),
                                                      ({"max_unavailable": 1}, 2, True),
                                                      ({"min_available": 2}, 1, True),
                                                      ({"max_unavailable": "50%"}, 1, False)])
@pytest.mark.parametrize("kind, message", [("drain", "node n1 drained"), ("move", "moved to n2 (move 3-1)"),
                                           ("evict", EVICT_REASON)])
def test_a_disruption_beyond_the_jobs_budget_is_reported(app, ledger, budget, evicted, reported, kind, message):
    submit(app, id="web", replicas=2, disruption_budget=budget)
    for task_id in ("web.0", "web.1"):
        announce(app, task_id, "assigned", "n1")
        announce(app, task_id, "running", "n1")
    for task_id in ("web.0", "web.1")[:evicted]:
        app.client.hset(app.keys.task(task_id), mapping={"state": "stopped", "message": message})
        announce(app, task_id, "stopped", "n1")
    problems = ledger.take()
    assert ledger.budgets.checked == {kind: evicted}
    assert (len(problems) == 1 and f"evicted by a {kind} from job web" in problems[0]) if reported else not problems


def test_an_end_that_asked_no_gate_is_not_judged(app, ledger):
    """A drain past its deadline, a scale-down, a move's surplus that was not running yet."""
    submit(app, id="web", replicas=2, disruption_budget={"max_unavailable": 0})
    announce(app, "web.0", "assigned", "n1")
    announce(app, "web.0", "running", "n1")
    announce(app, "web.1", "assigned", "n1")
    for task_id, message in (("web.0", "node n1 drained (forced)"),
                             ("web.1", "move 1-1's new task web.2 took web.0's place")):
        app.client.hset(app.keys.task(task_id), mapping={"state": "stopped", "message": message})
        announce(app, task_id, "stopped", "n1")
    assert ledger.take() == [] and not ledger.budgets.checked

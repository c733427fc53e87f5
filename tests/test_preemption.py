"""Preemption as pure logic (scheduler.preemption), and the fit rule with nominated room
(scheduler.fit.misfit). No Redis.

Expected victims are derived by hand from the documented rules: eligible victims are
preemptible and at least ``margin`` priority levels below the preemptor; all of them are
taken away, then given back one by one in order (highest priority first, then task id),
and each one the task can do without is kept back (kube's reprieve). Among nodes, the
choice is the lowest highest-victim-priority, then fewest victims, then least total
priority, then node name.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.engine.domains import DomainCounts
from scheduler.model.placement_rules import AntiRule, Rules
from scheduler.engine.fit import misfit
from scheduler.model import DOWN, DRAIN, PAUSE, Node, Nomination, parse_job
from scheduler.engine.preemption import (DEFAULT_MARGIN, Choice, Search, Victim, candidates_wanted, eligible, find,
                                         find_some, victims_on)
from scheduler.control.preemptor import Preemptor

CORE = 1000  # millicores


def v(task_id, cpu=1, priority=0, ports=(), preemptible=True, job="low"):
    """A victim holding ``cpu`` cores."""
    return Victim(task_id=task_id, job=job, priority=priority, resources={"cpu": int(cpu * CORE)},
                  ports=tuple(ports), preemptible=preemptible)


def node_with(name, cpu, victims=(), extra_cpu=0, extra_ports=(), labels=None, status="ready",
              availability="active", nominations=None):
    """A node of ``cpu`` cores holding ``victims`` plus ``extra_cpu`` cores and
    ``extra_ports`` of tasks that are not candidates."""
    allocated = {"cpu": sum(x.resources["cpu"] for x in victims) + int(extra_cpu * CORE)}
    ports = {p: x.task_id for x in victims for p in x.ports}
    ports.update({p: "other" for p in extra_ports})
    return Node(name=name, capacity={"cpu": cpu * CORE}, allocated=allocated, ports=ports,
                tasks=len(victims), labels=dict(labels or {}), status=status, availability=availability,
                nominations=dict(nominations or {}))


def spec(priority=100, cpu=1, job_id="hi", **extra):
    return parse_job({"id": job_id, "priority": priority, "resources": {"cpu": cpu}, **extra})


def ids(victims):
    return None if victims is None else tuple(x.task_id for x in victims)


# ----------------------------------------------------------------------------- victims_on
VICTIM_CASES = [
    # (case, node cores, victims, preemptor spec kwargs, job_on_node, margin, expected victim ids)
    # Reprieve: all three taken away, then given back in order a, b, c (equal priority:
    # by id). a and b fit back beside a 2-cpu task (1+1+2 <= 4); c does not: evict c.
    ("reprieve keeps the small ones", 4, [v("a", 1), v("b", 1), v("c", 2)], {"cpu": 2}, 0, 10, ("c",)),
    # Same sizes, ids ordered the other way: the 2-cpu task a is given back first and
    # kept, then neither 1-cpu task fits back (2+1+2 > 4): both are evicted.
    ("reprieve order follows task id among equals", 4, [v("a", 2), v("b", 1), v("c", 1)], {"cpu": 2}, 0, 10,
     ("b", "c")),
    # Priority before id: the 1-cpu tasks (priority 5) are given back first and kept.
    ("higher priority reprieved first, small", 4, [v("a", 2, 0), v("b", 1, 5), v("c", 1, 5)], {"cpu": 2}, 0, 10,
     ("a",)),
    # ... and when the 2-cpu task has the higher priority, it is kept, the others go.
    ("higher priority reprieved first, big", 4, [v("a", 1, 0), v("b", 1, 0), v("c", 2, 5)], {"cpu": 2}, 0, 10,
     ("a", "b")),
    # One slot needed on a full node: only the lowest-priority task is evicted.
    ("one slot: the lowest priority goes", 4, [v("a", 1, 3), v("b", 1, 1), v("c", 1, 2), v("d", 1, 0)],
     {"cpu": 1}, 0, 10, ("d",)),
    ("one slot, equal priorities: last by id goes", 4, [v("a"), v("b"), v("c"), v("d")], {"cpu": 1}, 0, 10, ("d",)),
    # Margin 10 from priority 100: 90 is eligible, 91 is not.
    ("margin: 90 is a victim of 100", 2, [v("a", 1, 91), v("b", 1, 90)], {"cpu": 1}, 0, 10, ("b",)),
    ("margin: 91 is not a victim of 100", 2, [v("a", 1, 91), v("b", 1, 91)], {"cpu": 1}, 0, 10, None),
    ("margin configurable: 91 is a victim with margin 5", 2, [v("a", 1, 91), v("b", 1, 91)], {"cpu": 1}, 0, 5,
     ("b",)),
    ("margin configurable: 90 is not a victim with margin 20", 2, [v("a", 1, 90), v("b", 1, 90)], {"cpu": 1}, 0, 20,
     None),
    ("default margin is 10", 2, [v("a", 1, 90), v("b", 1, 91)], {"cpu": 1}, 0, DEFAULT_MARGIN, ("a",)),
    ("equal priority never", 2, [v("a", 1, 100), v("b", 1, 100)], {"cpu": 1}, 0, 10, None),
    ("higher priority never", 2, [v("a", 1, 200), v("b", 1, 500)], {"cpu": 1}, 0, 10, None),
    ("preemptible false never", 2, [v("a", 1, 0, preemptible=False), v("b", 1, 0, preemptible=False)],
     {"cpu": 1}, 0, 10, None),
    # The protected task has the lower priority, yet the preemptible one is taken.
    ("preemptible false protects even the lowest", 2, [v("a", 1, 0, preemptible=False), v("b", 1, 50)],
     {"cpu": 1}, 0, 10, ("b",)),
    # Evicting every eligible task frees 2 cores; 3 are needed (2 held by priority 95).
    ("not enough even with every victim", 4, [v("a", 1), v("b", 1)], {"cpu": 3}, 0, 10, None),
    # Ports: the node has cpu to spare; only the holder of port 8080 is in the way.
    ("evict the port holder", 4, [v("a", 1, 0, ports=[8080]), v("b", 1, 0)], {"cpu": 1, "ports": [8080]}, 0, 10,
     ("a",)),
    ("evict the port holder, whatever its order", 4, [v("a", 1, 0), v("b", 1, 5, ports=[8080])],
     {"cpu": 1, "ports": [8080]}, 0, 10, ("b",)),
    ("evict both port holders", 4, [v("a", 1, 0, ports=[80]), v("b", 1, 0, ports=[443]), v("c", 1)],
     {"cpu": 1, "ports": [80, 443]}, 0, 10, ("a", "b")),
    # max_per_node: evicting other jobs' tasks never lowers this job's count on the node.
    ("max_per_node reached: eviction cannot help", 4, [v("a", 2), v("b", 1)], {"cpu": 1, "max_per_node": 1}, 1, 10,
     None),
    ("max_per_node not reached", 4, [v("a", 2), v("b", 1)], {"cpu": 1, "max_per_node": 2}, 1, 10, ("b",)),
]


# Cores held by tasks that are not candidates (priority too high, or the preemptor's own job).
EXTRA_CPU = {"not enough even with every victim": 2, "max_per_node reached: eviction cannot help": 1,
             "max_per_node not reached": 1}


@pytest.mark.parametrize("case,cores,victims,job_kw,on_node,margin,expected", VICTIM_CASES,
                         ids=[c[0] for c in VICTIM_CASES])
def test_victims_on(case, cores, victims, job_kw, on_node, margin, expected):
    extra = EXTRA_CPU.get(case, 0)
    node = node_with("n", cores, victims, extra_cpu=extra)
    before = (dict(node.allocated), dict(node.ports), node.tasks)
    job = spec(**job_kw)
    chosen = victims_on(node, job, victims, on_node, margin)
    assert ids(chosen) == expected
    assert (dict(node.allocated), dict(node.ports), node.tasks) == before  # the node is not touched
    if chosen is not None:
        # The choice makes room, and is minimal in the reprieve's sense: giving back any
        # single victim would leave no room.
        freed = node_with("n", cores, [x for x in victims if x not in chosen], extra_cpu=extra)
        assert misfit(freed, job.resources, job.ports, job.max_per_node, on_node, job.priority, job.id) is None
        for keep in chosen:
            fewer = node_with("n", cores, [x for x in victims if x not in chosen or x is keep], extra_cpu=extra)
            assert misfit(fewer, job.resources, job.ports, job.max_per_node, on_node,
                          job.priority, job.id) is not None


def test_port_held_by_a_task_that_is_not_a_victim_blocks_preemption():
    victims = [v("a", 1, 0)]
    node = node_with("n", 4, victims, extra_cpu=2, extra_ports=[8080])  # 8080 held at priority 95
    assert victims_on(node, spec(cpu=1, ports=[8080]), victims, 0) is None
    # 1 core is free; a preemptor that needs 2 cores and not the port evicts a.
    assert ids(victims_on(node, spec(cpu=2), victims, 0)) == ("a",)


def test_room_nominated_for_another_preemptor_is_not_counted_as_free():
    # 2 cores: a holds 1, the other is nominated for hi2's preemptor (priority 100): a
    # preemptor of equal priority from another job must evict a to get a core.
    nomination = Nomination("hi2.0", "hi2", 100, 2**62, {"cpu": CORE}, ())
    victims = [v("a", 1, 0)]
    node = node_with("n", 2, victims, nominations={"hi2.0": nomination})
    assert ids(victims_on(node, spec(priority=100, job_id="hi"), victims, 0)) == ("a",)
    # A preemptor of the same job as the nomination may use that room: nothing to evict.
    assert victims_on(node, spec(priority=100, job_id="hi2"), victims, 0) is None
    # Ask for both cores: even evicting a leaves the nominated core taken.
    assert victims_on(node, spec(priority=100, job_id="hi", cpu=2), victims, 0) is None


def test_eligible_is_margin_and_preemptible():
    pool = [v("a", 1, 0), v("b", 1, 89), v("c", 1, 90), v("d", 1, 91), v("e", 1, 100), v("f", 1, 0, preemptible=False)]
    assert [x.task_id for x in eligible(pool, 100, 10)] == ["a", "b", "c"]
    assert [x.task_id for x in eligible(pool, 100, 0)][:4] == ["a", "b", "c", "d"]
    assert [x.task_id for x in eligible(pool, 5, 10)] == []


# ----------------------------------------------------------------------------- find: which node
def test_prefers_the_lowest_highest_victim_priority_over_fewer_victims():
    tasks = {"a": [v("a1", 2, 5)],  # one victim of priority 5
             "b": [v("b1", 1, 1), v("b2", 1, 1)]}  # two victims, both priority 1
    nodes = [node_with("a", 2, tasks["a"]), node_with("b", 2, tasks["b"])]
    search = find(nodes, spec(cpu=2), tasks, {})
    assert search.choice == Choice("b", (tasks["b"][0], tasks["b"][1]))
    assert (search.nodes_tried, search.with_victims) == (2, 2)


def test_then_prefers_fewer_victims():
    tasks = {"a": [v("a1", 1, 5), v("a2", 1, 1)],  # highest 5, two victims
             "b": [v("b1", 2, 5)]}  # highest 5, one victim
    nodes = [node_with("a", 2, tasks["a"]), node_with("b", 2, tasks["b"])]
    assert find(nodes, spec(cpu=2), tasks, {}).choice == Choice("b", (tasks["b"][0],))


def test_then_prefers_least_total_priority():
    tasks = {"a": [v("a1", 1, 5), v("a2", 1, 4)],  # 5 + 4
             "b": [v("b1", 1, 5), v("b2", 1, 1)]}  # 5 + 1
    nodes = [node_with("a", 2, tasks["a"]), node_with("b", 2, tasks["b"])]
    choice = find(nodes, spec(cpu=2), tasks, {}).choice
    assert choice.node == "b" and ids(choice.victims) == ("b1", "b2")
    assert choice.key == (0, 5, 2, 6, 0, "b")  # no budget violated


def test_then_node_name():
    tasks = {name: [v(f"{name}1", 1, 3)] for name in ("n2", "n0", "n1")}
    nodes = [node_with(name, 1, tasks[name]) for name in ("n2", "n0", "n1")]
    assert find(nodes, spec(cpu=1), tasks, {}).choice.node == "n0"


def test_node_preference_uses_the_reprieved_set_not_every_eligible_task():
    # Node a has many eligible tasks but one slot frees enough; node b has a single task
    # at priority 2. Only a's reprieved victim (priority 0) counts: a wins.
    tasks = {"a": [v("a1", 1, 9), v("a2", 1, 8), v("a3", 1, 0)], "b": [v("b1", 1, 2)]}
    nodes = [node_with("a", 3, tasks["a"]), node_with("b", 1, tasks["b"])]
    choice = find(nodes, spec(cpu=1), tasks, {}).choice
    assert choice == Choice("a", (tasks["a"][2],))


def test_static_filters_exclude_nodes_whatever_their_victims():
    tasks = {"cheap": [v("c1", 1, 0)], "dear": [v("d1", 1, 50)]}
    nodes = [node_with("cheap", 1, tasks["cheap"], labels={"zone": "b"}),
             node_with("dear", 1, tasks["dear"], labels={"zone": "a"})]
    job = spec(cpu=1, constraints=["node.labels.zone==a"])
    search = find(nodes, job, tasks, {})
    assert search.choice == Choice("dear", (tasks["dear"][0],))
    assert (search.nodes_tried, search.with_victims) == (1, 1)
    # When the only node meeting the constraints has nothing to evict: no choice at all.
    only = find(nodes, spec(cpu=1, constraints=["node.labels.zone==b"], priority=5), tasks, {})
    assert only.choice is None and (only.nodes_tried, only.with_victims) == (1, 0)


def test_plugins_and_platform_filters_too():
    tasks = {"n": [v("n1", 1, 0)]}
    plain = node_with("n", 1, tasks["n"])
    assert find([plain], spec(cpu=1, plugins=["gpu-driver"]), tasks, {}).choice is None
    assert find([plain], spec(cpu=1, constraints=["node.platform.arch==arm64"]), tasks, {}).choice is None
    assert find([plain], spec(cpu=1, constraints=["node.platform.arch==amd64"]), tasks, {}).choice is not None


@pytest.mark.parametrize("status,availability", [(DOWN, "active"), ("ready", DRAIN), ("ready", PAUSE)])
def test_unusable_nodes_are_never_chosen_nor_counted(status, availability):
    tasks = {"bad": [v("b1", 1, 0)], "good": [v("g1", 1, 80)]}
    nodes = [node_with("bad", 1, tasks["bad"], status=status, availability=availability),
             node_with("good", 1, tasks["good"])]
    search = find(nodes, spec(cpu=1), tasks, {})
    assert search.choice == Choice("good", (tasks["good"][0],))
    assert search.nodes_tried == 1


def test_max_per_node_moves_the_choice_elsewhere():
    tasks = {"a": [v("a1", 1, 0)], "b": [v("b1", 1, 5)]}
    nodes = [node_with("a", 2, tasks["a"], extra_cpu=1), node_with("b", 1, tasks["b"])]
    job = spec(cpu=1, max_per_node=1)
    assert find(nodes, job, tasks, {}).choice.node == "a"
    assert find(nodes, job, tasks, {"a": 1}).choice == Choice("b", (tasks["b"][0],))


def test_margin_passed_to_find():
    tasks = {"a": [v("a1", 1, 95)]}
    nodes = [node_with("a", 1, tasks["a"])]
    assert find(nodes, spec(cpu=1), tasks, {}).choice is None
    assert find(nodes, spec(cpu=1), tasks, {}, margin=5).choice == Choice("a", (tasks["a"][0],))


# ----------------------------------------------------------------------------- explanations
def test_message_when_no_node_has_an_eligible_victim():
    tasks = {"a": [v("a1", 1, 100)], "b": [v("b1", 1, 0, preemptible=False)]}
    nodes = [node_with("a", 1, tasks["a"]), node_with("b", 1, tasks["b"]),
             node_with("c", 1, [], status=DOWN)]
    job = spec(cpu=1)
    search = find(nodes, job, tasks, {})
    assert search == Search(None, 2, 0)
    assert search.message(job, 10) == (
        "preemption tried: no preemptible task at priority 90 or lower on any of the 2 eligible node(s).")
    assert "priority 80 or lower" in search.message(job, 20)


def test_message_when_evicting_everything_would_not_be_enough():
    tasks = {"a": [v("a1", 1, 0)], "b": [v("b1", 1, 100)]}
    nodes = [node_with("a", 4, tasks["a"], extra_cpu=3), node_with("b", 1, tasks["b"])]
    job = spec(cpu=2)
    search = find(nodes, job, tasks, {})
    assert search == Search(None, 2, 1)
    assert search.message(job, 10) == (
        "preemption tried: evicting every eligible lower-priority task would still not make room "
        "on any of the 1 node(s) that have some.")


def test_message_when_a_choice_is_found():
    tasks = {"a": [v("a1", 1, 0), v("a2", 1, 0)]}
    job = spec(cpu=2)
    search = find([node_with("a", 2, tasks["a"])], job, tasks, {})
    assert search.message(job, 10) == "preemption: evicting a1, a2 on a makes room."


def test_worth_trying():
    preemptor = Preemptor(store=None, spec_of=lambda job, version: None)
    assert preemptor.worth_trying(spec(priority=100), 90)
    assert not preemptor.worth_trying(spec(priority=100), 91)
    assert not preemptor.worth_trying(spec(priority=100), None)
    assert not preemptor.worth_trying(spec(priority=100, preempt="never"), 0)
    assert Preemptor(None, lambda *a: None, margin=0).worth_trying(spec(priority=100), 100)


def test_candidates_drop_nodes_too_small_even_when_empty():
    preemptor = Preemptor(store=None, spec_of=lambda job, version: None)
    nodes = [node_with("small", 1, [v("s1", 1, 0)]), node_with("big", 2, [v("b1", 2, 0)]),
             node_with("down", 4, [], status=DOWN)]
    assert [n.name for n in preemptor.candidates(nodes, spec(cpu=2))] == ["big"]


# ----------------------------------------------------------------------------- misfit with nominations
HELD = Nomination("hi.0", "hi", 100, 2**62, {"cpu": CORE}, (8080,))

MISFIT_CASES = [
    # (case, request cpu cores, ports, priority, job, expected)
    ("equal priority, other job: held room counts", 1, (), 100, "other", "insufficient cpu"),
    ("lower priority, other job: held", 1, (), 50, "other", "insufficient cpu"),
    ("higher priority: not held", 1, (), 101, "other", None),
    ("same job: not held", 1, (), 100, "hi", None),
    ("same job, lower priority (older version): not held", 1, (), 10, "hi", None),
    ("no priority: nominations not considered", 1, (), None, "other", None),
    ("held port, equal priority", 0, (8080,), 100, "other", "host port 8080 in use"),
    ("held port, lower priority", 0, (8080,), 0, "other", "host port 8080 in use"),
    ("held port, higher priority", 0, (8080,), 101, "other", None),
    ("held port, same job", 0, (8080,), 100, "hi", None),
    ("another port is free", 0, (9090,), 100, "other", None),
    ("half a core still fits beside nothing held", 0.5, (), 101, "other", None),
]


@pytest.mark.parametrize("case,cores,ports,priority,job,expected", MISFIT_CASES, ids=[c[0] for c in MISFIT_CASES])
def test_misfit_with_nominations(case, cores, ports, priority, job, expected):
    # 2 cores, 1 allocated, the other nominated for hi.0 (and port 8080 with it).
    node = Node(name="n", capacity={"cpu": 2 * CORE}, allocated={"cpu": CORE}, nominations={"hi.0": HELD})
    resources = {"cpu": int(cores * CORE)} if cores else {}
    assert misfit(node, resources, ports, 0, 0, priority, job) == expected


def test_misfit_sums_only_the_nominations_that_hold_against_the_task():
    nominations = {"a.0": Nomination("a.0", "a", 100, 2**62, {"cpu": 500}, ()),
                   "b.0": Nomination("b.0", "b", 200, 2**62, {"cpu": 500}, ()),
                   "c.0": Nomination("c.0", "c", 200, 2**62, {"cpu": 500, "gpu": 1}, ())}
    node = Node(name="n", capacity={"cpu": 3 * CORE, "gpu": 1}, allocated={"cpu": CORE}, nominations=nominations)
    # Priority 150: b and c hold (1 core); a does not. 1 + 1 + 1 = 3 fits, 1.001 more does not.
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 150, "x") is None
    assert misfit(node, {"cpu": CORE + 1}, (), 0, 0, 150, "x") == "insufficient cpu"
    # Priority 100: all three hold 1.5 cores.
    assert misfit(node, {"cpu": 500}, (), 0, 0, 100, "x") is None
    assert misfit(node, {"cpu": 501}, (), 0, 0, 100, "x") == "insufficient cpu"
    # The gpu is held by c for anything up to priority 200 of another job.
    assert misfit(node, {"gpu": 1}, (), 0, 0, 200, "x") == "insufficient gpu"
    assert misfit(node, {"gpu": 1}, (), 0, 0, 200, "c") is None
    assert misfit(node, {"gpu": 1}, (), 0, 0, 201, "x") is None


def test_held_room_does_not_hide_other_reasons():
    node = Node(name="n", capacity={"cpu": 2 * CORE}, allocated={}, nominations={"hi.0": HELD},
                availability=DRAIN)
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 10, "other") == "node drained"
    node.availability = "active"
    assert misfit(node, {"cpu": CORE}, (), 1, 1, 10, "other") == "max_per_node reached"
    assert misfit(node, {"cpu": 2 * CORE}, (), 0, 0, 10, "other") == "insufficient cpu"


# ----------------------------------------------------------------------------- the job's own nominations
def held_for(task_id, cpu, job="hi", priority=100):
    return Nomination(task_id=task_id, job=job, priority=priority, expires_ms=2**62,
                      resources={"cpu": int(cpu * CORE)}, ports=())


def test_room_nominated_for_the_jobs_other_tasks_counts_as_taken():
    # n2 (8 cores): one 3-core filler left, 3 cores held for hi.0; hi.1 needs 3 more.
    # The held room is not free for hi.1: it must evict the filler (as plan would).
    n2 = node_with("n2", 8, [v("filler.2", 3, priority=10)], nominations={"hi.0": held_for("hi.0", 3)})
    job = spec(priority=200, cpu=3)
    search = find([n2], job, {"n2": [v("filler.2", 3, priority=10)]}, {}, task_id="hi.1")
    assert search.choice is not None and ids(search.choice.victims) == ("filler.2",)
    # The task's own nomination is not counted against it: nothing to evict.
    own = find([n2], job, {"n2": [v("filler.2", 3, priority=10)]}, {}, task_id="hi.0")
    assert own.choice == Choice("n2", ())


def test_room_left_by_an_earlier_eviction_is_a_choice_without_victims():
    # 10 cores: a 4-core filler left, 3 held for hi.0: 3 free, enough for hi.1 as it is.
    n1 = node_with("n1", 10, [v("filler.1", 4, priority=10)], nominations={"hi.0": held_for("hi.0", 3)})
    # Another node would need an eviction: the free room is preferred.
    n0 = node_with("n0", 4, [v("filler.0", 4, priority=10)])
    tasks_on = {"n0": [v("filler.0", 4, priority=10)], "n1": [v("filler.1", 4, priority=10)]}
    search = find([n0, n1], spec(priority=200, cpu=3), tasks_on, {}, task_id="hi.1")
    assert search.choice == Choice("n1", ())
    assert "room left by earlier evictions" in search.message(spec(priority=200, cpu=3), DEFAULT_MARGIN)


# ----------------------------------------------------------------------------- task slots
def slotted(name, slots, victims, cpu=8, **extra):
    """A roomy node whose agent has ``slots`` task slots, holding ``victims`` (a live task each)."""
    node = node_with(name, cpu, victims, **extra)
    node.slots = slots
    return node


def test_a_full_agent_gives_a_slot_by_evicting_one_task():
    """Cpu to spare, every slot in use: one victim frees a slot, and the reprieve keeps
    the others (the lowest priority goes, as for any room)."""
    pool = [v("a", 1, priority=5), v("b", 1, priority=0), v("c", 1, priority=3)]
    node = slotted("n", 3, pool)
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "hi") == "node has all 3 task slots in use"
    assert ids(victims_on(node, spec(cpu=1), pool, 0)) == ("b",)
    search = find([node], spec(cpu=1), {"n": pool}, {})
    assert search.choice == Choice("n", (pool[1],))


def test_slots_lowered_below_the_live_tasks_need_as_many_victims():
    """An agent back with 2 slots for 4 live tasks: the task needs a third of them gone."""
    pool = [v("a", 1, priority=1), v("b", 1, priority=2), v("c", 1, priority=3), v("d", 1, priority=4)]
    node = slotted("n", 2, pool)
    assert ids(victims_on(node, spec(cpu=1), pool, 0)) == ("c", "b", "a")


def test_a_slot_held_by_a_task_that_is_not_a_victim_cannot_be_freed():
    node = slotted("n", 2, [v("a", 1)], extra_cpu=1)
    node.tasks = 2  # the other task is of a higher priority: not a candidate
    assert victims_on(node, spec(cpu=1), [v("a", 1)], 0) == (v("a", 1),)
    node.tasks = 3
    assert victims_on(node, spec(cpu=1), [v("a", 1)], 0) is None


def test_a_nomination_holds_its_slot_against_lower_priorities_of_other_jobs():
    """A preemptor's nomination takes a slot for tasks of its priority or lower (of other
    jobs), in the fit rule and in the search: another eviction is needed for them, and
    the room left is the nominated task's own."""
    pool = [v("a", 1), v("b", 1)]
    node = slotted("n", 3, pool, nominations={"hi.0": held_for("hi.0", 1, job="hi", priority=100)})
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "other") == "node has all 3 task slots in use"
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 101, "other") is None
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "hi") is None  # the job's own room
    assert misfit(node, {"cpu": CORE}, (), 0, 0, None, "other") is None  # nominations not asked about
    search = find([node], spec(priority=100, cpu=1, job_id="other"), {"n": pool}, {})
    assert search.choice == Choice("n", (pool[1],))
    assert find([node], spec(priority=200, cpu=1), {"n": pool}, {}, task_id="hi.0").choice == Choice("n", ())


def test_a_node_without_slots_is_limited_by_its_resources_alone():
    node = node_with("n", 8, [v(f"t{i}", 1) for i in range(7)])
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "hi") is None
    node.slots = 7
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "hi") == "node has all 7 task slots in use"
    node.slots = 1
    node.tasks = 1
    assert misfit(node, {"cpu": CORE}, (), 0, 0, 100, "hi") == "node has its 1 task slot in use"


def test_a_gang_takes_the_slots_each_member_frees():
    """Two members on a node of 2 slots, both in use by victims: both go, one per member."""
    from scheduler.engine.preemption import find_gang

    pool = [v("a", 1, priority=1), v("b", 1, priority=0)]
    node = slotted("n", 2, pool)
    found = find_gang([node], spec(cpu=1, replicas=2, gang=True), {"n": pool}, {}, ["hi.0", "hi.1"])
    assert found.choices is not None and sorted(ids(found.victims)) == ["a", "b"]
    assert node.tasks == 2  # the copies were changed, not the node


# ----------------------------------------------------------------------------- kube's start-time tie-breaks
def started(task_id, at_ms, cpu=1, priority=0, job="low", domains=None):
    return Victim(task_id=task_id, job=job, priority=priority, resources={"cpu": int(cpu * CORE)}, ports=(),
                  started_ms=at_ms, domains=domains)


def test_of_equal_priorities_the_victim_started_last_is_evicted():
    """kube's reprieve gives back the more important first: of equal priorities, the one
    started first. So the one started last goes."""
    pool = [started("old", 1000), started("new", 3000), started("mid", 2000)]
    node = node_with("n", 3, pool)
    assert ids(victims_on(node, spec(cpu=1), pool, 0)) == ("new",)


def test_of_nodes_whose_victims_are_otherwise_equal_the_one_whose_victims_started_latest_is_chosen():
    tasks = {"a": [started("a1", 1000)], "b": [started("b1", 5000)], "c": [started("c1", 3000)]}
    nodes = [node_with(name, 1, tasks[name]) for name in tasks]
    assert find(nodes, spec(cpu=1), tasks, {}).choice.node == "b"


# ----------------------------------------------------------------------------- hard domain rules
ANTI_DB = Rules("hi", False, anti=(AntiRule("node.hostname", ("db",), "job_anti_affinity app=db on node.hostname"),))


def test_never_evicts_where_a_hard_rule_would_still_refuse():
    """The node with the fewest, lowest victims holds a task the preemptor's
    anti-affinity matches, which is not a victim: evicting there would not let the task in."""
    tasks = {"db-host": [started("low1", 1000)], "free-host": [started("low2", 1000, priority=5)]}
    nodes = [node_with(name, 1, victims) for name, victims in tasks.items()]
    counts = DomainCounts({"db": {"node.hostname=db-host": 1, "*": 1}})
    assert find(nodes, spec(cpu=1), tasks, {}).choice.node == "db-host"  # what resources alone would pick
    assert find(nodes, spec(cpu=1), tasks, {}, rules=ANTI_DB, domains=counts).choice.node == "free-host"
    assert find(nodes[:1], spec(cpu=1), tasks, {}, rules=ANTI_DB, domains=counts).choice is None


def test_evicting_the_task_an_anti_affinity_matches_can_make_room():
    """kube counts the victims' removal: a lower-priority task of the matched job is a
    victim whose eviction lets the anti-affinity hold."""
    db = started("db.0", 1000, cpu=0, job="db", domains=("node.name=h", "node.hostname=h"))
    tasks = {"h": [db]}
    counts = DomainCounts({"db": {"node.name=h": 1, "node.hostname=h": 1, "*": 1}})
    choice = find([node_with("h", 2, tasks["h"])], spec(cpu=1), tasks, {}, rules=ANTI_DB, domains=counts).choice
    assert choice is not None and ids(choice.victims) == ("db.0",)


# ----------------------------------------------------------------------------- enough candidates (kube's)
def test_candidates_wanted_is_kubes_ten_percent_at_least_one_hundred():
    assert [candidates_wanted(n) for n in (0, 7, 100, 101, 999, 1000, 1500, 10_000)] == \
        [0, 7, 100, 100, 100, 100, 150, 1000]


@settings(max_examples=60, deadline=None)
@given(cluster=st.lists(st.tuples(st.integers(1, 4), st.lists(st.tuples(st.integers(1, 2), st.integers(0, 120)),
                                                              max_size=4)), min_size=1, max_size=40),
       cpu=st.integers(1, 4), start=st.integers(0, 1000))
def test_on_up_to_a_hundred_nodes_every_start_chooses_what_the_whole_search_does(cluster, cpu, start):
    nodes, tasks_on = [], {}
    for i, (cores, tasks) in enumerate(cluster):
        victims = [v(f"t{i}-{j}", c, priority=p) for j, (c, p) in enumerate(tasks)]
        fitting = []
        for victim in victims:  # what a node could hold; the rest never ran there
            if sum(x.resources["cpu"] for x in fitting) + victim.resources["cpu"] <= cores * CORE:
                fitting.append(victim)
        nodes.append(node_with(f"n{i:02}", cores, fitting))
        tasks_on[f"n{i:02}"] = fitting
    job = spec(priority=100, cpu=cpu)
    whole = find(nodes, job, tasks_on, {})
    some = find_some(nodes, start, job, lambda part: tasks_on, {})
    assert some.choice == whole.choice
    assert (some.nodes_tried, some.with_victims, some.found) == (whole.nodes_tried, whole.with_victims, whole.found)


def test_on_a_large_cluster_a_search_stops_at_enough_candidates_and_the_next_starts_after_it():
    # 300 nodes, each with one 1-core priority 0 task filling it: every node would do.
    nodes = [node_with(f"n{i:03}", 1, [v(f"t{i}", 1)]) for i in range(300)]
    tasks_on = {n.name: [v(f"t{i}", 1)] for i, n in enumerate(nodes)}
    read: list[list[str]] = []

    def reader(part):
        read.append([n.name for n in part])
        return tasks_on

    preemptor = Preemptor(store=None, spec_of=lambda job, version: None)
    first = preemptor.search(nodes, spec(), {}, read=reader)
    assert first.found == 100 and first.nodes_tried == 100
    assert read == [[f"n{i:03}" for i in range(100)]]
    assert first.choice.node == "n000"  # equal victims everywhere: the node name decides
    second = preemptor.search(nodes, spec(), {}, read=reader)
    assert read[1] == [f"n{i:03}" for i in range(100, 200)] and second.choice.node == "n100"
    # Where no node would do, every node is searched, a slice at a time.
    read.clear()
    hopeless = preemptor.search(nodes, spec(cpu=2), {}, read=reader)
    assert hopeless.choice is None and hopeless.nodes_tried == 0  # too small even when empty
    high = [node_with(f"m{i:03}", 2, [v(f"u{i}", 1, priority=500)], extra_cpu=1) for i in range(250)]
    on_high = {n.name: [v(f"u{i}", 1, priority=500)] for i, n in enumerate(high)}
    read.clear()
    none = preemptor.search(high, spec(), {}, read=lambda part: (read.append(part), on_high)[1])
    assert none.choice is None and none.nodes_tried == 250 and [len(p) for p in read] == [100, 100, 50]

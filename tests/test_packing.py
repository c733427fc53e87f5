"""Packing a claim: the empty nodes its bin-packed tasks open together
(``scheduler.engine.packing``), and larger tasks placed first within a priority
(``workers.groups``); alone, then through the scheduler worker and Redis."""

from __future__ import annotations

from collections import Counter

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.engine.node_table import NodeTable
from scheduler.engine.packing import demand, opening
from scheduler.model import DOWN, DRAIN, make_node, parse_job
from workers.groups import Group, batches, size
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

GIB = 2**30


def table_of(*nodes):
    table = NodeTable()
    table.sync(list(nodes))
    return table


def node(name, cpu=4, memory="8GiB", tasks=0, allocated=None, status=None, availability=None):
    n = make_node(name, cpu=cpu, memory=memory)
    n.tasks = tasks
    n.allocated.update(allocated or {})
    n.status, n.availability = status or n.status, availability or n.availability
    return n


def test_a_claim_opens_the_fewest_empty_nodes_its_demand_needs_largest_first():
    nodes = [node("small"), node("large", cpu=16, memory="32GiB"), node("medium", cpu=8, memory="16GiB"),
             node("other-small")]
    assert opening(table_of(*nodes), {"cpu": 3000}) == {"large"}
    assert opening(table_of(*nodes), {"cpu": 20_000}) == {"large", "medium"}
    # every resource must be covered: 33 GiB needs a second node though 20 cores fit in one
    assert opening(table_of(*nodes), {"cpu": 2000, "memory": 33 * GIB}) == {"large", "medium"}
    # more than all of them hold: all of them
    assert opening(table_of(*nodes), {"cpu": 100_000}) == {"small", "large", "medium", "other-small"}
    assert opening(table_of(*nodes), {}) == frozenset()


def test_room_on_nodes_in_use_comes_first_and_unusable_nodes_are_never_opened():
    busy = node("busy", tasks=2, allocated={"cpu": 1000, "memory": GIB})  # 3 cores free
    down, drained = node("down", cpu=16, status=DOWN), node("drained", cpu=16, availability=DRAIN)
    idle = node("idle")
    assert opening(table_of(busy, down, drained, idle), {"cpu": 3000}) == frozenset()
    assert opening(table_of(busy, down, drained, idle), {"cpu": 5000}) == {"idle"}
    assert opening(table_of(busy, idle), {"gpu": 1}) == frozenset()  # no node has any: none helps


def test_demand_sums_what_bin_packed_tasks_ask_for():
    a = parse_job({"id": "a", "resources": {"cpu": 2, "memory": "1GiB"}})
    b = parse_job({"id": "b", "resources": {"cpu": "500m", "gpu": 1}})
    assert demand([(a, 3), (b, 2)]) == {"cpu": 7000, "memory": 3 * GIB, "gpu": 2}


def test_larger_bin_packed_tasks_are_placed_first_within_a_priority():
    def group(job_id, priority=50, strategy="binpack", **resources):
        return Group(parse_job({"id": job_id, "priority": priority, "strategy": strategy, "resources": resources}),
                     "", "", [f"{job_id}.0"])

    typical = {"cpu": 4000, "memory": 8 * GIB}
    small, cpu_heavy, memory_heavy = group("small", cpu=1), group("cpu", cpu=3), group("mem", memory="7GiB")
    urgent = group("urgent", priority=100, cpu="100m")
    assert size(cpu_heavy.spec, typical) == 0.75 and size(memory_heavy.spec, typical) == 0.875
    order = [g.spec.id for g, _ in batches([small, cpu_heavy, urgent, memory_heavy], {}, {}, typical)]
    assert order == ["urgent", "mem", "cpu", "small"]  # priority first, then the larger
    # without a typical node (nothing known of the cluster): claim order within a priority
    assert [g.spec.id for g, _ in batches([small, cpu_heavy, urgent], {}, {})] == ["urgent", "small", "cpu"]
    # spread jobs keep claim order and their places; the bin-packed ones reorder among theirs
    spread_small, spread_large = group("s-small", strategy="spread", cpu=1), group("s-large", strategy="spread", cpu=4)
    order = [g.spec.id for g, _ in batches([spread_small, small, spread_large, cpu_heavy], {}, {}, typical)]
    assert order == ["s-small", "cpu", "s-large", "small"]


def test_the_worker_places_the_larger_task_of_its_claim_first(app):
    store = app.store
    for name in ("n1", "n2"):
        store.put_node(make_node(name, cpu=4, memory="8GiB"))
    # Claimed first, packed together on one node, the small tasks would leave no node room
    # for the second large one (3 + 1.5 free); larger first, one of each fits on a node.
    reconcile.submit(store, parse_job({"id": "small", "replicas": 2, "strategy": "binpack",
                                       "resources": {"cpu": "1500m"}}))
    reconcile.submit(store, parse_job({"id": "large", "replicas": 2, "strategy": "binpack",
                                       "resources": {"cpu": "2500m"}}))
    assert SchedulerWorker(app, WorkerConfig()).step() == 4
    tasks = store.tasks(store.all_task_ids())
    assert all(t.state == "assigned" for t in tasks)
    assert not audit(store).problems


def test_the_worker_mixes_memory_heavy_and_cpu_heavy_tasks_of_its_claim_on_the_nodes_it_opens(app):
    """Two memory-heavy tasks then two cpu-heavy ones, bin-packed on two empty nodes: one
    of each fits on a node, while two memory-heavy ones on one node leave it too few
    cores for a cpu-heavy one."""
    store = app.store
    for name in ("n1", "n2"):
        store.put_node(make_node(name, cpu=4, memory="8GiB"))
    reconcile.submit(store, parse_job({"id": "mem", "replicas": 2, "strategy": "binpack",
                                       "resources": {"cpu": 1, "memory": "3600MiB"}}))
    reconcile.submit(store, parse_job({"id": "cpu", "replicas": 2, "strategy": "binpack",
                                       "resources": {"cpu": "2500m", "memory": "512MiB"}}))
    assert SchedulerWorker(app, WorkerConfig()).step() == 4
    tasks = store.tasks(store.all_task_ids())
    assert [t.state for t in tasks] == ["assigned"] * 4
    assert Counter((t.node, t.job) for t in tasks) == {(n, j): 1 for n in ("n1", "n2") for j in ("mem", "cpu")}
    assert not audit(store).problems

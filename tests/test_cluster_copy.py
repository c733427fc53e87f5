"""The copy of the cluster that plans run on (scheduler/engine/cluster.py), pure, and as
read from real Redis (scheduler/control/cluster_read.py)."""

from __future__ import annotations

import pytest

from scheduler.control import cluster_read, reconcile
from scheduler.engine.cluster import Cluster, Resident
from scheduler.model import make_node, parse_job
from scheduler.model.quantities import CPU, MEMORY
from worker_harness import run_worker_until_idle

GIB = 1024 ** 3


def nodes(count: int, cpu: int = 4):
    return [make_node(f"n{i}", cpu=cpu, memory="8GiB") for i in range(1, count + 1)]


def resident(task_id: str, job: str, node, cpu: float = 1.0) -> Resident:
    needs = {CPU: int(cpu * 1000), MEMORY: GIB}
    for name, amount in needs.items():
        node.allocated[name] = node.allocated.get(name, 0) + amount
    node.tasks += 1
    return Resident(task_id, job, node.name, needs)


def web(replicas: int = 4, **extra):
    return parse_job({"id": "web", "replicas": replicas, "resources": {"cpu": 1, "memory": "1GiB"}, **extra})


def test_a_task_taken_off_its_node_frees_its_room_and_the_engine_places_it_again_elsewhere():
    machines = nodes(3)
    residents = [resident(f"web.{i}", "web", machines[0]) for i in range(3)]
    cluster = Cluster(machines, residents, {"web": web(3)})
    assert cluster.count("web", "n1") == 3 and machines[0].allocated[CPU] == 3000
    with cluster.cordoned(["n1"]):
        target = cluster.place(cluster.specs["web"], "web.new")
    assert target in ("n2", "n3")
    assert cluster.count("web", target) == 1 and cluster.nodes[target].allocated[CPU] == 1000
    removed = cluster.remove("web.0")
    assert removed.node == "n1" and cluster.count("web", "n1") == 2
    assert machines[0].allocated[CPU] == 2000 and machines[0].tasks == 2
    assert machines[0].availability == "active"  # the cordon was lifted
    cluster.put(removed)
    assert cluster.count("web", "n1") == 3 and machines[0].allocated[CPU] == 3000


def test_a_cordoned_node_takes_nothing_and_a_full_cluster_places_nothing():
    machines = nodes(2, cpu=1)
    residents = [resident("web.0", "web", machines[0]), resident("web.1", "web", machines[1])]
    cluster = Cluster(machines, residents, {"web": web(2)})
    assert cluster.place(cluster.specs["web"], "web.new") is None
    cluster.remove("web.1")
    with cluster.cordoned(["n2"]):
        assert cluster.place(cluster.specs["web"], "web.new") is None
    assert cluster.place(cluster.specs["web"], "web.new") == "n2"


def test_binpacked_ranks_the_fullest_node_first_and_keeps_the_rules():
    machines = nodes(3)
    residents = [resident("a.0", "a", machines[1], cpu=2)]
    spec = web(1, constraints=["node.name != n3"])
    cluster = Cluster(machines, residents, {"web": spec})
    packed = cluster.binpacked(spec)
    assert packed.strategy == "binpack" and packed.constraints == spec.constraints
    assert cluster.place(packed, "web.new") == "n2"


def test_domain_counts_follow_the_residents_and_a_spread_is_held():
    machines = [make_node(f"n{i}", cpu=4, memory="8GiB", labels={"zone": "a" if i <= 2 else "b"})
                for i in range(1, 5)]
    spec = web(2, topology_spread=[{"attribute": "node.labels.zone", "max_skew": 1}])
    residents = []
    for i, node in enumerate(machines[:2]):
        task = resident(f"web.{i}", "web", node)
        task.domains = ("node.labels.zone=a", f"node.name={node.name}")
        residents.append(task)
    cluster = Cluster(machines, residents, {"web": spec})
    assert cluster.domains.counts["web"]["node.labels.zone=a"] == 2
    target = cluster.place(spec, "web.new")
    assert cluster.nodes[target].labels["zone"] == "b"  # zone a holds 2 and b none: the spread says b
    assert cluster.domains.counts["web"]["node.labels.zone=b"] == 1
    cluster.remove("web.new")
    assert "node.labels.zone=b" not in cluster.domains.counts["web"]


def test_the_copy_read_from_redis_holds_every_live_task_where_it_runs(app):
    for node in nodes(3):
        app.store.put_node(node)
    reconcile.submit(app.store, web(5))
    reconcile.submit(app.store, parse_job({"id": "crunch", "type": "batch", "replicas": 2,
                                           "resources": {"cpu": 0.5, "memory": "256MiB"}}))
    run_worker_until_idle(app)
    copy = cluster_read.read(app.store, movable=lambda task, spec, fields, state: spec.type == "service")
    cluster = copy.cluster
    assert sorted(cluster.tasks) == sorted(t.id for t in app.store.tasks(app.store.all_task_ids()) if t.live)
    assert sum(cluster.count("web", n) for n in cluster.nodes) == 5
    assert all(t.movable == (t.job == "web") for t in cluster.tasks.values())
    for name, node in cluster.nodes.items():
        stored = app.store.get_node(name)
        assert node.allocated == stored.allocated and node.tasks == stored.tasks
    assert set(copy.reading.seqs) == {"n1", "n2", "n3"} and copy.reading.epoch
    assert cluster.specs["web"].replicas == 5



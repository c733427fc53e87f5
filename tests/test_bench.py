"""``sched bench``: tiny scenarios against the test server. No timing thresholds: these
check that the benchmark runs, reports every field, and that its invariants hold."""

from __future__ import annotations

import threading
from collections import Counter

import orjson
import pytest
from click.testing import CliRunner

from scheduler.tools import bench
from scheduler.tools.bench import progress as bench_progress
from scheduler.control import reconcile
from scheduler.state.app import App
from scheduler.tools.cli import main
from scheduler.model.errors import SpecError
from scheduler.model import Task, make_node, parse_job

from commits import commit_one

BATCH_KEYS = {
    "mode", "scenario", "tasks", "assigned", "unplaced", "placements_per_s", "placements_per_s_from_start",
    "us_per_placement", "window_s",
    "window", "p50_ms", "p99_ms", "commit_rejections", "overcommits", "invariants_ok", "problems", "spread_skew",
    "zone_spread_skew", "redis_bytes_per_task", "worker_cpu_s", "redis_cpu_s", "workers", "states", "machine",
    "node_read_cpu_s", "worker_loop_cpu_us_per_placement",
}


def tiny(**changes) -> bench.Scenario:
    return bench.Scenario(**{"nodes": 50, "jobs": 5, "replicas": 10, "workers": 1, **changes})


def check_batch(report: dict, scenario: bench.Scenario) -> None:
    assert BATCH_KEYS <= set(report)
    assert report["scenario"]["tasks"] == scenario.tasks
    assert report["overcommits"] == 0
    assert report["invariants_ok"], report["problems"]
    assert report["tasks"] == scenario.tasks
    assert report["assigned"] + report["unplaced"] == scenario.tasks
    assert report["workers"]["placed"] == report["assigned"]
    assert report["workers"]["reported"] == scenario.workers
    if report["assigned"]:
        assert report["placements_per_s"] > 0
        assert 0 < report["placements_per_s_from_start"] <= report["placements_per_s"]
        assert 0 <= report["p50_ms"] <= report["p99_ms"]
    orjson.dumps(report)  # JSON all the way down


def test_batch_run(app, redis_url):
    scenario = tiny()
    report = bench.run_batch(scenario, redis_url=redis_url, namespace=app.keys.namespace, clear=False)
    check_batch(report, scenario)
    assert report["mode"] == "batch"
    assert report["spread_skew"] is not None and report["zone_spread_skew"] is not None
    assert report["worker_cpu_s"] > 0
    # The parent's read of the nodes (none when it spawned them) is part of the workers' CPU.
    assert 0 <= report["node_read_cpu_s"] <= report["worker_cpu_s"]
    loop_s = report["worker_loop_cpu_us_per_placement"] * report["assigned"] / 1e6
    assert abs(loop_s + report["node_read_cpu_s"] - report["worker_cpu_s"]) < 0.01
    # The data stays for inspection: every task is in the namespace.
    assert len(app.store.all_task_ids()) == scenario.tasks


def test_distinct_run(app, redis_url):
    scenario = tiny(jobs=3, replicas=4, distinct=True)
    report = bench.run_batch(scenario, redis_url=redis_url, namespace=app.keys.namespace, clear=False)
    check_batch(report, scenario)
    assert report["mode"] == "distinct"
    assert len(app.store.job_ids()) == scenario.tasks  # one job per task


def test_gang_run(app, redis_url):
    scenario = tiny(jobs=3, replicas=10, gang=4)
    report = bench.run_batch(scenario, redis_url=redis_url, namespace=app.keys.namespace, clear=False)
    check_batch(report, scenario)
    assert report["mode"] == "gang"
    specs = [app.store.job_spec(job) for job in app.store.job_ids()]
    assert sorted(spec.replicas for spec in specs) == [2, 2, 2, 4, 4, 4, 4, 4, 4]  # gangs of 4, the last of 2
    assert all(spec.gang == spec.replicas for spec in specs)


def test_tenants_run(app, redis_url):
    scenario = tiny(jobs=6, tenants=3)
    report = bench.run_batch(scenario, redis_url=redis_url, namespace=app.keys.namespace, clear=False)
    check_batch(report, scenario)
    assert {t: v["weight"] for t, v in report["tenants"].items()} == {"t1": 1, "t2": 2, "t3": 3}
    assert sum(v["assigned"] for v in report["tenants"].values()) == report["assigned"]
    assert app.store.tenant_weights() == {"t1": 1, "t2": 2, "t3": 3}


def test_two_workers(app, redis_url):
    scenario = tiny(nodes=30, jobs=4, replicas=20, workers=2, batch_size=7)
    report = bench.run_batch(scenario, redis_url=redis_url, namespace=app.keys.namespace, clear=False)
    check_batch(report, scenario)


def _one_task_waiting(app) -> int:
    """A node and one pending task; returns the workers' release time (Redis TIME)."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "resources": {"cpu": 1}}))
    return bench.redis_now_ms(app)


def test_the_window_starts_at_the_earliest_lease_in_flight(app):
    released = _one_task_waiting(app)
    watch = bench.ClaimWatch(app, released)
    assert not watch.poll()  # nothing claimed yet
    app.queue.claim(1, bench.LEASE_MS)
    assert watch.poll() and released <= watch.first_ms <= bench.redis_now_ms(app)


def test_a_claim_committed_before_the_first_look_counts_from_the_release(app):
    released = _one_task_waiting(app)
    watch = bench.ClaimWatch(app, released)
    claim = app.queue.claim(1, bench.LEASE_MS)
    assert commit_one(app, claim.token, "web.0", "n1", "web", {"cpu": 1000}) == 1
    assert watch.poll() and watch.first_ms == released
    assert watch.first_ms <= int(app.client.hget(app.keys.task("web.0"), "assigned_at"))


def test_cli_prints_one_json_object(app, redis_url):
    result = CliRunner().invoke(main, ["--namespace", app.keys.namespace, "bench", "--redis-url", redis_url,
                                       "--nodes", "20", "--jobs", "3", "--replicas", "4", "--workers", "1",
                                       "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["scenario"]["nodes"] == 20 and report["scenario"]["redis"] == "given"
    assert report["invariants_ok"] and report["overcommits"] == 0


def test_rules_run_beside_the_plain_one(app, redis_url):
    """`sched bench --rules`: the scenario with taints and rules, then the plain one, both
    checked and reported, with their ratio."""
    result = CliRunner().invoke(main, ["--namespace", app.keys.namespace, "bench", "--redis-url", redis_url,
                                       "--rules", "--nodes", "40", "--jobs", "8", "--replicas", "4", "--workers", "1",
                                       "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["mode"] == "rules" and report["plain"]["mode"] == "batch"
    for run in (report, report["plain"]):
        assert run["invariants_ok"] and run["overcommits"] == 0 and run["assigned"] > 0
    assert report["rules_to_plain"] == round(report["placements_per_s"] / report["plain"]["placements_per_s"], 3)
    specs = bench.job_specs(bench.Scenario(nodes=40, jobs=8, replicas=4, rules=True))
    assert all(spec["labels"] for spec in specs)
    assert {"affinities", "topology_spread", "job_anti_affinity", "job_affinity"} <= {k for s in specs for k in s}
    assert any(node.taints for node in bench.make_nodes(40, rules=True))


def test_small_requests_all_fit(app, redis_url):
    result = CliRunner().invoke(main, ["--namespace", app.keys.namespace, "bench", "--redis-url", redis_url,
                                       "--small", "--nodes", "50", "--jobs", "200", "--replicas", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["scenario"]["small"] is True
    assert report["assigned"] == report["tasks"] == 200 and report["unplaced"] == 0
    assert report["invariants_ok"] and report["overcommits"] == 0
    assert 0 < report["placements_per_s_from_start"] <= report["placements_per_s"]
    # Same mix as the normal scenario, only smaller requests.
    small = bench.job_specs(bench.Scenario(jobs=200, replicas=1, small=True))
    normal = bench.job_specs(bench.Scenario(jobs=200, replicas=1))
    assert [s.get("constraints") for s in small] == [s.get("constraints") for s in normal]
    assert [s.get("strategy") for s in small] == [s.get("strategy") for s in normal]
    assert max(s["resources"]["cpu"] for s in small) <= 0.2


def test_own_namespace_is_cleared_others_must_be_empty(redis_url, namespace):
    app = App(redis_url=redis_url, namespace=namespace)
    app.client.set(f"{app.keys.prefix}something", "1")
    with pytest.raises(SpecError):
        bench.prepare_namespace(app, clear=False)
    bench.prepare_namespace(app, clear=True)
    assert not list(app.client.scan_iter(match=f"{app.keys.prefix}*"))


def test_sweep_scales_jobs_with_nodes(app, redis_url):
    scenario = tiny(nodes=20, jobs=2, replicas=5)
    report = bench.run_sweep(scenario, sizes=[10, 20], redis_url=redis_url, namespace=app.keys.namespace,
                             clear=False)
    assert [p["nodes"] for p in report["points"]] == [10, 20]
    assert [p["jobs"] for p in report["points"]] == [1, 2]
    assert report["invariants_ok"] and report["overcommits"] == 0
    for point in report["points"]:
        assert point["assigned"] + point["unplaced"] == point["tasks"]
        assert "us_per_placement" in point and "vs_first" in point


def test_rate_mode(app, redis_url):
    report = bench.run_rate(40, duration=0.5, warmup=0.25, nodes=20, workers=1, redis_url=redis_url,
                            namespace=app.keys.namespace, clear=False, drain_timeout=30)
    assert {"offered_rate", "tick_ms", "achieved_rate", "p50_ms", "p99_ms", "placements_per_s", "backlog_max",
            "overcommits", "invariants_ok"} <= set(report)
    assert report["invariants_ok"], report["problems"]
    assert report["overcommits"] == 0
    assert report["scenario"]["measured_tasks"] == 20
    assert report["tasks"] == report["scenario"]["tasks"] == 30
    assert report["assigned"] + report["unplaced"] == report["tasks"]
    assert report["p50_ms"] is not None and report["p50_ms"] <= report["p99_ms"]


def test_scenario_is_reproducible_and_shaped():
    nodes = bench.make_nodes(200, seed=7)
    assert [n.capacity for n in nodes] == [n.capacity for n in bench.make_nodes(200, seed=7)]
    assert len({n.labels["rack"] for n in nodes}) == bench.RACKS
    assert len({n.labels["zone"] for n in nodes}) == bench.ZONES
    zone_of = {}
    for n in nodes:  # a rack lies in one zone
        assert zone_of.setdefault(n.labels["rack"], n.labels["zone"]) == n.labels["zone"]

    scenario = bench.Scenario(jobs=60, replicas=3, seed=7)
    specs = [parse_job(raw) for raw in bench.job_specs(scenario)]
    assert specs == [parse_job(raw) for raw in bench.job_specs(scenario)]
    assert sum(1 for s in specs if s.constraints) == 20
    assert sum(1 for s in specs if s.preferences) == 20
    assert sum(1 for s in specs if s.strategy == "binpack") == 3
    assert len({s.resources["cpu"] for s in specs}) > 1 and len({s.resources["memory"] for s in specs}) > 1

    distinct = bench.job_specs(bench.Scenario(jobs=60, replicas=3, seed=7, distinct=True))
    assert len(distinct) == 180 and all(raw["replicas"] == 1 for raw in distinct)
    assert Counter(raw["id"].split("-")[0] for raw in distinct) == {s.id: 3 for s in specs}


def test_pipelined_registration_matches_put_node(redis_url, namespace):
    """register_nodes lays out node_put.lua's KEYS and ARGV itself: it must write exactly
    what Store.put_node writes for a new node."""
    nodes = [make_node("a1", cpu=4, memory="8GiB", labels={"zone": "z0", "rack": "r00"}),
             make_node("a2", cpu="500m", memory="1GiB", resources={"gpu": 2}, plugins=["net"])]
    piped = App(redis_url=redis_url, namespace=namespace + "p")
    direct = App(redis_url=redis_url, namespace=namespace + "d")
    try:
        bench.register_nodes(piped, nodes, chunk=1)
        for node in nodes:
            direct.store.put_node(node)
        for a, b in ((piped, direct),):
            assert a.store.node_names() == b.store.node_names()
            for node in nodes:
                assert a.client.hgetall(a.keys.node(node.name)) == b.client.hgetall(b.keys.node(node.name))
            assert a.store.resource_names() == b.store.resource_names()
            for key in ("node_seq", "node_epoch"):
                assert a.client.get(getattr(a.keys, key)) == b.client.get(getattr(b.keys, key))
    finally:
        for app in (piped, direct):
            for key in app.client.scan_iter(match=f"{app.keys.prefix}*"):
                app.client.delete(key)


def test_spread_skew_counts_only_nodes_with_room():
    spec = parse_job({"id": "s", "replicas": 4, "resources": {"cpu": 1, "memory": "1GiB"}})
    nodes = [make_node(f"n{i}", cpu=2, memory="4GiB", labels={"zone": "z0"}) for i in range(3)]
    nodes[0].allocated = {"cpu": 2000, "memory": 2 * 2**30}  # full: 2 tasks of the job
    nodes[1].allocated = {"cpu": 1000, "memory": 2**30}
    def task(node: str) -> Task:
        return Task(id=f"s.{node}", job="s", version=1, state="assigned", node=node)

    tasks = [task("n0")] * 2 + [task("n1")]
    # n0 is full, so it does not count: n1 has 1, n2 has 0.
    assert bench.spread_skews(nodes, [spec], tasks) == (1, 0)
    nodes[2].allocated = {"cpu": 1000, "memory": 2**30}  # something else on n2; both have room
    tasks.append(task("n1"))
    nodes[1].allocated = {"cpu": 1000, "memory": 2**30}
    assert bench.spread_skews(nodes, [spec], tasks)[0] == 2


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert bench.percentile(values, 0.5) == 50
    assert bench.percentile(values, 0.99) == 99
    assert bench.percentile([7], 0.99) == 7
    assert bench.percentile([], 0.5) is None


def test_the_progress_bars_run_no_thread():
    """With its bars (not --json) a run must start its workers as it does without them,
    and a process running another thread spawns them instead of forking
    (``workers/supervisor.py``)."""
    before = threading.active_count()
    with bench_progress.Progress(True) as progress:
        update = progress.phase("placing", total=10)
        update(completed=5, note="halfway")
        assert threading.active_count() == before
        update(completed=10)

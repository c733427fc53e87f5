"""Where work may and should go, through a real worker and the Lua commit: taints and
tolerations, topology spread, job affinity and anti-affinity, distinct_property and the
new constraint operators, with the examples kube's and Nomad's documentation give."""

from __future__ import annotations

import orjson
import pytest

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import make_node, parse_job
from scheduler.model.taints import parse_taint
from workers.scheduler_worker import SchedulerWorker, WorkerConfig
from worker_harness import run_worker_until_idle, wait_until


def run(app, *specs) -> dict:
    """Submit the specs, run one worker until nothing is left to try; task id -> (state, node)."""
    for spec in specs:
        reconcile.submit(app.store, parse_job(spec))
    worker = SchedulerWorker(app, WorkerConfig())
    worker.maintain(force=True)  # tasks waiting for a cluster event come back
    while worker.step():
        pass
    store = app.store
    report = audit(store)
    assert report.ok, report.problems
    return {t.id: (t.state, t.node) for t in store.tasks(store.all_task_ids())}


def nodes_of(placed: dict, job: str) -> list[str]:
    return sorted(node for task, (state, node) in placed.items() if task.startswith(f"{job}.") and state == "assigned")


def explanation(app, task_id: str) -> str:
    """What the task's last attempt found, without what preemption found."""
    return orjson.loads(app.store.tasks([task_id])[0].explanation)["message"].split(" preemption")[0]


def zones(app, layout: dict[str, str], cpu=4, **extra) -> None:
    for name, zone in layout.items():
        app.store.put_node(make_node(name, cpu=cpu, memory="8GiB", labels={"zone": zone, **extra.get(name, {})}))


# ----------------------------------------------------------------------------- taints
def test_a_tainted_node_takes_only_tasks_that_tolerate_it(app):
    """kube's dedicated nodes: `dedicated=gpu:NoSchedule` keeps ordinary work off; a job
    tolerating it may go there; PreferNoSchedule only ranks a node last."""
    app.store.put_node(make_node("gpu", cpu=8, memory="8GiB", taints=["dedicated=gpu:NoSchedule"]))
    app.store.put_node(make_node("spot", cpu=8, memory="8GiB", taints=["spot:PreferNoSchedule"]))
    app.store.put_node(make_node("plain", cpu=1, memory="8GiB"))
    placed = run(app, {"id": "web", "replicas": 3, "resources": {"cpu": 1}},
                 {"id": "train", "replicas": 2, "resources": {"cpu": 1},
                  "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                  "constraints": ["node.name==gpu"]})
    assert nodes_of(placed, "web") == ["plain", "spot", "spot"]  # plain first, then the node it prefers against
    assert nodes_of(placed, "train") == ["gpu", "gpu"]


def test_untolerated_taint_is_explained_and_refused_by_the_commit(app):
    app.store.put_node(make_node("a", cpu=4, memory="8GiB", taints=["dedicated=gpu:NoSchedule"]))
    app.store.put_node(make_node("b", cpu=4, memory="8GiB", taints=["dedicated=gpu:NoExecute"]))
    placed = run(app, {"id": "web", "replicas": 1})
    assert placed["web.0"][0] == "pending"
    assert explanation(app, "web.0") == ("0/2 nodes available: 1 untolerated taint dedicated=gpu:NoExecute, "
                                         "1 untolerated taint dedicated=gpu:NoSchedule.")
    # A toleration without a key (operator Exists) tolerates every taint.
    placed = run(app, {"id": "any", "replicas": 2, "tolerations": [{"operator": "Exists"}]})
    assert nodes_of(placed, "any") == ["a", "b"]


def test_taint_and_untaint_change_where_work_goes(app):
    app.store.put_node(make_node("a", cpu=4, memory="8GiB"))
    before, after = app.store.taint("a", parse_taint("maintenance:NoSchedule"))
    assert (before, after) == ("", "maintenance:NoSchedule")
    placed = run(app, {"id": "web", "replicas": 1})
    assert placed["web.0"][0] == "pending"
    app.store.untaint("a", "maintenance")  # a cluster event: the task is tried again after its backoff
    assert app.store.get_node("a").taints == ()
    run_worker_until_idle(app)
    assert app.store.tasks(["web.0"])[0].node == "a"


# ----------------------------------------------------------------------------- topology spread
def test_hard_spread_keeps_zones_within_max_skew_and_waits_when_one_is_full(app):
    """kube's example: maxSkew 1 over zones; when zone c is full, the rest wait
    (DoNotSchedule) rather than pile into a and b."""
    zones(app, {"a1": "a", "b1": "b"}, cpu=3)
    zones(app, {"c1": "c"}, cpu=1)
    spec = {"id": "web", "replicas": 9, "resources": {"cpu": 1},
            "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 1}]}
    placed = run(app, spec)
    assert nodes_of(placed, "web") == ["a1", "a1", "b1", "b1", "c1"]
    pending = [task for task, (state, _) in placed.items() if state == "pending"]
    assert len(pending) == 4
    assert explanation(app, pending[0]) == ("0/3 nodes available: 2 topology_spread node.labels.zone max_skew 1 "
                                            "exceeded, 1 insufficient cpu.")


def test_min_domains_holds_the_minimum_at_zero_until_enough_domains_exist(app):
    zones(app, {"a1": "a", "b1": "b"})
    placed = run(app, {"id": "web", "replicas": 4, "topology_spread": [
        {"attribute": "node.labels.zone", "max_skew": 1, "min_domains": 3}]})
    assert nodes_of(placed, "web") == ["a1", "b1"]  # one per zone: a third zone is missing


def test_a_node_without_the_attribute_is_no_domain(app):
    zones(app, {"a1": "a"})
    app.store.put_node(make_node("bare", cpu=8, memory="8GiB"))
    placed = run(app, {"id": "web", "replicas": 2, "topology_spread": [{"attribute": "node.labels.zone"}]})
    assert nodes_of(placed, "web") == ["a1", "a1"]  # one domain: never a skew; the bare node takes none
    placed = run(app, {"id": "full", "resources": {"cpu": 6}, "topology_spread": [{"attribute": "node.labels.zone"}]})
    assert explanation(app, "full.0") == ("0/2 nodes available: 1 insufficient cpu, 1 no node.labels.zone for "
                                          "topology_spread.")


def test_spread_targets_share_tasks_by_percentage(app):
    """Nomad's spread targets: 70% in eu-1, 30% in eu-2."""
    zones(app, {**{f"e1-{i}": "eu-1" for i in range(3)}, **{f"e2-{i}": "eu-2" for i in range(3)}}, cpu=8)
    placed = run(app, {"id": "web", "replicas": 10, "preferences": [
        {"spread": "node.labels.zone", "targets": {"eu-1": 70, "eu-2": 30}}]})
    on = nodes_of(placed, "web")
    assert sum(node.startswith("e1") for node in on) == 7 and sum(node.startswith("e2") for node in on) == 3


# ----------------------------------------------------------------------------- job (anti-)affinity
def test_anti_affinity_with_itself_runs_one_task_per_zone(app):
    zones(app, {"a1": "a", "a2": "a", "b1": "b"})
    placed = run(app, {"id": "db", "replicas": 3, "labels": {"app": "db"}, "job_anti_affinity": [
        {"match": {"app": "db"}, "attribute": "node.labels.zone", "required": True}]})
    on = nodes_of(placed, "db")
    assert len(on) == 2 and "b1" in on
    pending = [task for task, (state, _) in placed.items() if state == "pending"]
    assert explanation(app, pending[0]) == "0/3 nodes available: 3 job_anti_affinity app=db on node.labels.zone."


def test_required_anti_affinity_is_symmetric(app):
    """A running primary with anti-affinity to app=replica keeps a replica job that
    has no rule of its own off its hosts."""
    zones(app, {"h1": "a", "h2": "a"})
    placed = run(app, {"id": "primary", "labels": {"app": "primary"}, "constraints": ["node.name==h1"],
                       "job_anti_affinity": [{"match": {"app": "replica"}, "attribute": "node.hostname",
                                              "required": True}]})
    assert nodes_of(placed, "primary") == ["h1"]
    placed = run(app, {"id": "replica", "replicas": 2, "labels": {"app": "replica"}})
    assert nodes_of(placed, "replica") == ["h2", "h2"]


def test_affinity_puts_a_cache_beside_its_app_and_waits_without_it(app):
    zones(app, {"h1": "a", "h2": "a", "h3": "a"})
    cache = {"id": "cache", "replicas": 2,
             "job_affinity": [{"match": {"app": "web"}, "attribute": "node.hostname", "required": True}]}
    placed = run(app, cache)
    assert [state for state, _ in placed.values()] == ["pending", "pending"]
    assert "job_affinity app=web on node.hostname not met" in explanation(app, "cache.0")
    placed = run(app, {"id": "web", "labels": {"app": "web"}, "constraints": ["node.name==h2"]})
    # The cache's tasks wait as unschedulable; a new version of it is placed at once.
    placed = run(app, {**cache, "priority": 60})
    assert nodes_of(placed, "cache") == ["h2", "h2"]


def test_the_first_task_of_a_job_with_affinity_to_itself_may_go_anywhere(app):
    zones(app, {"a1": "a", "b1": "b"})
    placed = run(app, {"id": "pack", "replicas": 3, "labels": {"app": "pack"}, "job_affinity": [
        {"match": {"app": "pack"}, "attribute": "node.labels.zone", "required": True}]})
    on = nodes_of(placed, "pack")
    assert len(on) == 3 and len(set(on)) == 1  # all beside the first


def test_soft_affinity_prefers_and_falls_back(app):
    zones(app, {"e1": "eu-1", "e2": "eu-2"}, cpu=2)
    placed = run(app, {"id": "web", "replicas": 3, "resources": {"cpu": 1}, "affinities": [
        {"attribute": "node.labels.zone", "operator": "==", "value": "eu-1", "weight": 50}]})
    assert nodes_of(placed, "web") == ["e1", "e1", "e2"]


# ----------------------------------------------------------------------------- Nomad's constraint operators
def test_distinct_property_caps_tasks_per_value(app):
    zones(app, {"r1a": "r1", "r1b": "r1", "r2a": "r2"})
    placed = run(app, {"id": "web", "replicas": 5, "constraints": ["node.labels.zone distinct_property 2"]})
    on = nodes_of(placed, "web")
    assert sum(n.startswith("r1") for n in on) == 2 and on.count("r2a") == 2
    pending = [task for task, (state, _) in placed.items() if state == "pending"]
    assert "distinct_property node.labels.zone 2 reached" in explanation(app, pending[0])


def test_version_semver_and_set_operators(app):
    for name, kernel, features in (("old", "4.19", "sse4"), ("new", "5.15.0", "avx2,sse4"),
                                   ("rc", "6.0.0-rc1", "avx2")):
        app.store.put_node(make_node(name, cpu=4, memory="8GiB", labels={"kernel": kernel, "features": features}))
    placed = run(app,
                 {"id": "v", "replicas": 2, "constraints": ["node.labels.kernel version >= 5.10, < 7"]},
                 {"id": "s", "replicas": 2, "constraints": ["node.labels.kernel semver >= 5.10.0"]},
                 {"id": "c", "replicas": 2, "constraints": ["node.labels.features set_contains avx2,sse4"]},
                 {"id": "y", "replicas": 2, "constraints": ["node.labels.features set_contains_any avx2"]})
    assert set(nodes_of(placed, "v")) == {"new"}  # go-version: a pre-release never meets a constraint without one
    assert set(nodes_of(placed, "s")) == {"new", "rc"}  # semver: 6.0.0-rc1 > 5.10.0
    assert set(nodes_of(placed, "c")) == {"new"}
    assert set(nodes_of(placed, "y")) == {"new", "rc"}


def test_domain_counts_follow_tasks_that_end(app):
    """What the commit counts, release takes back exactly, even after the node's labels changed."""
    zones(app, {"a1": "a"})
    run(app, {"id": "db", "replicas": 2, "labels": {"app": "db"}})
    assert app.store.domain_counts(["db"])["db"]["node.labels.zone=a"] == 2
    app.store.put_node(make_node("a1", cpu=4, memory="8GiB", labels={"zone": "z"}))  # relabelled while running
    reconcile.stop(app.store, "db")
    assert app.store.domain_counts(["db"])["db"] == {}


def test_no_execute_evicts_what_does_not_tolerate_it_after_its_toleration_seconds(app):
    """kube's taint manager: a NoExecute taint evicts (stops and replaces elsewhere) the
    tasks that do not tolerate it at once, and those tolerating it for
    toleration_seconds once that long has passed since the taint was added."""
    from scheduler.control import evictions

    zones(app, {"a": "a", "b": "b"})
    placed = run(app, {"id": "web", "constraints": ["node.name==a"]},
                 {"id": "patient", "constraints": ["node.name==a"],
                  "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute",
                                   "toleration_seconds": 1}]},
                 {"id": "stays", "constraints": ["node.name==a"],
                  "tolerations": [{"key": "maintenance", "operator": "Exists"}]})
    assert {placed[t][1] for t in ("web.0", "patient.0", "stays.0")} == {"a"}
    app.store.taint("a", parse_taint("maintenance:NoExecute"))
    assert evictions.enforce(app.store) == ["web.0"]
    web = app.store.tasks(["web.0", "web.1"])
    assert (web[0].state, web[0].message) == ("stopped", "evicted from node a by its taint maintenance:NoExecute")
    assert web[1].state == "pending"  # its replacement (it may not go back to a)
    wait_until(lambda: evictions.enforce(app.store) == ["patient.0"], 10, "the toleration to run out")
    assert app.store.tasks(["stays.0"])[0].state == "assigned"
    app.store.untaint("a", "maintenance")
    assert evictions.enforce(app.store) == [] and app.store.noexecute_nodes() == []


def test_preemption_evicts_only_where_the_anti_affinity_then_holds(app):
    """Both nodes are full of low-priority tasks; one also runs a database the new task
    must stay away from. The worker evicts on the other node, never for room it could not
    take."""
    zones(app, {"h1": "a", "h2": "a"}, cpu=2)
    run(app, {"id": "db", "labels": {"app": "db"}, "priority": 900, "preemptible": False,
              "resources": {"cpu": 1}, "constraints": ["node.name==h1"]},
        {"id": "low", "replicas": 3, "priority": 10, "resources": {"cpu": 1}})
    placed = run(app, {"id": "hi", "priority": 100, "resources": {"cpu": 1}, "job_anti_affinity": [
        {"match": {"app": "db"}, "attribute": "node.hostname", "required": True}]})
    preempted = [(t, node) for t, (state, node) in placed.items() if state == "preempted"]
    assert len(preempted) == 1 and preempted[0][1] == "h2"  # never the low task beside the database
    run_worker_until_idle(app)  # the preemptor, nominated to h2, is placed there
    assert app.store.tasks(["hi.0"])[0].node == "h2"


# ----------------------------------------------------------------------------- plan, dashboard
def test_plan_and_the_dashboard_say_which_rule_stops_a_task(app):
    from starlette.testclient import TestClient

    from scheduler.control.plan import placements
    from scheduler.tools.ui.app import create_app

    zones(app, {"a1": "a", "b1": "b"})
    app.store.put_node(make_node("gpu", cpu=4, memory="8GiB", labels={"zone": "c"}, taints=["dedicated=gpu:NoSchedule"]))
    spec = {"id": "db", "replicas": 3, "labels": {"app": "db"}, "job_anti_affinity": [
        {"match": {"app": "db"}, "attribute": "node.labels.zone", "required": True}]}
    planned = placements(app, parse_job(spec))
    assert sorted(p["node"] for p in planned["placements"]) == ["a1", "b1"]
    assert planned["pending"][0]["message"].startswith(
        "0/3 nodes available: 2 job_anti_affinity app=db on node.labels.zone, 1 untolerated taint "
        "dedicated=gpu:NoSchedule.")
    run(app, spec)
    pending = [t.id for t in app.store.tasks(app.store.all_task_ids()) if t.state == "pending"]
    ns = app.keys.namespace
    with TestClient(create_app(app)) as web:
        assert "dedicated=gpu:NoSchedule" in web.get(f"/nodes?ns={ns}").text
        page = web.get(f"/tasks/{pending[0]}?ns={ns}").text
        assert "job_anti_affinity app=db on node.labels.zone" in page and "untolerated taint" in page
        waits = web.get(f"/jobs/db?ns={ns}").text
        assert "2 job_anti_affinity app=db on node.labels.zone" in waits


def test_the_node_by_node_verdict_names_the_domain_rule():
    from scheduler.engine.domains import DomainCounts
    from scheduler.engine.rules import RuleIndex, resolve
    from scheduler.engine.verdicts import verdicts

    nodes = [make_node(name, cpu=4, memory="8GiB", labels={"zone": zone}) for name, zone in
             (("a1", "a"), ("a2", "a"), ("b1", "b"))]
    spec = parse_job({"id": "web", "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 1}]})
    rules = resolve(spec, RuleIndex(), lambda attribute: ["a", "b"])
    counts = DomainCounts({"web": {"node.labels.zone=a": 2, "node.labels.zone=b": 1}})
    found = {v.node: v.reason for v in verdicts(spec, nodes, {}, rules, counts)}
    assert found == {"b1": None, "a1": "topology_spread node.labels.zone max_skew 1 exceeded",
                     "a2": "topology_spread node.labels.zone max_skew 1 exceeded"}


def test_sched_node_taint_untaint_and_ls(sched, app, monkeypatch):
    """The commands as typed: `node add --taint` (repeated), `node taint`, `node ls`
    (table and --json), `node untaint`; bad input is one sentence and writes nothing."""
    monkeypatch.setenv("COLUMNS", "200")  # the table, unwrapped
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB", "--taint", "dedicated=gpu:NoSchedule",
          "--taint", "spot:PreferNoSchedule")
    assert sched("node", "taint", "n1", "gone:NoExecute").stdout == "node n1 tainted gone:NoExecute\n"
    table = sched("node", "ls").stdout
    assert "TAINTS" in table.splitlines()[0] and "dedicated=gpu:NoSchedule" in table
    listed = orjson.loads(sched("node", "ls", "--json").stdout)
    assert listed[0]["taints"] == ["dedicated=gpu:NoSchedule", "spot:PreferNoSchedule", "gone:NoExecute"]
    assert sched("node", "untaint", "n1", "spot").stdout == "node n1 untainted spot\n"
    gone = sched("node", "untaint", "n1", "spot", ok=False)  # as kubectl: a taint that is not there is an error
    assert (gone.exit_code, gone.stderr) == (2, "Error: node n1 has no taint spot; its taints are "
                                                "dedicated=gpu:NoSchedule gone:NoExecute.\n")
    before = app.client.hget(app.keys.node("n1"), "taints")
    for args, error in ((("node", "taint", "n1", "gpu"),
                         "Error: taint 'gpu' must look like KEY[=VALUE]:EFFECT, such as dedicated=gpu:NoSchedule."),
                        (("node", "taint", "n1", "k:NoScheduled"),
                         "Error: taint 'k:NoScheduled': effect 'NoScheduled' is not one of NoSchedule, "
                         "PreferNoSchedule, NoExecute."),
                        (("node", "untaint", "n1", "k:Nope"),
                         "Error: taint effect 'Nope' is not one of NoSchedule, PreferNoSchedule, NoExecute."),
                        (("node", "taint", "nope", "k:NoSchedule"), "Error: node 'nope' does not exist.")):
        result = sched(*args, ok=False)
        assert (result.exit_code, result.stderr.strip()) == (2, error)
    assert app.client.hget(app.keys.node("n1"), "taints") == before
    assert [e["action"] for e in app.store.read_history(node="n1")] == ["taint", "untaint"]


# ----------------------------------------------------------------------------- soft rules, the placer alone
def place_alone(spec: dict, nodes, counts=None, index=None):
    from scheduler.engine.domains import DomainCounts
    from scheduler.engine.placement import PlacementOptions, Placer
    from scheduler.engine.rules import RuleIndex, resolve

    job = parse_job(spec)
    placer = Placer(PlacementOptions(seed=3))
    domains = DomainCounts(counts or {})
    rules = resolve(job, index or RuleIndex(), lambda attribute: placer.eligible_domains(nodes, job, attribute))
    return placer.place(nodes, job, [f"{job.id}.{i}" for i in range(job.replicas)], job_counts={}, rules=rules,
                        domains=domains)


def test_schedule_anyway_prefers_the_emptier_domain_and_never_waits():
    nodes = [make_node(f"{zone}{i}", cpu=1, memory="1GiB", labels={"zone": zone}) for zone in "ab" for i in range(2)]
    counts = {"web": {"node.labels.zone=a": 5, "*": 5}}
    result = place_alone({"id": "web", "replicas": 4, "resources": {"cpu": 1}, "topology_spread": [
        {"attribute": "node.labels.zone", "when_unsatisfiable": "ScheduleAnyway"}]}, nodes, counts)
    order = [node for _, node in result.assignments]
    assert sorted(order[:2]) == ["b0", "b1"] and sorted(order[2:]) == ["a0", "a1"] and not result.unplaced


def test_soft_job_anti_affinity_goes_elsewhere_while_it_can():
    def nodes():
        return [make_node(name, cpu=1, memory="1GiB") for name in ("h1", "h2")]

    index = RuleIndexOf({"batch": {"app": "batch"}})
    counts = {"batch": {"node.hostname=h1": 1, "node.name=h1": 1, "*": 1}}
    spec = {"id": "web", "resources": {"cpu": 1}, "job_anti_affinity": [
        {"match": {"app": "batch"}, "attribute": "node.hostname", "weight": 80}]}
    assert place_alone(spec, nodes(), counts, index).assignments == [("web.0", "h2")]
    assert [n for _, n in place_alone({**spec, "replicas": 2}, nodes(), counts, index).assignments] == ["h2", "h1"]


@pytest.mark.parametrize("min_domains, counts, placed", [
    (2, {"a": 1, "b": 1, "c": 1}, True),  # three eligible domains, not one: c may hold one more
    (1, {"a": 0, "b": 1, "c": 1}, False),  # a holds none: c may not hold two
])
def test_a_task_placed_on_its_pinned_node_alone_is_spread_over_every_eligible_domain(min_domains, counts, placed):
    """A pinned task (a move's new task) is placed on its node alone; its hard spread's
    global minimum is still taken over every eligible domain, as the explanation and the
    commit take it, not over the one node's."""
    from scheduler.engine.domains import DomainCounts
    from scheduler.engine.placement import PlacementOptions, Placer
    from scheduler.engine.rules import RuleIndex, resolve

    nodes = [make_node(f"{zone}1", cpu=4, memory="8GiB", labels={"zone": zone}) for zone in "abc"]
    job = parse_job({"id": "web", "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 1,
                                                       "min_domains": min_domains}]})
    placer = Placer(PlacementOptions(seed=3))
    rules = resolve(job, RuleIndex(), lambda attribute: placer.eligible_domains(nodes, job, attribute))
    domains = DomainCounts({"web": {f"node.labels.zone={zone}": n for zone, n in counts.items()}})
    result = placer.place([nodes[2]], job, ["web.9"], job_counts={}, rules=rules, domains=domains)
    assert (result.assignments == [("web.9", "c1")]) == placed, result


def RuleIndexOf(labels):
    from scheduler.engine.rules import RuleIndex

    return RuleIndex("1", labels, {})


def test_a_global_job_keeps_its_running_task_under_no_schedule_and_leaves_under_no_execute(app):
    """A DaemonSet's way: a NoSchedule taint keeps a global job's new tasks off a node but
    leaves the task running there; a NoExecute taint evicts it (and it is not put back);
    a node that joins tainted gets no task."""
    from scheduler.control import evictions

    zones(app, {"a": "a", "b": "b"})
    run(app, {"id": "agentd", "type": "global"})
    on = lambda: sorted(t.node for t in app.store.tasks(app.store.job_task_ids("agentd")) if t.live)
    assert on() == ["a", "b"]
    app.store.taint("a", parse_taint("maintenance:NoSchedule"))
    app.store.put_node(make_node("c", cpu=4, memory="8GiB", taints=["maintenance:NoSchedule"]))
    reconcile.reconcile_global(app.store)
    run_worker_until_idle(app)
    assert on() == ["a", "b"]  # kept on a; none for c
    assert not [t for t in app.store.tasks(app.store.job_task_ids("agentd")) if t.state == "pending"]
    app.store.taint("a", parse_taint("evict:NoExecute"))
    assert evictions.enforce(app.store) == ["agentd.0"]
    reconcile.reconcile_global(app.store)
    run_worker_until_idle(app)
    assert on() == ["b"]

"""Every hard placement rule holds however many workers place at once.

Eight worker processes, with small batches so that one job's tasks are split between
them and their commits collide, place random jobs with taints and tolerations, hard
topology spread, distinct_property and required job affinity and anti-affinity (against
themselves and each other) on a small cluster. Workers plan in parallel against their own
copies; only the Lua commit can keep the rules. Then the final state is checked against
every rule, from the tasks and nodes alone, and the bookkeeping (tally:dom included)
against the tasks.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.model import make_node, parse_job
from scheduler.model.constraints import attribute_getter
from scheduler.model.taints import untolerated

APPS = ("x", "y", "z")
ATTRIBUTES = ("node.labels.zone", "node.hostname", "node.labels.rack")


def cluster() -> list:
    nodes = []
    for i in range(12):
        labels = {"rack": f"r{i % 4}"}
        if i % 6:  # two nodes without a zone: no spread domain
            labels["zone"] = "abc"[i % 3]
        taints = ["dedicated=gpu:NoSchedule"] if i in (3, 7) else ["spot:PreferNoSchedule"] if i == 5 else []
        nodes.append(make_node(f"n{i}", cpu=4, memory="8GiB", labels=labels, taints=taints))
    return nodes


@st.composite
def jobs(draw) -> list[dict]:
    out = []
    for j in range(draw(st.integers(4, 7))):
        spec: dict = {"id": f"j{j}", "replicas": draw(st.integers(2, 8)), "resources": {"cpu": draw(st.sampled_from(
            ["0", "500m", "1"]))}}
        app = draw(st.sampled_from((*APPS, None)))
        if app:
            spec["labels"] = {"app": app}
        if draw(st.booleans()):
            spec["topology_spread"] = [{"attribute": draw(st.sampled_from(ATTRIBUTES)), "max_skew": draw(st.integers(1, 2)),
                                        **({"min_domains": 3} if draw(st.booleans()) else {})}]
        if draw(st.integers(0, 3)) == 0:
            spec["constraints"] = [f"node.labels.rack distinct_property {draw(st.integers(1, 2))}"]
        if draw(st.integers(0, 3)) == 0:
            spec["job_anti_affinity"] = [{"match": {"app": draw(st.sampled_from(APPS))},
                                          "attribute": draw(st.sampled_from(ATTRIBUTES)), "required": True}]
        if draw(st.integers(0, 3)) == 0:
            spec["job_affinity"] = [{"match": {"app": draw(st.sampled_from(APPS))}, "attribute": "node.labels.zone",
                                     "required": True}]
        if draw(st.integers(0, 3)) == 0:
            spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        out.append(spec)
    return out


def domain(node, attribute: str) -> str:
    return attribute_getter(attribute)(node)


def broken_rules(specs, nodes, tasks) -> list[str]:
    """Every rule the final state breaks (tasks only start here: none ended)."""
    problems = []
    by_job: dict[str, list] = {spec.id: [] for spec in specs}
    for task in tasks:
        if task.live:
            by_job[task.job].append(nodes[task.node])
    labels = {spec.id: spec.labels for spec in specs}

    def in_domain(job_ids, attribute, value) -> int:
        return sum(1 for job in job_ids for node in by_job[job] if domain(node, attribute) == value)

    for spec in specs:
        placed = by_job[spec.id]
        for node in placed:
            taint = untolerated(node.taints, spec.tolerations)
            if taint is not None:
                problems.append(f"{spec.id} on {node.name} despite taint {taint}")
        for spread in spec.topology_spread:
            eligible = {domain(n, spread.attribute) for n in nodes.values()} - {""}
            counts = {value: in_domain([spec.id], spread.attribute, value) for value in eligible}
            low = 0 if len(eligible) < spread.min_domains or not counts else min(counts.values())
            if any(domain(n, spread.attribute) == "" for n in placed):
                problems.append(f"{spec.id} placed where {spread.attribute} is missing")
            if counts and max(counts.values()) - low > spread.max_skew:
                problems.append(f"{spec.id} skew over {spread.attribute}: {counts} (max_skew {spread.max_skew})")
        for c in spec.constraints:
            if c.dynamic:
                for value in {domain(n, c.key) for n in placed}:
                    if in_domain([spec.id], c.key, value) > c.limit:
                        problems.append(f"{spec.id} has more than {c.limit} tasks on {c.key}={value}")
        for term in spec.job_anti_affinity:
            matched = [job for job in by_job if term.selector.matches(labels[job])]
            for value in {domain(n, term.attribute) for n in placed} - {""}:
                others = in_domain([job for job in matched if job != spec.id], term.attribute, value)
                mine = in_domain([spec.id], term.attribute, value)
                if others or (spec.id in matched and mine > 1):
                    problems.append(f"{spec.id} shares {term.attribute}={value} with {matched}")
        for term in spec.job_affinity:
            matched = [job for job in by_job if term.selector.matches(labels[job])]
            for node in placed:
                value = domain(node, term.attribute)
                if not value or not in_domain(matched, term.attribute, value):
                    problems.append(f"{spec.id} on {node.name} with no task of {matched} in its {term.attribute}")
    return problems


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(raw=jobs())
def test_eight_workers_keep_every_hard_rule(app, redis_url, raw):
    from workers.supervisor import WorkerProcesses

    for key in app.client.scan_iter(match=f"sched:{{{app.keys.namespace}}}:*", count=1000):
        if key != app.keys.layout:  # an example's namespace starts empty but for its key layout
            app.client.delete(key)
    nodes = cluster()
    for node in nodes:
        app.store.put_node(node)
    specs = [parse_job(spec) for spec in raw]
    for spec in specs:
        reconcile.submit(app.store, spec)
    pool = WorkerProcesses(redis_url, app.keys.namespace,
                           [WorkerConfig(until_idle=True, batch_size=size, share_from=2,
                                         placement=PlacementOptions(seed=i))
                            for i, size in enumerate((2, 3, 3, 4, 4, 5, 6, 8))])
    pool.start()
    pool.join(timeout=120)
    assert pool.crashed == 0
    report = audit(app.store)
    assert report.ok, report.problems
    tasks = app.store.tasks(app.store.all_task_ids())
    event(f"{sum(t.live for t in tasks)} of {len(tasks)} placed")  # mutual affinities may place none, as in kube
    assert broken_rules(specs, {n.name: app.store.get_node(n.name) for n in nodes}, tasks) == []

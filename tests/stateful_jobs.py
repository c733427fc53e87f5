"""Random job specs for the state machine (tests/test_stateful.py): every type, and the
rules where they meet, over the labels the machine gives its nodes (zone a/b/c, rack
r1/r2, either missing) and the taint keys it uses (k1, k2). Only the constraint forms
``placement_ledger.py`` reads are written."""

from __future__ import annotations

from hypothesis import strategies as st

KINDS = ("service", "service", "batch", "batch", "global", "sysbatch", "periodic", "parameterized")
APPS = ("web", "db")
ATTRIBUTES = ("node.labels.zone", "node.labels.rack", "node.hostname")


@st.composite
def toleration(draw) -> dict:
    effect = draw(st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute", "NoExecute"]))
    out: dict = {"key": draw(st.sampled_from(["k1", "k2"]))}
    if draw(st.integers(0, 5)) == 0:
        out = {"operator": "Exists"}  # every taint
    elif draw(st.booleans()):
        out["operator"] = "Exists"
    else:
        out.update(operator="Equal", value=draw(st.sampled_from(["", "x", "y"])))
    if effect:
        out["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        out["toleration_seconds"] = draw(st.sampled_from([0, 2, 5, 10, 30]))
    return out


@st.composite
def constraints(draw, nodes: list[str], placed_freely: bool) -> list[str]:
    choices = ["node.labels.zone==a", "node.labels.zone!=b", "node.labels.zone in a,c", "node.labels.rack is_set"]
    if nodes:
        choices.append(f"node.name=={draw(st.sampled_from(nodes))}")
    if placed_freely:
        choices.append(f"node.labels.rack distinct_property {draw(st.integers(1, 2))}")
    if draw(st.booleans()):
        return []
    return draw(st.lists(st.sampled_from(choices), min_size=1, max_size=2, unique=True))


@st.composite
def job_spec(draw, job_id: str, nodes: list[str], jobs: list[str]) -> dict:
    kind = draw(st.sampled_from(KINDS))
    spec: dict = {"id": job_id, "priority": draw(st.sampled_from([10, 50, 90])),
                  "restart_delay": draw(st.sampled_from([0, 1, 5])),
                  "resources": {"cpu": draw(st.sampled_from(["0", "250m", "500m", "1", "2"]))}}
    if kind == "periodic":
        spec["type"] = draw(st.sampled_from(["batch", "sysbatch"]))
        cron = draw(st.sampled_from(["0 0 1 1 *", "0 0 1 1 *", "* * * * *"]))  # yearly, or every minute
        spec["periodic"] = {"cron": cron,
                            "overlap": draw(st.sampled_from(["allow", "forbid", "replace"]))}
    elif kind == "parameterized":
        spec["type"] = "batch"
        spec["parameterized"] = {"payload": "optional"}
    else:
        spec["type"] = kind
    per_node = spec["type"] in ("global", "sysbatch")
    if not per_node:
        spec["replicas"] = draw(st.integers(0, 4))
    if spec["type"] in ("batch", "sysbatch"):
        spec["max_retries"] = draw(st.integers(0, 2))
    if spec["type"] == "batch" and draw(st.integers(0, 3)) == 0:
        spec["parallelism"] = draw(st.integers(1, 2))
    if draw(st.booleans()):
        spec["resources"]["memory"] = "1Gi"
    spec["constraints"] = draw(constraints(nodes, not per_node))
    if draw(st.booleans()):
        spec["labels"] = {"app": draw(st.sampled_from(APPS))}
    if not per_node and draw(st.booleans()):
        rule: dict = {"attribute": draw(st.sampled_from(ATTRIBUTES)), "max_skew": draw(st.integers(1, 2)),
                      "when_unsatisfiable": draw(st.sampled_from(["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]))}
        if rule["when_unsatisfiable"] == "DoNotSchedule" and draw(st.integers(0, 3)) == 0:
            rule["min_domains"] = draw(st.integers(2, 3))
        if draw(st.integers(0, 2)) == 0:
            rule["match"] = {"app": draw(st.sampled_from(APPS))}
        spec["topology_spread"] = [rule]
    if not per_node and draw(st.integers(0, 2)) == 0:
        term: dict = {"match": {"app": draw(st.sampled_from(APPS))}, "attribute": draw(st.sampled_from(ATTRIBUTES))}
        term.update({"required": True} if draw(st.booleans()) else {"weight": 50})
        spec["job_anti_affinity"] = [term]
    if not per_node and draw(st.integers(0, 4)) == 0:
        spec["job_affinity"] = [{"match": {"app": draw(st.sampled_from(APPS))}, "attribute": "node.labels.zone",
                                 "required": True}]
    spec["tolerations"] = draw(st.lists(toleration(), max_size=2))
    spec["ports"] = draw(st.sampled_from([[], [], [8080], [8080, 9090]]))
    if not per_node:
        spec["max_per_node"] = draw(st.integers(0, 2))
    spec["preemptible"] = draw(st.booleans())
    if jobs and draw(st.integers(0, 3)) == 0:
        spec["after"] = [{"job": job, "state": draw(st.sampled_from(["complete", "failed", "ended"]))}
                         for job in draw(st.lists(st.sampled_from(jobs), min_size=1, max_size=2, unique=True))]
    if draw(st.booleans()):
        if spec["type"] in ("batch", "sysbatch"):  # a whole min_available only
            spec["disruption_budget"] = {"min_available": draw(st.integers(0, 2))}
        else:
            field = draw(st.sampled_from(["max_unavailable", "min_available"]))
            spec["disruption_budget"] = {field: draw(st.sampled_from([0, 1, 2, "50%"]))}
    if draw(st.integers(0, 2)) == 0:
        spec["ttl_after_finished"] = draw(st.sampled_from([0, 30]))
    return {k: v for k, v in spec.items() if v not in ([], None)}


@st.composite
def plain_service(draw, job_id: str) -> dict:
    """A service that runs wherever there is room, so that rebalances have running tasks
    to move: a few replicas, maybe a disruption budget and a spread over zones."""
    spec: dict = {"id": job_id, "type": "service", "replicas": draw(st.integers(2, 4)),
                  "resources": {"cpu": draw(st.sampled_from(["0", "250m"]))}, "labels": {"app": "web"}}
    if draw(st.booleans()):
        field = draw(st.sampled_from(["max_unavailable", "min_available"]))
        spec["disruption_budget"] = {field: draw(st.sampled_from([0, 1, "50%"]))}
    if draw(st.booleans()):
        spec["topology_spread"] = [{"attribute": "node.labels.zone", "max_skew": 1,
                                    "when_unsatisfiable": draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]))}]
    return spec

"""The Python fit rule (scheduler.fit.misfit) and the Lua commit check agree on every case.

Each example writes a node straight into Redis, gives a task a lease, commits one
placement through lua/commit.lua, and compares the script's verdict with misfit's.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.commit import Planned, commit
from scheduler.fit import misfit
from scheduler.model import Node, parse_job

RESOURCES = ("cpu", "memory", "gpu")

nodes = st.builds(
    lambda cap, alloc, ports, status, availability: (cap, alloc, ports, status, availability),
    st.fixed_dictionaries({r: st.integers(0, 8) for r in RESOURCES}),
    st.fixed_dictionaries({r: st.integers(0, 8) for r in RESOURCES}),
    st.sets(st.sampled_from([80, 443, 8080]), max_size=2),
    st.sampled_from(["ready", "ready", "ready", "down"]),
    st.sampled_from(["active", "active", "active", "pause", "drain"]),
)
requests = st.builds(
    lambda res, ports, max_per_node, on_node: (res, ports, max_per_node, on_node),
    st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 6), min_size=1),
    st.lists(st.sampled_from([80, 443, 8080, 9090]), max_size=2, unique=True),
    st.integers(0, 3),
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=nodes, request=requests)
def test_lua_commit_agrees_with_misfit(app, node, request):
    cap, alloc, used_ports, status, availability = node
    resources, ports, max_per_node, on_node = request
    k, client = app.keys, app.client
    client.delete(k.node("n"), k.tally_job("j"), k.task("j.0"), k.node_tasks("n"))
    fields = {"name": "n", "status": status, "availability": availability, "tasks": 0}
    for r in RESOURCES:
        fields[f"cap:{r}"] = cap[r]
        fields[f"alloc:{r}"] = alloc[r]
    for port in used_ports:
        fields[f"port:{port}"] = "other"
    client.hset(k.node("n"), mapping=fields)
    if on_node:
        client.zadd(k.tally_job("j"), {"n": on_node})
    client.hset(k.task("j.0"), mapping={"id": "j.0", "job": "j", "state": "pending"})
    client.zadd(k.inflight, {"j.0": 1})
    client.hset(k.leases, "j.0", "7")

    # Amounts here are raw integers in each resource's unit (millicores, bytes, units).
    spec = parse_job({"id": "j", "ports": ports, "max_per_node": max_per_node})
    spec = spec.__class__(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "resources": resources})
    py = misfit(Node(name="n", capacity=cap, allocated=alloc, status=status, availability=availability,
                     ports={p: "other" for p in used_ports}),
                spec.resources, spec.ports, spec.max_per_node, on_node)
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec)])
    lua = None if outcome.accepted else outcome.refused[0][1]
    assert lua == py
    if py is None:
        after = client.hgetall(k.node("n"))
        for r, amount in resources.items():
            assert int(after[f"alloc:{r}"]) == alloc[r] + amount
        assert client.hget(k.task("j.0"), "state") == "assigned"


def test_stale_token_is_refused_before_anything_else(app):
    k, client = app.keys, app.client
    client.hset(k.node("n"), mapping={"name": "n", "status": "ready", "availability": "active",
                                      "cap:cpu": 1000, "alloc:cpu": 0})
    client.hset(k.task("j.0"), mapping={"id": "j.0", "job": "j", "state": "pending"})
    client.hset(k.leases, "j.0", "8")
    spec = parse_job({"id": "j", "resources": {"cpu": 0.5}})
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec)])
    assert [reason for _, reason in outcome.refused] == ["lease expired"]
    assert client.hget(k.node("n"), "alloc:cpu") == "0"
    assert client.hget(k.task("j.0"), "state") == "pending"

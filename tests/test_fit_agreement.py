"""The Python fit rule (scheduler.fit.misfit) and the Lua commit check agree on every case.

Each example writes a node straight into Redis, gives a task a lease, commits one
placement through lua/commit.lua, and compares the script's verdict with misfit's.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.state.commit import Planned, by_spec, commit
from scheduler.engine.fit import misfit
from scheduler.model import JobSpec, Node, parse_job

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


def fresh_node_fields(app, node) -> dict:
    """Clear the keys an example uses; the node hash fields for ``node`` (not yet written)."""
    cap, alloc, used_ports, status, availability = node
    k = app.keys
    app.client.delete(k.node("n"), k.tally_job("j"), k.task("j.0"), k.node_tasks("n"))
    fields = {"name": "n", "status": status, "availability": availability, "tasks": 0}
    for r in RESOURCES:
        fields[f"cap:{r}"] = cap[r]
        fields[f"alloc:{r}"] = alloc[r]
    for port in used_ports:
        fields[f"port:{port}"] = "other"
    return fields


def write_node_and_lease(app, fields: dict, on_node: int) -> None:
    """Write the node, the job's tally on it, and task j.0 held under lease token 7."""
    k, client = app.keys, app.client
    client.hset(k.node("n"), mapping=fields)
    if on_node:
        client.zadd(k.tally_job("j"), {"n": on_node})
    client.hset(k.task("j.0"), mapping={"id": "j.0", "job": "j", "state": "pending"})
    client.zadd(k.inflight, {"j.0": 1})
    client.hset(k.leases, "j.0", "7")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=nodes, request=requests)
def test_lua_commit_agrees_with_misfit(app, node, request):
    cap, alloc, used_ports, status, availability = node
    resources, ports, max_per_node, on_node = request
    k, client = app.keys, app.client
    fields = fresh_node_fields(app, node)
    write_node_and_lease(app, fields, on_node)

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


# ----------------------------------------------------------------------------- with nominations
# Room held for preemptors (``nom:<task>`` fields and the ``nominations`` count, as
# lua/preempt.lua writes them): the commit and misfit must still agree, across random
# priorities and jobs. Live nominations expire far in the future; expired ones are written
# only to Redis (the node cache drops them from a worker's copy, and commit.lua must
# ignore them).
FAR_FUTURE_MS = 2**52
nominations = st.lists(
    st.builds(
        lambda job, priority, res, ports, expired: (job, priority, res, ports, expired),
        st.sampled_from(["j", "x", "x", "y"]),
        st.sampled_from([0, 10, 49, 50, 51, 100]),
        st.dictionaries(st.sampled_from(RESOURCES), st.integers(1, 3), min_size=1),
        st.lists(st.sampled_from([80, 443, 8080, 9090]), max_size=2, unique=True),
        st.sampled_from([False, False, False, True]),
    ),
    min_size=1,
    max_size=3,
)
small_requests = st.builds(
    lambda res, ports, max_per_node, on_node: (res, ports, max_per_node, on_node),
    st.dictionaries(st.sampled_from(RESOURCES), st.integers(1, 3), min_size=1, max_size=2),
    st.lists(st.sampled_from([80, 443, 8080, 9090]), max_size=1),
    st.integers(0, 3),
    st.integers(0, 1),
)


@st.composite
def roomy_nodes(draw):
    """Nodes that usually have some room left, so that held room often decides."""
    cap = draw(st.fixed_dictionaries({r: st.integers(2, 8) for r in RESOURCES}))
    alloc = {r: cap[r] - draw(st.integers(0, min(cap[r], 4))) for r in RESOURCES}  # 0 to 4 left
    used_ports = draw(st.sets(st.sampled_from([80, 443, 8080]), max_size=1))
    status = draw(st.sampled_from(["ready"] * 9 + ["down"]))
    availability = draw(st.sampled_from(["active"] * 8 + ["pause", "drain"]))
    return cap, alloc, used_ports, status, availability


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=st.one_of(roomy_nodes(), nodes), request=st.one_of(small_requests, requests), held=nominations,
       priority=st.sampled_from([0, 10, 50, 100]), own=st.booleans())
def test_lua_commit_agrees_with_misfit_under_nominations(app, node, request, held, priority, own):
    import dataclasses

    from scheduler.state.nominations import nomination_value, parse_nomination, reservation

    cap, alloc, used_ports, status, availability = node
    resources, ports, max_per_node, on_node = request
    k, client = app.keys, app.client
    fields = fresh_node_fields(app, node)
    live = {}
    for i, (job, prio, res, nports, expired) in enumerate(held):
        holder = parse_job({"id": job, "priority": prio, "ports": nports})
        holder = dataclasses.replace(holder, resources=res)
        task_id = f"{job}.n{i}"
        value = nomination_value(reservation(holder), 1 if expired else FAR_FUTURE_MS)
        fields[f"nom:{task_id}"] = value
        if not expired:
            live[task_id] = parse_nomination(task_id, value)
    if own:  # the task being committed holds a nomination on this node itself
        mine = nomination_value(f"{priority}|j|cpu=1|", FAR_FUTURE_MS)
        fields["nom:j.0"] = mine
        live["j.0"] = parse_nomination("j.0", mine)
    count = len(held) + own
    if count:
        fields["nominations"] = count
    write_node_and_lease(app, fields, on_node)

    spec = parse_job({"id": "j", "priority": priority, "ports": ports, "max_per_node": max_per_node})
    spec = dataclasses.replace(spec, resources=resources)
    py_node = Node(name="n", capacity=cap, allocated=alloc, status=status, availability=availability,
                   ports={p: "other" for p in used_ports}, nominations=live)
    py = misfit(py_node, spec.resources, spec.ports, spec.max_per_node, on_node, spec.priority, spec.id)
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec)])
    lua = None if outcome.accepted else outcome.refused[0][1]
    assert lua == py
    after = client.hgetall(k.node("n"))
    remaining = {f.removeprefix("nom:") for f in after if f.startswith("nom:")}
    # The count always matches the fields (the commit may tidy expired ones away).
    assert int(after.get("nominations", 0)) == len(remaining)
    others = {f"{job}.n{i}" for i, (job, *_rest) in enumerate(held)}
    assert set(live) - {"j.0"} <= remaining - {"j.0"} <= others  # live ones stay, nothing invented
    if py is None:
        for r, amount in resources.items():
            assert int(after[f"alloc:{r}"]) == alloc[r] + amount
        assert client.hget(k.task("j.0"), "state") == "assigned"
        assert "j.0" not in remaining  # the placed task's own nomination is released
    else:
        assert ("j.0" in remaining) == own


# ----------------------------------------------------------------------------- whole batches
# One call commits many placements, several on the same node and of the same job (two
# versions of its spec may meet in one batch); each must be judged against the node as
# the placements before it in the call left it, exactly as the worker's copy would be.
batch_plans = st.lists(
    st.builds(
        lambda version, node, ports: (version, node, ports),
        st.integers(0, 2),  # versions 0 and 1 are job j, 2 is job k
        st.sampled_from(["n0", "n1"]),
        st.lists(st.sampled_from([80, 443]), max_size=1),
    ),
    min_size=1,
    max_size=10,
)


# A node's task slots (0: none, the field absent) and the live tasks already on it.
slotted = st.tuples(st.sampled_from([0, 0, 1, 2, 3]), st.integers(0, 3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(two=st.tuples(roomy_nodes(), roomy_nodes()), plans=batch_plans,
       requests=st.lists(st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 2), min_size=1),
                         min_size=3, max_size=3),
       max_per_node=st.sampled_from([0, 1, 1, 2]), slots=st.tuples(slotted, slotted))
def test_lua_commit_agrees_with_misfit_across_a_batch(app, two, plans, requests, max_per_node, slots):
    import dataclasses

    from scheduler.engine.fill import apply as _apply

    k, client = app.keys, app.client
    client.delete(*(key for name in ("n0", "n1") for key in (k.node(name), k.node_tasks(name))),
                  k.tally_job("j"), k.tally_job("k"), *(k.task(f"t{i}") for i in range(10)))
    py_nodes = {}
    for name, (cap, alloc, used_ports, status, availability), (limit, live) in zip(("n0", "n1"), two, slots):
        fields = {"name": name, "status": status, "availability": availability, "tasks": live,
                  **{f"cap:{r}": cap[r] for r in RESOURCES}, **{f"alloc:{r}": alloc[r] for r in RESOURCES},
                  **{f"port:{p}": "other" for p in used_ports}, **({"slots": limit} if limit else {})}
        client.hset(k.node(name), mapping=fields)
        py_nodes[name] = Node(name=name, capacity=dict(cap), allocated=dict(alloc), status=status,
                              availability=availability, ports={p: "other" for p in used_ports}, tasks=live,
                              slots=limit)
    specs = []
    for version, job in enumerate(("j", "j", "k")):
        spec = parse_job({"id": job, "max_per_node": max_per_node})
        specs.append(dataclasses.replace(spec, resources=requests[version]))
    variants: dict[tuple, JobSpec] = {}  # one spec object per (version, ports), as a worker keeps them
    planned = []
    for i, (version, node, ports) in enumerate(plans):
        task_id = f"t{i}"
        client.hset(k.task(task_id), mapping={"id": task_id, "job": specs[version].id, "state": "pending"})
        client.zadd(k.inflight, {task_id: 1})
        client.hset(k.leases, task_id, "7")
        spec = variants.setdefault((version, tuple(ports)), dataclasses.replace(specs[version], ports=tuple(ports)))
        planned.append(Planned(task_id, node, spec))

    outcome = commit(app.scripts, k, "7", planned)

    # The reference: misfit in the order the commit judged them, applying each accepted one.
    judged = [plan for plan, _ in outcome.refused] + outcome.accepted
    order = {plan.task_id: i for i, plan in enumerate(p for group in by_spec(planned) for p in group)}
    verdicts = {plan.task_id: reason for plan, reason in outcome.refused}
    counts: dict[str, dict[str, int]] = {"j": {}, "k": {}}
    for plan in sorted(judged, key=lambda p: order[p.task_id]):
        job, node = plan.job, py_nodes[plan.node]
        expected = misfit(node, job.resources, job.ports, job.max_per_node, counts[job.id].get(node.name, 0))
        assert verdicts.get(plan.task_id) == expected, plan
        if expected is None:
            _apply(node, job, plan.task_id, counts[job.id])
    for name, node in py_nodes.items():
        after = client.hgetall(k.node(name))
        assert {r: int(after[f"alloc:{r}"]) for r in RESOURCES} == node.allocated
        assert int(after["tasks"]) == node.tasks
        assert {int(f.removeprefix("port:")): v for f, v in after.items() if f.startswith("port:")} == node.ports
        for job in ("j", "k"):
            assert int(client.zscore(k.tally_job(job), name) or 0) == counts[job].get(name, 0)
        assert client.smembers(k.node_tasks(name)) == {p.task_id for p in outcome.accepted if p.node == name}


    if any(limit for limit, _ in slots):
        event("slots: " + " ".join(f"{n.tasks}/{n.slots or '-'}" for n in py_nodes.values()))


# ----------------------------------------------------------------------------- task slots
# A node whose agent has slots takes no more live tasks than that (kube's pods
# allocatable): each live nomination the task must leave alone (same or higher priority,
# another job) holds one of them; a node without the field has no limit. The commit and
# misfit agree on one placement against random slots, live tasks and nominations.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=st.one_of(roomy_nodes(), roomy_nodes(), nodes), request=small_requests,
       held=st.one_of(st.just([]), nominations), live=st.integers(0, 4),
       spare=st.sampled_from([None, -1, 0, 1, 1, 2]), priority=st.sampled_from([0, 10, 50, 100]))
def test_lua_commit_agrees_with_misfit_on_task_slots(app, node, request, held, live, spare, priority):
    import dataclasses

    from scheduler.engine.fit import held_slots
    from scheduler.model import reasons
    from scheduler.state.nominations import nomination_value, parse_nomination, reservation

    cap, alloc, used_ports, status, availability = node
    resources, ports, max_per_node, on_node = request
    k = app.keys
    limit = 0 if spare is None else max(1, live + spare)  # spare -1: slots lowered below the live tasks
    fields = fresh_node_fields(app, node)
    fields["tasks"] = live
    if limit:
        fields["slots"] = limit
    live_nominations = {}
    for i, (job, prio, res, nports, expired) in enumerate(held):
        holder = dataclasses.replace(parse_job({"id": job, "priority": prio, "ports": nports}), resources=res)
        value = nomination_value(reservation(holder), 1 if expired else FAR_FUTURE_MS)
        fields[f"nom:{job}.n{i}"] = value
        if not expired:
            live_nominations[f"{job}.n{i}"] = parse_nomination(f"{job}.n{i}", value)
    if held:
        fields["nominations"] = len(held)
    write_node_and_lease(app, fields, on_node)

    spec = dataclasses.replace(parse_job({"id": "j", "priority": priority, "ports": ports,
                                          "max_per_node": max_per_node}), resources=resources)
    py_node = Node(name="n", capacity=cap, allocated=alloc, status=status, availability=availability,
                   ports={p: "other" for p in used_ports}, nominations=live_nominations, tasks=live, slots=limit)
    py = misfit(py_node, spec.resources, spec.ports, spec.max_per_node, on_node, spec.priority, spec.id)
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec)])
    lua = None if outcome.accepted else outcome.refused[0][1]
    assert lua == py
    held_here = held_slots(py_node, spec.priority, spec.id)
    event(f"verdict: {'slots' if py == reasons.slots_full(limit) else py is None}"
          f"{', a held slot decides' if limit and live < limit <= live + held_here else ''}")
    if py is None:
        assert int(app.client.hget(k.node("n"), "tasks")) == live + 1
        assert not limit or live + 1 <= limit


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 6), min_size=1),
       quota=st.dictionaries(st.sampled_from((*RESOURCES, "tasks")), st.integers(0, 10), max_size=3),
       used=st.fixed_dictionaries({r: st.integers(0, 10) for r in (*RESOURCES, "tasks")}))
def test_lua_commit_agrees_with_misfit_on_quota(app, request, quota, used):
    """Quota refusals: the namespace's quota and usage against one placement on a roomy node."""
    k, client = app.keys, app.client
    fields = fresh_node_fields(app, ({r: 100 for r in RESOURCES}, {r: 0 for r in RESOURCES}, set(), "ready", "active"))
    client.delete(k.quota, k.usage)
    write_node_and_lease(app, fields, 0)
    if quota:
        client.hset(k.quota, mapping=quota)
    client.hset(k.usage, mapping=used)
    spec = parse_job({"id": "j"})
    spec = spec.__class__(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "resources": request})
    node = Node(name="n", capacity={r: 100 for r in RESOURCES}, allocated={}, status="ready", availability="active")
    py = misfit(node, spec.resources, (), 0, 0, namespace=k.namespace, used=used, quota=quota)
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec)])
    lua = None if outcome.accepted else outcome.refused[0][1]
    assert lua == py
    if py is None:
        after = {f: int(v) for f, v in client.hgetall(k.usage).items()}
        assert after["tasks"] == used["tasks"] + 1
        assert all(after[r] == used[r] + amount for r, amount in request.items())
    client.delete(k.quota, k.usage)


# ----------------------------------------------------------------------------- taints
# Every group is refused on a node with a NoSchedule or NoExecute taint it does not
# tolerate (kube's matching), or a NoExecute taint it tolerates for 0 seconds;
# PreferNoSchedule never refuses: the commit and the Python filter
# (scheduler.model.taints.untolerated, scheduler.engine.taints.refusal) agree, reason
# included. A placement on a node whose NoExecute taint it tolerates for a while is
# announced with the taint and the eviction time scheduler.model.taints.eviction gives.
TAINT_TEXTS = ["dedicated=gpu:NoSchedule", "dedicated=db:NoSchedule", "spot:PreferNoSchedule",
               "gone=yes:NoExecute", "spot:NoSchedule", "dedicated=gpu:NoExecute"]
toleration = st.builds(
    lambda key, operator, value, effect, seconds: {
        "key": key, "operator": operator, **({"value": value} if operator == "Equal" else {}),
        **({"effect": effect} if effect else {}),
        **({"toleration_seconds": seconds} if effect == "NoExecute" and seconds is not None else {})},
    st.sampled_from(["", "dedicated", "spot", "gone"]), st.sampled_from(["Equal", "Exists"]),
    st.sampled_from(["gpu", "db", "yes", ""]),
    st.sampled_from(["", "NoSchedule", "NoExecute", "NoExecute", "NoExecute", "PreferNoSchedule"]),
    st.sampled_from([None, 0, 5, 300]),
).filter(lambda t: t["key"] or t["operator"] == "Exists")
# ... and often one that tolerates every NoExecute taint for a while (or for no time).
tolerations = st.one_of(
    st.lists(toleration, max_size=3),
    st.tuples(st.lists(toleration, max_size=2), st.sampled_from([0, 5, 300])).map(
        lambda drawn: [*drawn[0], {"operator": "Exists", "effect": "NoExecute", "toleration_seconds": drawn[1]}]))
# Half the nodes carry only taints a toleration of NoExecute can be all that decides.
node_taints = st.one_of(st.lists(st.sampled_from(TAINT_TEXTS), max_size=3, unique=True),
                        st.lists(st.sampled_from([t for t in TAINT_TEXTS if not t.endswith(":NoSchedule")]),
                                 min_size=1, max_size=3, unique=True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(taints=node_taints, wanted=tolerations)
def test_lua_commit_agrees_with_the_taint_filter(app, taints, wanted):
    import orjson

    from scheduler.engine.taints import refusal
    from scheduler.model.taints import eviction, parse_taint, taints_text, untolerated

    node = ({r: 8 for r in RESOURCES}, {r: 0 for r in RESOURCES}, set(), "ready", "active")
    fields = fresh_node_fields(app, node)
    parsed = tuple(parse_taint(text, 1) for text in taints)
    if parsed:
        fields["taints"] = taints_text(parsed)
    write_node_and_lease(app, fields, 0)
    spec = parse_job({"id": "j", "tolerations": wanted, "resources": {"cpu": "1m"}})
    taint = untolerated(parsed, spec.tolerations)
    py = None if taint is None else refusal(taint, spec.tolerations)
    event(f"refused: {py.split(' ')[0] if py else None}")
    outcome = commit(app.scripts, app.keys, "7", [Planned("j.0", "n", spec)])
    assert (None if outcome.accepted else outcome.refused[0][1]) == py
    if outcome.accepted:
        _, last = app.client.xrevrange(app.keys.stream, count=1)[0]
        announced = orjson.loads(last["event"])
        leaves = eviction(parsed, spec.tolerations, outcome.now_ms)
        event(f"announced eviction: {leaves is not None}")
        assert (announced.get("taint"), announced.get("evict_at")) == (
            (str(leaves[1]), leaves[0]) if leaves is not None else (None, None))


# ----------------------------------------------------------------------------- domain rules
# Hard spreads, distinct_property, required job affinity and anti-affinity against counts
# of several jobs in tally:dom, over a batch of placements on a few labelled nodes: each
# placement is judged by the commit exactly as scheduler.engine.rules.domain_misfit judges
# it against the counts the placements before it left (counted jobs count on every domain
# of their node), and the counts and each task's domains record end as the reference's;
# whether the node hash holds the fields its tasks are counted under (every node write
# since they are kept) or only the description they are made from (a node written before).
ZONES = ["a", "b", "c", ""]
JOBS = ("j", "x", "y")


@st.composite
def domain_cases(draw):
    from scheduler.model.placement_rules import AffinityRule, AntiRule, DistinctRule, Rules, SpreadRule

    nodes = []
    for i in range(draw(st.integers(2, 5))):
        labels = {}
        zone, rack = draw(st.sampled_from(ZONES)), draw(st.sampled_from(["r1", "r2", ""]))
        if zone:
            labels["zone"] = zone
        if rack:
            labels["rack"] = rack
        nodes.append(make_labelled(f"n{i}", labels))
    counts = {}
    for job in JOBS:
        fields = {}
        for attribute, values in (("node.labels.zone", "abc"), ("node.labels.rack", ("r1", "r2")),
                                  ("node.name", [n.name for n in nodes])):
            for value in values:
                n = draw(st.integers(0, 2))
                if n:
                    fields[f"{attribute}={value}"] = n
        if fields and draw(st.booleans()):
            fields["*"] = sum(fields.values())
        counts[job] = fields
    attributes = st.sampled_from(["node.labels.zone", "node.labels.rack", "node.name"])
    jobs = st.lists(st.sampled_from(JOBS), min_size=1, max_size=3, unique=True).map(lambda js: tuple(sorted(js)))
    spreads = tuple(SpreadRule(a, draw(st.integers(1, 2)), draw(st.integers(0, 4)), js, draw(st.booleans()),
                               tuple(draw(st.lists(st.sampled_from(["a", "b", "c", "r1", "r2", "n0", "n1"]),
                                                   unique=True, max_size=4))),
                               True, f"no {a} for topology_spread", f"topology_spread {a} exceeded")
                    for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=2)))
    distinct = tuple(DistinctRule(a, draw(st.integers(1, 3)), f"no {a} for distinct_property",
                                  f"distinct_property {a} reached")
                     for a in draw(st.lists(attributes, max_size=1)))
    affinity = tuple(AffinityRule(a, js, draw(st.booleans()), f"job_affinity on {a} not met")
                     for a, js in draw(st.lists(st.tuples(attributes, jobs), max_size=2)))
    anti = tuple(AntiRule(a, js, f"job_anti_affinity on {a}") for a, js in draw(st.lists(st.tuples(attributes, jobs),
                                                                                          max_size=2)))
    rules = Rules("j", True, spreads, distinct, affinity, anti)
    plans = draw(st.lists(st.integers(0, len(nodes) - 1), min_size=1, max_size=6))
    return nodes, counts, rules, plans, draw(st.booleans()), draw(st.booleans())


def make_labelled(name: str, labels: dict):
    from scheduler.model import make_node

    return make_node(name, cpu=8, memory=8 * 2**30, labels=labels)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=domain_cases())
def test_lua_commit_agrees_with_the_domain_rules(app, case):
    import dataclasses

    import orjson

    from scheduler.engine.domains import DomainCounts
    from scheduler.engine.fill import apply as _apply
    from scheduler.engine.rules import domain_misfit
    from scheduler.model.domains import node_domains
    from scheduler.state.nodes import node_fields

    nodes, counts, rules, plans, labelled, stored = case
    k, client = app.keys, app.client
    client.delete(*(k.tally_dom(job) for job in JOBS), k.tally_job("j"),
                  *(key for n in nodes for key in (k.node(n.name), k.node_tasks(n.name))),
                  *(k.task(f"j.{i}") for i in range(len(plans))))
    for node in nodes:
        described = dict(zip(node_fields(node)[::2], node_fields(node)[1::2]))
        if not stored:  # a node written before its hash kept the fields its tasks are counted under
            del described["domains"]
        client.hset(k.node(node.name), mapping={"name": node.name, "status": "ready", "availability": "active",
                                                "tasks": 0, "cap:cpu": 8000, "alloc:cpu": 0, **described})
    for job, fields in counts.items():
        if fields:
            client.hset(k.tally_dom(job), mapping=fields)
    for i in range(len(plans)):
        client.hset(k.task(f"j.{i}"), mapping={"id": f"j.{i}", "job": "j", "state": "pending"})
        client.zadd(k.inflight, {f"j.{i}": 1})
        client.hset(k.leases, f"j.{i}", "7")
    spec = parse_job({"id": "j", "resources": {"cpu": "1m"}, **({"labels": {"app": "j"}} if labelled else {}),
                      "constraints": ["node.labels.zone distinct_property 9"]})  # counted either way
    rules = dataclasses.replace(rules, counted=spec.counted)
    outcome = commit(app.scripts, k, "7", [Planned(f"j.{i}", nodes[n].name, spec, False, rules)
                                          for i, n in enumerate(plans)])
    verdicts = {plan.task_id: reason for plan, reason in outcome.refused}
    event(f"{len(outcome.accepted)} accepted, {len(verdicts)} refused")

    reference = DomainCounts(counts)
    by_name = {n.name: dataclasses.replace(n) for n in nodes}
    for i, n in enumerate(plans):
        node = by_name[nodes[n].name]
        expected = domain_misfit(node, rules, reference)
        assert verdicts.get(f"j.{i}") == expected, (i, node.name, rules)
        if expected is None:
            _apply(node, spec, f"j.{i}", None)
            reference.add("j", node)
            assert sorted(orjson.loads(client.hget(k.task(f"j.{i}"), "domains"))) == sorted(node_domains(node))
    for job in JOBS:
        stored = {f: int(v) for f, v in client.hgetall(k.tally_dom(job)).items()}
        assert stored == {f: v for f, v in reference.counts.get(job, {}).items() if v > 0}


def test_a_placement_resolved_before_rules_or_nodes_changed_is_refused(app):
    """The commit refuses a group whose selectors were resolved at another rules:gen, or
    whose spread's eligible domains were read at another nodes:epoch; the group with the
    current values commits."""
    from scheduler.model.placement_rules import Rules

    k, client = app.keys, app.client
    fields = fresh_node_fields(app, ({r: 8 for r in RESOURCES}, {r: 0 for r in RESOURCES}, set(), "ready", "active"))
    write_node_and_lease(app, fields, 0)
    client.set(k.rules_gen, 5)
    client.set(k.node_epoch, 9)
    spec = parse_job({"id": "j", "labels": {"app": "j"}})
    for rules, refused in ((Rules("j", True, gen="4"), "job labels or rules changed since planned"),
                           (Rules("j", True, gen="5", epoch="8"), "nodes changed since planned")):
        outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec, False, rules)])
        assert [reason for _, reason in outcome.refused] == [refused]
        assert client.hget(k.task("j.0"), "state") == "pending"
    outcome = commit(app.scripts, k, "7", [Planned("j.0", "n", spec, False, Rules("j", True, gen="5", epoch="9"))])
    assert outcome.accepted and client.hget(k.task("j.0"), "domains")
    assert client.hget(k.tally_dom("j"), "*") == "1"
    client.delete(k.rules_gen, k.node_epoch, k.tally_dom("j"))

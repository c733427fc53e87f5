"""A worker's copy of the nodes stays equal to Redis: after its own commits (placements
already in the copy), other workers' commits (applied from their deltas), and changes
that leave no delta (releases), which make it read the node instead."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.control import reconcile
from scheduler.state.commit import Planned, commit
from scheduler.engine.fit import misfit
from scheduler.model import STOPPED, make_node, parse_job
from scheduler.state.node_cache import NodeCache
from scheduler.engine.fill import apply as _apply
from scheduler.state.store import Store

NODES = ("n0", "n1", "n2")


def setup_cluster(app):
    """Three nodes; jobs web (12 small tasks) and api (3 tasks on host port 8080), all
    claimed under one lease. Returns (token, {task id: spec})."""
    for name in NODES:
        app.store.put_node(make_node(name, cpu="2", memory="1GiB"))
    specs = {}
    for raw in ({"id": "web", "replicas": 12, "resources": {"cpu": 0.5, "memory": "64MiB"}},
                {"id": "api", "replicas": 3, "resources": {"cpu": 0.25}, "ports": [8080]}):
        task_ids = reconcile.submit(app.store, parse_job(raw))["tasks"]
        spec = app.store.job_spec(raw["id"], 1)
        specs.update({task_id: spec for task_id in task_ids})
    claim = app.queue.claim(100)
    assert sorted(claim.task_ids) == sorted(specs)
    return claim.token, specs


def place(app, cache: NodeCache, token: str, task_id: str, node: str, spec) -> bool:
    """What a worker does: refresh, place on its copy if it fits there, commit, report."""
    nodes = cache.refresh()
    seen = cache.seq
    copy = nodes[node]
    if misfit(copy, spec.resources, spec.ports, spec.max_per_node, 0, spec.priority, spec.id) is not None:
        return False
    _apply(copy, spec, task_id, None)
    outcome = commit(app.scripts, app.keys, token, [Planned(task_id, node, spec)])
    cache.invalidate(plan.node for plan, _ in outcome.refused)
    cache.committed(outcome.changes, seen)
    return bool(outcome.accepted)


def assert_current(app, cache: NodeCache) -> None:
    assert cache.refresh() == {node.name: node for node in app.store.nodes()}


def test_another_workers_commits_arrive_as_deltas_and_a_release_is_read(app):
    token, specs = setup_cluster(app)
    a, b = NodeCache(app.store), NodeCache(app.store)
    a.refresh(), b.refresh()
    reads = b.reads
    assert place(app, a, token, "web.0", "n0", specs["web.0"])
    assert place(app, a, token, "api.0", "n1", specs["api.0"])
    assert place(app, a, token, "web.1", "n1", specs["web.1"])
    assert_current(app, b)
    assert (b.applied, b.reads - reads) == (2, 0)  # n0 and n1, from deltas only
    assert b.nodes["n1"].ports == {8080: "api.0"}
    assert app.store.finish_ids(["web.1"], STOPPED) == {"web.1": "assigned"}  # the state it left
    assert_current(app, b)
    assert b.reads - reads == 1  # the release left no delta: n1 was read
    assert_current(app, a)


def test_a_nodes_stamp_changes_with_every_change_the_copy_takes_of_it(app):
    # Own commits, another worker's deltas and a read each move the node's stamp, even when
    # its tally ends where it was; the other nodes' stamps stand.
    token, specs = setup_cluster(app)
    a, b = NodeCache(app.store), NodeCache(app.store)
    a.refresh(), b.refresh()
    before = {name: (a.stamp(name), b.stamp(name)) for name in NODES}
    tally = (b.nodes["n0"].tasks, dict(b.nodes["n0"].allocated))
    assert place(app, a, token, "web.0", "n0", specs["web.0"])  # a's own commit
    assert a.stamp("n0") != before["n0"][0]
    b.refresh()  # a delta for b
    assert b.stamp("n0") != before["n0"][1]
    placed = (a.stamp("n0"), b.stamp("n0"))
    assert app.store.finish_ids(["web.0"], STOPPED) == {"web.0": "assigned"}  # n0's tally as before
    a.refresh(), b.refresh()
    assert (b.nodes["n0"].tasks, {r: n for r, n in b.nodes["n0"].allocated.items() if n}) == tally
    assert a.stamp("n0") not in placed and b.stamp("n0") not in placed
    assert [(a.stamp(n), b.stamp(n)) for n in ("n1", "n2")] == [before["n1"], before["n2"]]


def test_a_copy_over_a_resp2_connection_follows_the_feed_too(app, redis_url):
    """The change feed is read as a raw WITHSCORES reply, whose shape depends on the protocol."""
    token, specs = setup_cluster(app)
    resp2 = redis.Redis.from_url(redis_url, decode_responses=True, protocol=2)
    b = NodeCache(Store(resp2, app.keys))
    b.refresh()
    assert place(app, NodeCache(app.store), token, "web.0", "n2", specs["web.0"])
    assert_current(app, b)
    assert b.applied == 1 and b.nodes["n2"].tasks == 1
    resp2.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["a", "b", "finish"]), st.integers(0, 14), st.sampled_from(NODES)),
                      min_size=1, max_size=25))
def test_copies_stay_equal_to_redis(app, steps):
    app.client.flushdb()
    token, specs = setup_cluster(app)
    caches = {"a": NodeCache(app.store), "b": NodeCache(app.store)}
    order = sorted(specs)
    for who, index, node in steps:
        task_id = order[index]
        if who == "finish":
            app.store.finish_ids([task_id], STOPPED)
        elif app.store.get_task(task_id).state == "pending":
            place(app, caches[who], token, task_id, node, specs[task_id])
    for cache in caches.values():
        assert_current(app, cache)


def test_one_commit_call_writes_one_delta_member_for_all_its_nodes(app):
    token, specs = setup_cluster(app)
    b = NodeCache(app.store)
    b.refresh()
    reads = b.reads
    plans = [Planned("web.0", "n0", specs["web.0"]), Planned("web.1", "n1", specs["web.1"]),
             Planned("web.2", "n2", specs["web.2"])]
    assert len(commit(app.scripts, app.keys, token, plans).accepted) == 3
    members = app.client.zrange(app.keys.node_deltas, 0, -1)
    assert len(members) == 1
    assert sorted(line.split("|")[2] for line in members[0].split(" ")) == ["n0", "n1", "n2"]
    assert_current(app, b)
    assert (b.applied, b.reads - reads) == (3, 0)


def test_an_adopted_copy_follows_the_feed_from_its_sequence(app):
    """A forked worker starts from its parent's copy: what changed after that copy was
    read (a node joining, a node's allocation) comes through the feed, nothing before it
    is read again."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    parent = NodeCache(app.store)
    parent.refresh()
    app.store.put_node(make_node("n2", cpu=2, memory="4GiB"))  # after the parent's read
    child = NodeCache(app.store)
    child.adopt(parent.seq, parent.nodes)
    assert set(child.nodes) == {"n1"}
    assert set(child.refresh()) == {"n1", "n2"}
    assert child.reads == 1  # only the node that joined


def test_deltas_alone_while_every_change_left_one_and_the_feed_after_one_that_did_not(app):
    """Change sequences have no gaps: while the deltas account for every change since the
    copy, the feed is not read; a release (no delta) sends the next refresh to the feed,
    and the one after finds the deltas complete again."""
    token, specs = setup_cluster(app)
    a, b = NodeCache(app.store), NodeCache(app.store)
    a.refresh(), b.refresh()
    assert place(app, a, token, "web.0", "n0", specs["web.0"])
    assert place(app, a, token, "api.0", "n1", specs["api.0"])
    assert_current(app, b)
    assert b.feed_reads == 0 and b.applied == 2
    app.store.finish_ids(["web.0"], STOPPED)
    assert_current(app, b)
    assert b.feed_reads == 1  # n0 read whole: its release left no delta
    assert place(app, a, token, "web.1", "n2", specs["web.1"])
    assert_current(app, b)
    assert b.feed_reads == 2  # read at once after the last one found a gap, and found none
    assert place(app, a, token, "web.2", "n2", specs["web.2"])
    assert_current(app, b)
    assert b.feed_reads == 2


def test_own_commits_in_a_row_on_one_node_are_not_read_back(app):
    """Two commits of one worker on the same node between two refreshes: the second's
    previous change is the first, so the copy holds both and nothing is read or applied."""
    token, specs = setup_cluster(app)
    a = NodeCache(app.store)
    nodes = a.refresh()
    seen, reads = a.seq, a.reads
    for task_id in ("web.0", "web.1"):
        _apply(nodes["n0"], specs[task_id], task_id, None)
        outcome = commit(app.scripts, app.keys, token, [Planned(task_id, "n0", specs[task_id])])
        a.committed(outcome.changes, seen)
    assert_current(app, a)
    assert (a.applied, a.reads, a.feed_reads) == (0, reads, 0)

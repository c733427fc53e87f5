"""An agent's task slots as the node's capacity for live tasks, against a real Redis with
in-process workers: what the worker places, what ``sched task explain`` says of a task
placed but not started, the audit's invariant, and the node hashes written before slots
were kept (no field: no limit), registered again, saved and restored.

The agents themselves, as processes running tasks, are in tests/test_agent_slots.py.
"""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from scheduler import Client
from scheduler.control.audit import audit
from scheduler.model import make_node
from scheduler.model.node import default_slots
from scheduler.state.app import App

from worker_harness import run_worker_until_idle


def agent_node(app, name: str, slots: int, cpu: str = "8") -> None:
    """The node as an agent with ``slots`` registers it, and its first heartbeat."""
    app.store.put_node(dataclasses.replace(make_node(name, cpu=cpu, memory="8GiB"), slots=slots))
    app.store.beat(name, 60_000)


def states(client: Client, job: str) -> dict[str, str]:
    return {t.id: t.state for t in client.tasks(job=job)}


@pytest.mark.parametrize("cpu,slots", [("500m", 2), ("1", 2), ("2", 2), ("3.5", 4), ("16", 16), ("200", 64)])
def test_the_default_slots_are_one_per_advertised_core_from_2_to_64(cpu, slots):
    assert default_slots(make_node("a", cpu=cpu, memory="1GiB")) == slots


def test_tasks_go_to_agents_with_free_slots_and_the_rest_wait_saying_so(app):
    """The issue's case: a1 runs two long tasks in its 2 slots; five small tasks go to the
    agents with free slots, and what finds none waits with the slot reason."""
    client = Client(app=app)
    for name in ("a1", "a2", "a3"):
        agent_node(app, name, 2)
    client.submit({"id": "long", "replicas": 2, "resources": {"cpu": 0.5},
                   "constraints": ["node.name==a1"]})
    run_worker_until_idle(app)
    client.submit({"id": "small", "replicas": 5, "resources": {"cpu": 0.1}})
    run_worker_until_idle(app)
    placed = [t for t in client.tasks(job="small") if t.state == "assigned"]
    assert sorted(t.node for t in placed) == ["a2", "a2", "a3", "a3"]
    (waiting,) = [t for t in client.tasks(job="small") if t.state == "pending"]
    explained = client.explain(waiting.id)
    assert explained["message"] == ("0/3 nodes available: 3 node has all 2 task slots in use. "
                                    "preemption tried: no task runs at priority 40 or lower.")
    assert explained["reasons"] == {"node has all 2 task slots in use": 3}
    assert [(n.name, n.tasks, n.slots) for n in client.nodes()] == [("a1", 2, 2), ("a2", 2, 2), ("a3", 2, 2)]
    # A slot freed is a cluster event: the waiting task is placed at once.
    client.stop("long")
    run_worker_until_idle(app)
    assert client.task(waiting.id).state == "assigned" and client.task(waiting.id).node == "a1"
    assert audit(app.store).ok


def test_node_ls_shows_an_agents_slots(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    agent_node(app, "a1", 3)
    Client(app=app).submit({"id": "web", "replicas": 2, "resources": {"cpu": 0.1}, "constraints": ["node.name==a1"]})
    run_worker_until_idle(app)
    rows = {line.split()[0]: line.split()[3] for line in sched("node", "ls").stdout.splitlines()[1:]}
    assert rows == {"a1": "2/3", "n1": "0"}
    records = {r["name"]: (r["tasks"], r["slots"]) for r in orjson.loads(sched("node", "ls", "--json").stdout)}
    assert records == {"a1": (2, 3), "n1": (0, None)}


def test_a_node_without_an_agent_keeps_no_limit(app):
    """``sched node add`` writes no slots, as no node hash did before they were kept: the
    node takes what its resources allow; ``sched node add`` of an agent's node keeps the
    agent's slots, and an agent registering again with other slots replaces them."""
    client = Client(app=app)
    client.add_node("n1", cpu=8, memory="8GiB")
    assert "slots" not in app.client.hgetall(app.keys.node("n1"))
    client.submit({"id": "many", "replicas": 12, "resources": {"cpu": 0.1}})
    run_worker_until_idle(app)
    assert set(states(client, "many").values()) == {"assigned"}
    assert client.node("n1").slots == 0 and audit(app.store).ok

    agent_node(app, "a1", 3)
    client.add_node("a1", cpu=8, memory="8GiB", labels={"zone": "b"})
    assert (client.node("a1").slots, client.node("a1").labels) == (3, {"zone": "b"})
    agent_node(app, "a1", 5)
    assert client.node("a1").slots == 5


def test_an_assigned_task_says_why_it_has_not_started(app):
    """On a node without an agent, on a node that is down, and beyond the slots of an
    agent that came back with fewer: each explanation says so, in words and reasons."""
    client = Client(app=app)
    client.add_node("n1", cpu=8, memory="8GiB")
    client.submit({"id": "static", "resources": {"cpu": 0.1}, "constraints": ["node.name==n1"]})
    agent_node(app, "a1", 3)
    client.submit({"id": "work", "replicas": 3, "resources": {"cpu": 0.1}, "constraints": ["node.name==a1"]})
    run_worker_until_idle(app)
    assert set(states(client, "work").values()) == {"assigned"}

    static = client.explain("static.0")
    assert static["message"] == ("placed on node n1, which has no agent to start it: a node added with sched node "
                                 "add runs nothing (sched agent n1 runs its tasks).")
    assert static["reasons"] == {"node has no agent": 1}
    # Placed on an agent's node with slots to spare: about to start.
    assert client.explain("work.0")["message"] == "placed on node a1."

    # The agent comes back with 1 slot: it runs one task, the others wait for it.
    agent_node(app, "a1", 1)
    assert app.store.start_task("work.1", "a1")
    for task_id in ("work.0", "work.2"):
        explained = client.explain(task_id)
        assert explained["state"] == "assigned"
        assert explained["message"] == ("placed on node a1, which has its 1 task slot in use (running work.1): it "
                                        "starts when one of them ends.")
        assert explained["reasons"] == {"node has its 1 task slot in use": 1}
    assert client.explain("work.1")["message"] == "placed on node a1."  # running
    # Nothing is evicted for it; the audit names the node until enough tasks end.
    report = audit(app.store)
    assert report.problems == ["node a1 has 3 live tasks for 1 task slot"] and report.overcommits == 1
    # Nor does anything new go there.
    client.submit({"id": "more", "resources": {"cpu": 0.1}, "constraints": ["node.name==a1"]})
    run_worker_until_idle(app)
    assert client.explain("more.0")["message"].startswith("0/2 nodes available: 1 constraint node.name==a1 not "
                                                          "met, 1 node has its 1 task slot in use.")

    app.store.set_status("a1", "down")
    assert client.explain("work.0")["message"] == ("placed on node a1, which is down (its agent stopped renewing "
                                                   "its heartbeat); its tasks are replaced elsewhere.")


def test_a_snapshot_keeps_the_slots_and_the_restored_namespace_holds_them(app, redis_url, tmp_path):
    client = Client(app=app)
    agent_node(app, "a1", 1)
    client.submit({"id": "one", "replicas": 2, "resources": {"cpu": 0.1}})
    run_worker_until_idle(app)
    assert sorted(states(client, "one").values()) == ["assigned", "pending"]
    path = tmp_path / "slots.snap"
    client.snapshot_save(str(path))
    copy = f"{app.keys.namespace}-copy"
    client.snapshot_restore(str(path), namespace=copy)
    restored = Client(app=App(redis_url=redis_url, namespace=copy))
    assert restored.node("a1").slots == 1
    run_worker_until_idle(restored.app)
    assert sorted(states(restored, "one").values()) == ["assigned", "pending"]
    pending = next(t for t in restored.tasks(job="one") if t.state == "pending")
    assert orjson.loads(pending.explanation)["reasons"] == {"node has its 1 task slot in use": 1}

"""An agent's task slots, with real agents, a real worker and real RQ (tests/test_agents.py's
cluster fixture): tasks go to agents with free slots and start there; when no agent has
one, they wait pending with the slot reason; a task placed beyond the slots of an agent
that came back with fewer starts when a slot frees, and says meanwhile why it waits.
Waits are liveness bounds, never speed thresholds.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import orjson

from scheduler import Client
from scheduler.control.audit import audit
from scheduler.model import make_node

from agent_cluster import SCHED, cluster  # noqa: F401 (the fixture)


def until_released(directory: Path) -> dict:
    """A command that runs until the test creates ``<directory>/<its task id>``."""
    return {"command": ["sh", "-c", f'while [ ! -e "{directory}/$SCHED_TASK_ID" ]; do sleep 0.05; done']}


def explain(cluster, task_id: str) -> dict:
    """``sched task explain --json``, as a user types it."""
    done = subprocess.run([SCHED, "--redis-url", cluster.url, "--namespace", cluster.namespace, "task", "explain",
                           task_id, "--json"], capture_output=True, text=True, env=cluster.env, timeout=60)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def test_tasks_start_on_agents_with_free_slots_and_wait_pending_when_none_has_one(cluster, app, tmp_path):
    """Three agents with their default slots (2, for 2 cores); a1 runs two long tasks.
    Five more small tasks: four start on a2 and a3, none is placed on a1, and the fifth
    waits pending, explaining that every node has all its slots in use; once a1's tasks
    end, it goes there and starts."""
    client = Client(app=app)
    for name in ("a1", "a2", "a3"):
        cluster.agent(name, cpu="2", slots=None)
    assert [(n.name, n.slots) for n in client.nodes()] == [("a1", 2), ("a2", 2), ("a3", 2)]
    cluster.worker()
    release = tmp_path / "release"
    release.mkdir()
    client.submit({"id": "long", "replicas": 2, "resources": {"cpu": 0.5, "memory": "64MiB"},
                   "constraints": ["node.name==a1"], "run": until_released(release)})
    cluster.wait(lambda: [t.state for t in client.tasks(job="long")] == ["running"] * 2, "long to run on a1")
    client.submit({"id": "small", "replicas": 5, "resources": {"cpu": 0.1, "memory": "16MiB"},
                   "run": until_released(release)})

    def four_run_one_waits():
        tasks = client.tasks(job="small")
        return (sorted(t.state for t in tasks) == ["pending"] + ["running"] * 4
                and next(t for t in tasks if t.state == "pending").explanation)

    cluster.wait(four_run_one_waits, "four small tasks to run and the fifth to be tried")
    small = client.tasks(job="small")
    assert sorted(t.node for t in small if t.state == "running") == ["a2", "a2", "a3", "a3"]
    (waiting,) = [t.id for t in small if t.state == "pending"]
    explained = explain(cluster, waiting)
    assert explained["state"] == "pending"
    assert explained["reasons"] == {"node has all 2 task slots in use": 3}
    assert explained["message"].startswith("0/3 nodes available: 3 node has all 2 task slots in use.")

    for task in client.tasks(job="long"):
        (release / task.id).touch()
    cluster.wait(lambda: client.task(waiting).state == "running", f"{waiting} to run once a1 has a free slot")
    assert client.task(waiting).node == "a1"
    report = audit(app.store)
    assert report.ok, report.problems


def test_tasks_beyond_the_slots_of_an_agent_back_with_fewer_start_one_slot_at_a_time(cluster, app, tmp_path):
    """Three tasks placed on a1 while it had 3 slots; its agent comes back with 1. It
    starts one; the other two stay assigned, each explaining that it waits for the slot;
    as each run ends the next starts, until all three have run."""
    client = Client(app=app)
    app.store.put_node(dataclasses.replace(make_node("a1", cpu="2", memory="1GiB"), slots=3))
    release = tmp_path / "release"
    release.mkdir()
    client.submit({"id": "work", "type": "batch", "replicas": 3, "resources": {"cpu": 0.1, "memory": "16MiB"},
                   "run": until_released(release)})
    cluster.worker()
    cluster.wait(lambda: {t.state for t in client.tasks(job="work")} == {"assigned"}, "three tasks placed on a1")
    assert explain(cluster, "work.0")["reasons"] == {"node has no agent": 1}

    cluster.agent("a1", cpu="2", slots=1)
    assert client.node("a1").slots == 1
    seen_running: set[str] = set()
    for _ in range(3):
        cluster.wait(lambda: sum(t.state == "running" for t in client.tasks(job="work")) == 1, "one task to run")
        tasks = client.tasks(job="work")
        (running,) = [t.id for t in tasks if t.state == "running"]
        seen_running.add(running)
        for task in tasks:
            if task.state == "assigned":
                explained = explain(cluster, task.id)
                assert explained["reasons"] == {"node has its 1 task slot in use": 1}, explained
                assert explained["message"] == (f"placed on node a1, which has its 1 task slot in use (running "
                                                f"{running}): it starts when one of them ends.")
        (release / running).touch()
        cluster.wait(lambda: client.task(running).state == "completed", f"{running} to complete")
    assert seen_running == {"work.0", "work.1", "work.2"}
    assert [t.state for t in client.tasks(job="work")] == ["completed"] * 3
    report = audit(app.store)
    assert report.ok, report.problems

"""``type: sysbatch``: one task per eligible node, run to completion and not restarted;
a node that joins later gets one (Nomad's sysbatch)."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.control.audit import audit
from scheduler.model import SpecError
from agent_cluster import cluster  # noqa: F401 (the fixture)


@pytest.mark.slow
def test_sysbatch_runs_once_on_three_nodes_and_on_a_node_that_joins(cluster, app, tmp_path):
    ledger = tmp_path / "ledger"
    for name in ("n1", "n2", "n3"):
        cluster.agent(name, slots=1)
    cluster.worker()
    client = Client(app=app)
    client.submit({"id": "sweep", "type": "sysbatch", "resources": {"cpu": 0.1, "memory": "16MiB"},
                   "constraints": ["node.labels.role!=db"],
                   "run": {"command": ["sh", "-c", f'echo "$SCHED_TASK_ID" >> {ledger}']}})
    cluster.wait(lambda: client.job("sweep")["status"] == "complete", "sweep to complete on three nodes")
    tasks = client.tasks(job="sweep")
    assert sorted(t.node for t in tasks) == ["n1", "n2", "n3"] and {t.state for t in tasks} == {"completed"}
    cluster.agent("n4", slots=1)
    cluster.agent("db", slots=1, labels=["role=db"])  # not eligible: gets none
    cluster.wait(lambda: len(client.tasks(job="sweep")) == 4 and client.job("sweep")["status"] == "complete",
                 "the joining node to run sweep too")
    tasks = client.tasks(job="sweep")
    assert sorted(t.node for t in tasks) == ["n1", "n2", "n3", "n4"]
    assert sorted(ledger.read_text().split()) == sorted(t.id for t in tasks)  # each ran exactly once
    assert audit(app.store).ok


def test_sysbatch_takes_no_replicas_and_cannot_be_scaled(app):
    client = Client(app=app)
    with pytest.raises(SpecError, match="a sysbatch job runs one task per eligible node and takes no replicas"):
        client.submit({"id": "s", "type": "sysbatch", "replicas": 2})
    client.submit({"id": "s", "type": "sysbatch"})
    with pytest.raises(SpecError, match="job s is sysbatch: it runs one task per eligible node"):
        client.scale("s", 3)


@pytest.mark.parametrize("block", [{"periodic": {"cron": "0 0 1 1 *"}}, {"parameterized": {}}])
def test_a_periodic_or_parameterized_sysbatch_job_runs_no_task_itself(app, block):
    """The launcher is reconciled with the global jobs when nodes change, yet gets no task of
    its own: its launches run one per node."""
    from scheduler.control import reconcile

    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="8GiB")
    client.submit({"id": "sweep", "type": "sysbatch", **block})
    client.add_node("n2", cpu=4, memory="8GiB")
    reconcile.reconcile_global(app.store)  # what a worker does when nodes change
    assert client.tasks(job="sweep") == []
    child = client.launch("sweep")["launched"] if "periodic" in block else client.dispatch("sweep")["dispatched"]
    reconcile.reconcile_global(app.store)
    assert sorted(t.pin for t in client.tasks(job=child)) == ["n1", "n2"]
    assert client.tasks(job="sweep") == []

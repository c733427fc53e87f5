"""A nomination (the room a node holds for a preemptor, kube's nominated pod) lasts only as
long as its preemptor waits: a preemptor that ends before it is placed (its job stopped or
scaled down) gives the room back in the same step, so lower priorities may use it at once
and nothing of the ended task stays on the node."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.control.audit import audit
from workers.scheduler_worker import SchedulerWorker, WorkerConfig


def held_on(app, node: str) -> dict[str, str]:
    fields = app.client.hgetall(app.keys.node(node))
    return {f: v for f, v in fields.items() if f.startswith("nom") and v != "0"}


@pytest.mark.parametrize("how", ["stop", "scale"])
def test_a_preemptor_that_ends_before_it_is_placed_gives_its_room_back(app, how):
    client = Client(app=app)
    client.add_node("n1", cpu=1, memory="1GiB")
    client.submit({"id": "low", "priority": 10, "resources": {"cpu": 1}})
    worker = SchedulerWorker(app, WorkerConfig())
    worker.maintain(force=True)
    while worker.step():
        pass
    client.submit({"id": "high", "priority": 90, "resources": {"cpu": 1}})
    worker.step()  # evicts low.0 and holds n1's core for high.0
    assert client.task("high.0").nominated_node == "n1" and "nom:high.0" in held_on(app, "n1")
    client.stop("high") if how == "stop" else client.scale("high", 0)
    assert held_on(app, "n1") == {}
    worker.maintain(force=True)
    while worker.step():
        pass
    assert [(t.id, t.state) for t in client.tasks(job="low") if t.live] == [("low.1", "assigned")]
    assert audit(app.store).ok

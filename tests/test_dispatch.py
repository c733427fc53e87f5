"""Parameterized jobs and ``sched job dispatch``: children with meta and payload that reach
the command (with run.env, SCHED_JOB_ID and SCHED_TASK_INDEX) on a real agent; idempotency
tokens; stopped parents; bad input in one sentence, nothing written."""

from __future__ import annotations

import json
import time

import pytest

from scheduler import Client
from scheduler.model import SpecError
from scheduler.model.parameterized import MAX_PAYLOAD_BYTES
from agent_cluster import cluster  # noqa: F401 (the fixture)


RENDER = {"id": "render", "type": "batch", "resources": {"cpu": 0.1, "memory": "16MiB"},
          "parameterized": {"payload": "optional", "meta_required": ["customer"], "meta_optional": ["region"]},
          "meta": {"region": "eu"}}


def test_dispatch_with_meta_and_payload_reaches_the_command(cluster, app, sched, tmp_path):
    """The command sees its meta as SCHED_META_<KEY>, its payload in the file SCHED_PAYLOAD
    names, run.env, SCHED_JOB_ID and SCHED_TASK_INDEX."""
    out = tmp_path / "seen"
    script = (f'echo "$SCHED_JOB_ID|$SCHED_TASK_INDEX|$SCHED_META_CUSTOMER|$SCHED_META_REGION|$LEVEL|'
              f'$(cat "$SCHED_PAYLOAD")" >> {out}')
    spec = {**RENDER, "replicas": 2, "run": {"command": ["sh", "-c", script], "env": {"LEVEL": "debug"}}}
    sched("job", "submit", "-", input=json.dumps(spec))
    payload = tmp_path / "order.json"
    payload.write_text('{"order": 1234}')
    child = sched("job", "dispatch", "render", "--meta", "customer=acme", "--payload", str(payload)).output.strip()
    assert child.startswith("render/dispatch-") and len(child.rsplit("-", 1)[1]) == 8
    cluster.agent("n1")
    cluster.worker()
    client = Client(app=app)
    cluster.wait(lambda: client.job(child)["status"] == "complete", "the dispatched job to complete")
    lines = sorted(out.read_text().splitlines())
    assert lines == [f'{child}|0|acme|eu|debug|{{"order": 1234}}', f'{child}|1|acme|eu|debug|{{"order": 1234}}']
    assert client.job(child)["parent"] == "render" and client.job(child)["spec"]["meta"] == {"region": "eu",
                                                                                              "customer": "acme"}
    assert [t.state for t in client.tasks(job="render")] == []  # the parameterized job itself runs nothing
    assert client.job("render")["launches"][0]["id"] == child


def test_a_token_returns_the_first_dispatch_whether_it_runs_or_ended(app):
    client = Client(app=app)
    client.submit({**RENDER, "run": {"command": ["true"]}})
    first = client.dispatch("render", {"customer": "acme"}, idempotency_token="order-1")
    again = client.dispatch("render", {"customer": "acme"}, idempotency_token="order-1")
    assert first["created"] is True and again == {**first, "created": False}
    other = client.dispatch("render", {"customer": "acme"})
    assert other["dispatched"] != first["dispatched"]
    client.stop(first["dispatched"])
    assert client.dispatch("render", {"customer": "zz"}, idempotency_token="order-1")["dispatched"] == first["dispatched"]
    assert len(client.store.children("render")) == 2
    client.stop("render")
    assert client.dispatch("render", {"customer": "acme"}, idempotency_token="order-1")["created"] is False
    with pytest.raises(SpecError, match="job render is stopped; submit it again to dispatch it."):
        client.dispatch("render", {"customer": "acme"})


@pytest.mark.parametrize("args, words", [
    ([], "job render needs meta customer: dispatch it with --meta customer=...."),
    (["--meta", "customer=a", "--meta", "colour=red"], "job render does not take meta key 'colour'; it takes customer, region."),
    (["--meta", "customer"], "--meta 'customer' must look like KEY=VALUE."),
    (["--meta", "customer=a", "--payload", "BIG"],
     f"the payload is 20000 bytes, more than the {MAX_PAYLOAD_BYTES} bytes (16 KiB) a dispatch may carry"),
])
def test_bad_dispatches_are_one_sentence_and_make_nothing(app, sched, tmp_path, args, words):
    Client(app=app).submit({**RENDER, "run": {"command": ["true"]}})
    big = tmp_path / "big"
    big.write_bytes(b"x" * 20_000)  # the whole size is named, not where reading stopped
    before = set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*"))
    out = sched("job", "dispatch", "render", *[str(big) if a == "BIG" else a for a in args], ok=False)
    assert out.exit_code == 2 and words in out.output
    assert set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*")) == before


def test_payload_rules_and_a_job_that_is_not_parameterized(app):
    client = Client(app=app)
    client.submit({"id": "needs", "type": "batch", "parameterized": {"payload": "required"}})
    client.submit({"id": "none", "type": "batch", "parameterized": {"payload": "forbidden"}})
    client.submit({"id": "plain", "type": "batch"})
    with pytest.raises(SpecError, match="job needs needs a payload"):
        client.dispatch("needs")
    with pytest.raises(SpecError, match="job none takes no payload"):
        client.dispatch("none", payload=b"x")
    with pytest.raises(SpecError, match="job plain is not parameterized"):
        client.dispatch("plain")
    child = client.dispatch("needs", payload="data")["dispatched"]
    assert client.store.job_payload(child) == b"data"


def test_a_parameterized_job_keeps_its_newest_launches_and_forgets_the_tokens_of_the_rest(app, monkeypatch):
    from scheduler.control import periodic

    monkeypatch.setattr(periodic, "DISPATCHES_KEPT", 2)
    client = Client(app=app)
    client.submit({**RENDER, "run": {"command": ["true"]}})
    made = []
    for n in range(3):
        child = client.dispatch("render", {"customer": "acme"}, idempotency_token=f"t{n}")["dispatched"]
        client.stop(child)
        made.append(child)
        time.sleep(0.01)  # launches of one millisecond would be ordered by their names
    client.dispatch("render", {"customer": "acme"}, idempotency_token="t3")
    kept = [c for c, _ in client.store.children("render")]
    assert len(kept) == 2 and kept[0] == made[2]  # the two oldest went, the running newest stays
    assert app.client.exists(app.keys.job(made[0]), app.keys.job_tasks(made[1])) == 0
    assert client.store.dispatched("render", "t1") is None and client.store.dispatched("render", "t2") == made[2]


@pytest.mark.parametrize("launcher", ["parameterized", "periodic"])
def test_a_launch_with_labels_is_seen_by_other_jobs_selectors(app, launcher):
    """A launch is a job like any other for placement rules: its labels are what other jobs'
    selectors match (a required anti-affinity keeps web off the node where the launch of
    db runs), and its own required anti-affinity keeps away the jobs it matches."""
    from worker_harness import run_worker_until_idle

    client = Client(app=app)
    for name in ("n1", "n2"):
        client.add_node(name, cpu=4, memory="8GiB")
    block = {"parameterized": {}} if launcher == "parameterized" else {"periodic": {"cron": "0 0 1 1 *"}}
    client.submit({"id": "db", "type": "batch", "labels": {"app": "db"}, "constraints": ["node.name==n1"],
                   "job_anti_affinity": [{"match": {"app": "cache"}, "attribute": "node.hostname", "required": True}],
                   **block})
    child = (client.dispatch("db") if launcher == "parameterized" else client.launch("db"))
    child = child["dispatched" if launcher == "parameterized" else "launched"]
    run_worker_until_idle(app)
    assert [t.node for t in client.tasks(job=child) if t.live] == ["n1"]
    client.submit({"id": "web", "replicas": 2, "job_anti_affinity": [{"match": {"app": "db"},
                                                                        "attribute": "node.hostname",
                                                                        "required": True}]})
    client.submit({"id": "cache", "replicas": 2, "labels": {"app": "cache"}})
    run_worker_until_idle(app)
    assert sorted(t.node for t in client.tasks(job="web") if t.live) == ["n2", "n2"]
    assert sorted(t.node for t in client.tasks(job="cache") if t.live) == ["n2", "n2"]


def test_a_launch_removed_by_retention_leaves_its_parent_and_its_token(app):
    """Retention removes a finished dispatch (here at once: ttl_after_finished 0) with what its
    parent keeps of it: the parent's launches no longer name it, and a dispatch with its token
    makes a new child (the token answers only while the child it made is kept)."""
    from scheduler.control.retention import collect

    client = Client(app=app)
    client.submit({**RENDER, "ttl_after_finished": 0})
    first = client.dispatch("render", {"customer": "acme"}, idempotency_token="order-1")["dispatched"]
    client.stop(first)
    assert first in collect(app.store, now_ms=app.store.now_ms() + 1000).jobs_removed
    assert client.store.children("render") == [] and client.store.dispatched("render", "order-1") is None
    again = client.dispatch("render", {"customer": "acme"}, idempotency_token="order-1")
    assert again["created"] is True and again["dispatched"] != first
    assert client.job(again["dispatched"])["parent"] == "render"

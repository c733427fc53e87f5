"""The HTTP API (`sched api`, and /v1/ of `sched ui`) against the suite's real
redis-server: the OpenAPI document is valid OpenAPI 3.1 and every route's real answers
(successes and problems) match it, and are the CLI's JSON; events as server-sent events,
resumable with Last-Event-ID and filtered; nothing written by a refused request, for any
body (hypothesis); clients in other languages; Redis away. Who may call it:
tests/test_api_access.py."""

from __future__ import annotations

import base64
import dataclasses
from urllib.parse import quote

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate as validate_openapi
from starlette.testclient import TestClient

from scheduler.control import budgets
from scheduler.state.app import App
from scheduler.tools.api.app import create_api

from redis_topologies import free_port
from agent_cluster import cluster  # noqa: F401 - a fixture
from test_ui import snapshot
from api_harness import http, tokens  # noqa: F401 (fixtures)
from rebalance_helpers import api_calls as rebalance_calls
from api_harness import Api, SPEC, sse_messages
from worker_harness import run_worker_until_idle


def test_the_openapi_document_is_valid_openapi_3_1_and_needs_no_token(http):
    response = http.get("/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate_openapi(document)  # raises on any error
    assert document["openapi"] == "3.1.0"
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert len({op["operationId"] for op in operations}) == len(operations)
    for op in operations:  # every operation says what its errors look like
        assert op["responses"]["401"]["content"]["application/problem+json"]


def test_every_route_answers_as_the_document_says(app, http, tokens):
    """Each operation of the document, called for real (with a token of every namespace
    and the operator's role), answers a success its schema matches; then a problem of
    each kind. Fails if a route is left out."""
    api = Api(http, tokens("operator", every=True))
    ns = f"?namespace={app.keys.namespace}"
    assert api("GET", "/v1/token").json()["role"] == "operator"
    assert api("PUT", f"/v1/nodes/n1{ns}", json={"cpu": 4, "memory": "8GiB", "labels": {"zone": "a"}}).status_code == 201
    assert api("PUT", f"/v1/nodes/n1{ns}", json={"cpu": 8, "memory": "8GiB"}).status_code == 200
    assert [n["name"] for n in api("GET", f"/v1/nodes{ns}").json()] == ["n1"]
    assert api("GET", f"/v1/nodes/n1{ns}").json()["capacity"]["cpu"] == 8000
    assert api("POST", f"/v1/jobs/plan{ns}", json=SPEC).json()["placements"][0]["node"] == "n1"
    assert api("POST", f"/v1/jobs{ns}", json=SPEC).status_code == 201
    yaml = "id: a\nresources: {cpu: 0.1, memory: 1Mi}\n---\nid: b\nresources: {cpu: 0.1, memory: 1Mi}\n"
    listed = api("POST", f"/v1/jobs{ns}", content=yaml, headers={"content-type": "application/yaml"})
    assert [r["id"] for r in listed.json()] == ["a", "b"]
    canary = {**SPEC, "resources": {"cpu": 0.5, "memory": "128MiB"}, "update": {"canary": 1}}
    changed = api("POST", f"/v1/jobs{ns}", json=canary)
    assert changed.status_code == 200 and changed.json()["deployment"] == "web@2"
    assert {j["id"] for j in api("GET", f"/v1/jobs{ns}").json()} == {"web", "a", "b"}
    assert api("GET", f"/v1/jobs/web{ns}").json()["history"][0]["by"].startswith("token:")
    assert [v["version"] for v in api("GET", f"/v1/jobs/web/history{ns}").json()] == [1, 2]
    assert api("POST", f"/v1/jobs/web/scale{ns}", json={"replicas": 3}).json()["added"]
    assert api("GET", f"/v1/jobs/web/wait{ns}&timeout=0.1").json()["reached"] is False
    assert api("GET", f"/v1/jobs/web/wait{ns}&state=pending&count=1").json()["reached"] is True
    assert len(api("GET", f"/v1/tasks{ns}&job=web&state=pending").json()) == 3
    assert api("GET", f"/v1/tasks/web.0{ns}").json()["state"] == "pending"
    assert api("GET", f"/v1/tasks/web.0/explain{ns}").json()["message"]
    assert api("GET", f"/v1/tasks/web.0/logs{ns}").json()["stdout"] == ""
    assert api("GET", f"/v1/deployments{ns}&job=web").json()[0]["id"] == "web@2"
    assert api("GET", f"/v1/deployments/web@2{ns}").json()["job"] == "web"
    assert api("POST", f"/v1/deployments/web@2/pause{ns}").json()["state"] == "paused"
    assert api("POST", f"/v1/deployments/web@2/resume{ns}").json()["state"] == "running"
    assert api("POST", f"/v1/deployments/web@2/promote{ns}").json()["promoted"]
    assert api("POST", f"/v1/deployments/web@2/fail{ns}").json()["state"] == "failed"
    assert api("GET", f"/v1/queues{ns}").json()["active"] >= 3
    assert api("PUT", f"/v1/quota{ns}", json={"cpu": 100, "tasks": 50}).json()["quota"]["tasks"] == 50
    assert api("GET", f"/v1/quota{ns}").json()["quota"]["cpu"] == 100_000
    assert app.keys.namespace in [q["namespace"] for q in api("GET", "/v1/quotas").json()]
    assert api("GET", f"/v1/quota/history{ns}").json()[0]["action"] == "quota-set"
    assert api("DELETE", f"/v1/quota{ns}").json()["removed"] is True
    assert api("PUT", f"/v1/tenants/team-a{ns}", json={"weight": 2}).json()["weight"] == 2
    assert [t["name"] for t in api("GET", f"/v1/tenants{ns}").json()] == ["team-a"]
    assert api("DELETE", f"/v1/tenants/team-a{ns}").json()["removed"] is True
    assert api("GET", f"/v1/events/info{ns}").json()["entries"] > 0
    assert api("PUT", f"/v1/events/keep{ns}", json={"entries": 5000}).json()["maxlen"] == 5000
    assert api("GET", f"/v1/config{ns}").json()["settings"]["stream_maxlen"] == {"value": 5000, "default": False}
    assert api("PUT", f"/v1/config{ns}", json={"job_retention": "6h", "ended_tasks_per_job": 20}).json()[
        "job_retention"] == {"value": 21600.0, "default": False}
    assert api("DELETE", f"/v1/config{ns}&setting=ended_tasks_per_job").json()["ended_tasks_per_job"]["default"]
    assert api("GET", f"/v1/memory{ns}").json()["nodes"] == 1
    rebalance_calls(api, app)
    assert api("GET", f"/v1/layout{ns}").json()["layout"] == api("POST", f"/v1/layout/upgrade{ns}").json()["to"]
    assert api("POST", f"/v1/gc{ns}&dry_run=true").json()["dry_run"] is True
    ready = api.stream(f"/v1/events{ns}", 1)[0]
    assert ready["event"] == "ready" and ready["data"]["namespace"] == app.keys.namespace
    guarded = {"id": "guarded", "replicas": 1, "resources": {"cpu": 0.1, "memory": "1Mi"},
               "disruption_budget": {"max_unavailable": 0}}
    assert api("POST", f"/v1/jobs{ns}", json=guarded).status_code == 201
    assert api("POST", f"/v1/jobs{ns}", json={**guarded, "id": "loose", "disruption_budget": None}).status_code == 201
    run_worker_until_idle(app)
    assert app.store.start_task("guarded.0", "n1")
    budgets.count(app.store, "guarded")
    assert api("GET", f"/v1/jobs/guarded/budget{ns}").json()["allowed"] == 0
    assert [b["job"] for b in api("GET", f"/v1/budgets{ns}").json()] == ["guarded"]
    refused = api("POST", f"/v1/tasks/guarded.0/evict{ns}", json={"reason": "moved by hand"})
    assert refused.status_code == 429 and refused.json()["detail"] == (
        "task guarded.0 was not evicted: waiting on job guarded's budget, 0 of 0 unavailable.")
    evicted = api("POST", f"/v1/tasks/loose.0/evict{ns}")
    assert evicted.status_code == 200, evicted.text
    assert evicted.json()["evicted"] is True
    assert api("POST", f"/v1/jobs/guarded/stop{ns}").json()["stopped"]
    assert api("GET", f"/v1/nodes/n1/drain{ns}").json()["state"] == ""
    assert api("POST", f"/v1/jobs/web/revert{ns}", json={"version": 1}).json()["version"] == 3
    assert api("POST", f"/v1/jobs/web/stop{ns}").json()["stopped"]
    assert api("POST", f"/v1/nodes/n1/taint{ns}", json={"taint": "dedicated=gpu:NoSchedule"}).json()["after"] == \
        "dedicated=gpu:NoSchedule"
    assert api("GET", f"/v1/nodes/n1{ns}").json()["taints"] == ["dedicated=gpu:NoSchedule"]
    assert api("POST", f"/v1/nodes/n1/untaint{ns}", json={"key": "dedicated"}).json()["after"] == ""
    nightly = {"id": "nightly", "type": "batch", "periodic": {"cron": "0 2 * * *"}}
    assert api("POST", f"/v1/jobs{ns}", json=nightly).status_code == 201
    launched = api("POST", f"/v1/jobs/nightly/launch{ns}").json()["launched"]
    assert api("GET", f"/v1/jobs/{quote(launched, safe='')}{ns}").json()["parent"] == "nightly"
    assert api("POST", f"/v1/jobs/nightly/suspend{ns}").json()["next_launch"] is None
    assert api("POST", f"/v1/jobs/nightly/resume{ns}").json()["next_launch"].endswith("T02:00:00Z")
    render = {"id": "render", "type": "batch", "parameterized": {"meta_required": ["customer"]}}
    assert api("POST", f"/v1/jobs{ns}", json=render).status_code == 201
    order = {"meta": {"customer": "acme"}, "payload": base64.b64encode(b"order 1").decode(), "idempotency_token": "o1"}
    first = api("POST", f"/v1/jobs/render/dispatch{ns}", json=order)
    assert first.status_code == 201 and api("POST", f"/v1/jobs/render/dispatch{ns}", json=order).json() == {
        **first.json(), "created": False}
    assert app.store.job_payload(first.json()["dispatched"]) == b"order 1"
    assert api("POST", f"/v1/jobs/render/dispatch{ns}", json={}).status_code == 422  # its meta is required
    assert api("POST", f"/v1/nodes/n1/pause{ns}").json()["before"] == "active"
    assert api("POST", f"/v1/nodes/n1/activate{ns}").json()["before"] == "pause"
    assert api("POST", f"/v1/nodes/n1/drain{ns}").json()["before"] == "active"
    assert api("GET", f"/v1/nodes/n1/drain{ns}").json()["state"] == "complete"
    assert [e["action"] for e in api("GET", f"/v1/nodes/n1/history{ns}").json()] == ["taint", "untaint", "pause",
                                                                                 "activate", "drain"]
    assert api("DELETE", f"/v1/nodes/n1{ns}").json()["removed"] is True
    assert api("PUT", f"/v1/pools/general{ns}", json={"cpu": 8, "memory": "32GiB", "cost": 0.4}).json()["created"]
    assert [p["name"] for p in api("GET", f"/v1/pools{ns}").json()] == ["general"]
    assert api("GET", f"/v1/capacity{ns}&expander=price").json()["pools"] == ["general"]
    assert api("POST", f"/v1/capacity{ns}").json()["digest"]
    assert api("GET", f"/v1/capacity/last{ns}").json()["answer"]["pools"] == ["general"]
    assert api("DELETE", f"/v1/pools/general{ns}").json()["removed"] is True
    assert api("POST", f"/v1/jobs{ns}", json={"id": "once", "replicas": 0, "ttl_after_finished": 0}).status_code == 201
    api("POST", f"/v1/jobs/once/stop{ns}")
    collected = api("POST", f"/v1/gc{ns}").json()
    assert "web" in collected["finished"] and collected["jobs_removed"] == ["once"]  # web is kept 6 h
    web = api("GET", f"/v1/jobs/web{ns}").json()
    assert web["remove_at"] == web["finished_at"] + 6 * 3_600_000
    saved = api("GET", f"/v1/snapshot{ns}")  # gzip on the way (the test client accepts it)
    assert saved.headers["content-encoding"] == "gzip" and saved.text.startswith('{"sched_snapshot":1')
    copy = App(client=app.client, namespace=f"{app.keys.namespace}-copy")
    try:
        restored = api("POST", f"/v1/snapshot?namespace={copy.keys.namespace}", content=saved.content,
                       headers={"content-type": "application/x-ndjson"}).json()
        assert restored["keys"] == saved.text.count("\n") - 2 and restored["source_namespace"] == app.keys.namespace
        assert api("GET", f"/v1/jobs?namespace={copy.keys.namespace}").json() == api("GET", f"/v1/jobs{ns}").json()
    finally:
        copy.store.clear_namespace()

    every = {op["operationId"] for path in api.document["paths"].values() for op in path.values()}
    assert api.covered == every - {"openapi_json"} or api.covered == every, sorted(every - api.covered)

    # Problems, each a document its operation lists.
    problems = [
        ("GET", f"/v1/jobs/nope{ns}", {}, 404),
        ("GET", f"/v1/jobs/a/budget{ns}", {}, 404),  # a job without one
        ("POST", f"/v1/tasks/loose.0/evict{ns}", {}, 409),  # ended already
        ("POST", f"/v1/nodes/n1/drain{ns}", {"json": {"deadline": "soon"}}, 422),
        ("GET", f"/v1/tasks{ns}&state=pendin", {}, 400),
        ("GET", f"/v1/tasks{ns}&colour=red", {}, 400),
        ("GET", "/v1/nodes/a%20b", {}, 400),
        ("POST", f"/v1/jobs{ns}", {"json": {**SPEC, "replicas": -1}}, 422),
        ("POST", f"/v1/jobs{ns}", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
        ("POST", f"/v1/jobs{ns}", {"content": b"x", "headers": {"content-type": "text/csv"}}, 415),
        ("POST", f"/v1/jobs/a/scale{ns}", {"json": {"replica": 2}}, 422),
        ("POST", f"/v1/jobs/web/scale{ns}", {"json": {"replicas": 2}}, 409),  # stopped
        ("POST", f"/v1/jobs/web/revert{ns}", {"json": {"version": 9}}, 422),
        ("POST", f"/v1/deployments/web@2/promote{ns}", {}, 409),
        ("PUT", f"/v1/nodes/n2{ns}", {"json": {"cpu": 1}}, 422),
        ("POST", f"/v1/nodes/n2/taint{ns}", {"json": {"taint": "gpu"}}, 422),
        ("POST", f"/v1/nodes/nope/untaint{ns}", {"json": {"key": "gpu"}}, 404),
        ("PUT", f"/v1/nodes/n2{ns}", {"content": b"x" * (8 * 1024 * 1024 + 1),
                                       "headers": {"content-type": "application/json"}}, 413),
        ("PUT", f"/v1/config{ns}", {"json": {"job_retension": "1h"}}, 422),
        ("PUT", f"/v1/config{ns}", {"json": {"job_retention": "1h", "stream_maxlen": -1}}, 422),
        ("PUT", f"/v1/config{ns}", {"json": {}}, 422),
        ("DELETE", f"/v1/config{ns}", {}, 400),
        ("DELETE", f"/v1/config{ns}&setting=job_retension", {}, 400),
        ("GET", "/v1/no-such-route", {}, 404),
        ("DELETE", "/v1/jobs", {}, 405),
    ]
    for method, path, options, status in problems:
        response = api(method, path, **options)
        assert response.status_code == status, (method, path, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert body["status"] == status and body["detail"].endswith((".", "?", ")"))


def test_the_answers_are_the_cli_json(app, http, tokens, sched):
    """The API answers what `sched ... --json` prints, for the same state."""
    api = Api(http, tokens("viewer"))
    sched("node", "add", "n1", "--cpu", "2", "--memory", "4GiB")
    sched("job", "submit", "-", input=orjson.dumps(SPEC).decode())
    for args, path in ((("node", "ls"), "/v1/nodes"), (("job", "ls"), "/v1/jobs"), (("task", "ls"), "/v1/tasks"),
                       (("task", "explain", "web.1"), "/v1/tasks/web.1/explain"),
                       (("job", "history", "web"), "/v1/jobs/web/history"), (("tenant", "ls"), "/v1/tenants")):
        assert api("GET", path).json() == orjson.loads(sched(*args, "--json").stdout), args


def test_a_snapshot_downloads_as_a_file_and_uploads_into_an_empty_namespace_only(app, http, tokens, redis_url,
                                                                                monkeypatch):
    """GET /v1/snapshot answers the file `sched snapshot save` writes; POST loads it (plain
    or gzip) into the token's namespace once empty. Refused, writing nothing: a namespace
    that is not empty (409), a file cut short (422), a body that is not gzip (400), a
    pause of the server's writes without a token of every namespace (403), a body over the
    bound, a gzip that inflates past it included (413)."""
    import gzip

    from scheduler.tools.api import app as api_app

    ns = app.keys.namespace
    api = Api(http, tokens("operator"))
    api("PUT", "/v1/nodes/n1", json={"cpu": 4, "memory": "8GiB"})
    api("POST", "/v1/jobs", json=SPEC)
    jobs = api("GET", "/v1/jobs").json()
    plain = api("GET", "/v1/snapshot", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.headers["content-type"] == "application/x-ndjson"
    assert re.fullmatch(rf'attachment; filename="{ns}-\d{{8}}T\d{{6}}Z\.snap\.jsonl"',
                        plain.headers["content-disposition"])
    lines = plain.content.splitlines()
    assert orjson.loads(lines[0])["namespace"] == ns
    assert orjson.loads(lines[-1]) == {"end": True, "keys": len(lines) - 2}
    paused = api("GET", "/v1/snapshot?max_pause=1")
    assert paused.status_code == 403 and "a token of every namespace" in paused.json()["detail"]
    assert api("GET", "/v1/snapshot", token=tokens("submitter")).status_code == 403

    lines_type = {"content-type": "application/x-ndjson"}
    busy = api("POST", "/v1/snapshot", content=plain.content, headers=lines_type)
    assert busy.status_code == 409 and busy.json()["detail"] == (
        f"namespace {ns} is not empty ({len(lines) - 2} keys); a snapshot loads only into an empty namespace: give "
        f"another with ?namespace=.")
    app.store.clear_namespace()
    small = [r if r.method != "POST" or r.path != "/v1/snapshot" else dataclasses.replace(r, upload=4096)
             for r in api_app.ROUTES]
    monkeypatch.setattr(api_app, "ROUTES", small)
    with TestClient(create_api(app)) as bounded:
        refusals = [(http, b"\n".join(lines[:-1]) + b"\n", lines_type, 422,
                     "the uploaded snapshot ends before its last line: the snapshot was cut short"),
                    (http, plain.content, {"content-type": "application/gzip"}, 422, "the request body is not gzip"),
                    (http, plain.content, {"content-type": "text/csv"}, 415, "send the body as application/x-ndjson"),
                    (bounded, b"x" * 4097, lines_type, 413, "larger than 4096 bytes."),
                    (bounded, gzip.compress(b"\n" * 100_000), {"content-type": "application/gzip"}, 413,
                     "once decompressed")]
        for client, body, headers, status, said in refusals:
            refused = Api(client, api.token)("POST", "/v1/snapshot", content=body, headers=headers)
            assert refused.status_code == status and said in refused.json()["detail"], refused.text
    assert snapshot(redis_url, ns) == {}
    restored = api("POST", "/v1/snapshot", content=gzip.compress(plain.content),
                   headers={"content-type": "application/gzip"}).json()
    assert restored == {**restored, "namespace": ns, "source_namespace": ns, "keys": len(lines) - 2}
    assert api("GET", "/v1/jobs").json() == jobs


# ----------------------------------------------------------------------------- events
def test_events_resume_after_last_event_id_and_filter(app, http, tokens):
    api = Api(http, tokens("submitter"))
    api("PUT", "/v1/nodes/n1", token=tokens("operator"), json={"cpu": 4, "memory": "8GiB"})
    for job in ("a", "b"):
        api("POST", "/v1/jobs", json={"id": job})
    first = api.stream("/v1/events?since=start&type=job", 3)
    assert first[0]["event"] == "ready" and first[0]["id"] == "0-0"
    jobs = [m for m in first[1:]]
    assert [(m["data"]["type"], m["data"]["id"]) for m in jobs] == [("job", "a"), ("job", "b")]
    api("POST", "/v1/jobs", json={"id": "c"})
    again = api.stream("/v1/events?type=job", 3, headers={"last-event-id": jobs[0]["id"]})
    assert again[0]["id"] == jobs[0]["id"]  # the ready message says where it goes on from
    assert [m["data"]["id"] for m in again[1:]] == ["b", "c"]
    assert [m["id"] for m in again[1:2]] == [jobs[1]["id"]]
    tasks = api.stream("/v1/events?since=start&job=c&type=task", 2)
    assert [(m["data"]["type"], m["data"]["id"]) for m in tasks[1:]] == [("task", "c.0")]
    bad = api("GET", "/v1/events?since=yesterday")
    assert bad.status_code == 400 and "since 'yesterday' is not start, now" in bad.json()["detail"]


def test_events_from_now_arrive_as_they_happen(app, http, tokens):
    token = tokens("submitter")
    api = Api(http, token)
    with http.stream("GET", "/v1/events", headers={"authorization": f"Bearer {token}"}) as response:
        lines = response.iter_lines()
        head = [next(lines) for _ in range(5)]
        assert sse_messages(head)[0]["event"] == "ready"
        threading.Thread(target=lambda: api("POST", "/v1/jobs", json={"id": "live"})).start()
        seen = []
        while len(seen) < 4:
            seen.append(next(lines))
    event = sse_messages(seen)[0]
    assert event["data"]["type"] in ("job", "task", "audit") and re.fullmatch(r"\d+-\d+", event["id"])


# ----------------------------------------------------------------------------- any body
BODY_ROUTES = [("POST", "/v1/jobs"), ("POST", "/v1/jobs/plan"), ("POST", "/v1/jobs/web/scale"),
               ("POST", "/v1/jobs/web/revert"), ("PUT", "/v1/nodes/n1"), ("PUT", "/v1/tenants/t"),
               ("PUT", "/v1/quota"), ("PUT", "/v1/events/keep"), ("PUT", "/v1/config")]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["id", "replicas", "version", "cpu", "memory", "weight", "entries",
                                                "resources", "labels", "type", "tasks", "x", "job_retention",
                                                "stream_maxlen"]), inner, max_size=4),
                           max_leaves=10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(BODY_ROUTES), body=JSON_VALUES)
def test_any_body_gets_a_documented_answer_and_a_refusal_writes_nothing(app, http, tokens, redis_url, route, body):
    api = Api(http, _every_token(tokens))
    before = snapshot(redis_url, app.keys.namespace)
    response = api(route[0], f"{route[1]}?namespace={app.keys.namespace}", json=body)  # checks the answer
    assert response.status_code < 500
    if response.status_code >= 400:
        assert snapshot(redis_url, app.keys.namespace) == before, (route, body, response.text)


_EVERY: dict[int, str] = {}


def _every_token(tokens) -> str:
    """One operator token of every namespace per test (hypothesis calls the test many times)."""
    if id(tokens) not in _EVERY:
        _EVERY[id(tokens)] = tokens("operator", every=True)
    return _EVERY[id(tokens)]


# ----------------------------------------------------------------------------- a client in another language
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_node_client_submits_waits_reads_logs_and_stops(cluster, app, tokens, tmp_path):
    """`sched api` as a process, a real agent and worker, and Node's fetch as the client."""
    port = free_port()
    server = cluster._start("api", "api", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    cluster.agent("n1")
    cluster.worker()
    token = tokens("submitter")

    def up():
        assert server.poll() is None, cluster.logs_text()
        try:
            return urllib.request.urlopen(f"{base}/v1/openapi.json", timeout=2).status == 200
        except OSError:
            return False

    cluster.wait(up, "sched api to listen")
    done = subprocess.run([NODE, str(Path(__file__).with_name("api_client.mjs")), base, "hello"],
                          env={**os.environ, "SCHED_TOKEN": token}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + cluster.snapshot()
    seen = json.loads(done.stdout)
    assert seen["without_token"] == [401, "application/problem+json", "Unauthorized"]
    assert seen["submitted"] == [201, "hello", ["hello.0"]]
    assert seen["states"][-1] == "running" and re.fullmatch(r"\d+-\d+", seen["running_event_id"])
    assert seen["waited"] == [True, [["hello.0", "running", "n1"]]]
    assert "hello from node" in seen["stdout"]
    assert seen["stopped"] == ["hello.0"] and seen["status"] == "stopped"
    name = tokens.names[-1]
    assert seen["history"] == [["submit", f"token:{name}"], ["stop", f"token:{name}"]]
    cluster.wait(lambda: app.store.get_task("hello.0").state == "stopped", "the task to stop")


def test_curl_submits_yaml_and_gets_problems(cluster, app, tokens):
    """The docs' curl examples, against `sched api` as a process."""
    port = free_port()
    server = cluster._start("api", "api", "--port", str(port))
    base, token = f"http://127.0.0.1:{port}", tokens("submitter")

    def curl(*args: str) -> tuple[int, str]:
        done = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", "-H", f"Authorization: Bearer {token}", *args],
                              capture_output=True, text=True, timeout=30)
        body, _, status = done.stdout.rpartition("\n")
        return int(status or 0), body

    cluster.wait(lambda: server.poll() is None and curl(f"{base}/v1/token")[0] == 200, "sched api to listen")
    status, body = curl("-H", "Content-Type: application/yaml", "--data-binary",
                        "id: web\nreplicas: 2\nresources: {cpu: 0.5, memory: 256MiB}\n", f"{base}/v1/jobs")
    assert status == 201 and json.loads(body)["tasks"] == ["web.0", "web.1"]
    status, body = curl("-X", "POST", "-H", "Content-Type: application/json", "-d", '{"replicas": -1}',
                        f"{base}/v1/jobs/web/scale")
    assert status == 422 and json.loads(body)["detail"] == "replicas must be a whole number from 0 to 1000000."
    status, body = curl(f"{base}/v1/tasks?job=web&state=pending")
    assert status == 200 and [t["id"] for t in json.loads(body)] == ["web.0", "web.1"]


# ----------------------------------------------------------------------------- faults
def test_redis_away_is_a_503_then_the_api_and_its_event_streams_go_on(tmp_path, monkeypatch):
    """Redis killed under a running API: requests get a 503 problem within the failover
    bound (no hang, no 500); once it is back they are served again, and an event stream
    open all along delivers what comes after, once."""
    from restartable_redis import RestartableRedis
    from scheduler.state.app import App

    monkeypatch.setenv("SCHED_FAILOVER_S", "1")
    server = RestartableRedis(tmp_path / "redis")
    server.start()
    app = App(redis_url=server.url, namespace="faults")
    try:
        with TestClient(create_api(app, auth=False)) as http:
            api = Api(http)
            api("PUT", "/v1/nodes/n1", token=None, json={"cpu": 4, "memory": "8GiB"})
            with http.stream("GET", "/v1/events?type=job") as stream:
                lines = stream.iter_lines()
                assert next(lines) == "retry: 3000"
                server.kill()
                away = api("POST", "/v1/jobs", token=None, json={"id": "during"})
                assert away.status_code == 503 and away.json()["detail"].startswith("Redis is not available")
                server.start()
                assert api("POST", "/v1/jobs", token=None, json={"id": "after"}).status_code == 201
                messages = []
                while not any(m.get("data", {}).get("id") == "after" for m in sse_messages(messages)):
                    messages.append(next(lines))
            assert [m["data"]["id"] for m in sse_messages(messages) if "id" in m and "event" not in m] == ["after"]
            assert api("GET", "/v1/jobs", token=None).json()[0]["id"] == "after"
    finally:
        app.close()
        server.stop()


# ----------------------------------------------------------------------------- statuses
def test_every_route_of_a_missing_job_is_a_404_and_a_bad_query_a_400(app, http, tokens):
    """A job that does not exist is a 404 on every route that names one (before its body's
    meaning is looked at); a query value that is not valid is a 400 on every route; a wait
    on a missing job answers at once."""
    api = Api(http, tokens("operator", every=True))
    ns = f"?namespace={app.keys.namespace}"
    bodies = {"scale": {"replicas": 1}, "revert": {"version": 1}, "dispatch": {}}
    routes = [(method.upper(), path) for path, ops in api.document["paths"].items() if "{job_id}" in path
              for method in ops]
    assert len(routes) >= 10
    for method, path in routes:
        verb = path.rsplit("/", 1)[-1]
        options = {"json": bodies[verb]} if verb in bodies else {}
        started = time.monotonic()
        response = api(method, path.replace("{job_id}", "nope") + ns, **options)
        assert response.status_code == 404 and "job 'nope' does not exist" in response.json()["detail"], (path,
                                                                                                       response.text)
        assert time.monotonic() - started < 2, path  # a wait does not wait for a job that is not there
    for path in ("/v1/tasks?job=a%21b", "/v1/deployments?job=a%21b", "/v1/tasks?node=a%20b", "/v1/tasks?job=",
                 "/v1/events?job=a%21b", "/v1/deployments?limit=0", "/v1/jobs/web/wait?count=x"):
        response = api("GET", path)
        assert response.status_code == 400, (path, response.text)


def test_a_method_a_path_does_not_take_is_a_405_with_allow(http):
    for method, path, allow in (("DELETE", "/v1/jobs", "GET, HEAD, POST"), ("PUT", "/v1/jobs/web/stop", "POST"),
                                ("POST", "/v1/nodes/n1", "DELETE, GET, HEAD, PUT")):
        response = http.request(method, path)
        assert response.status_code == 405 and response.headers["allow"] == allow, (path, response.headers)
        assert response.headers["content-type"] == "application/problem+json"


def test_a_body_that_is_not_an_object_is_a_422_and_writes_nothing(app, http, tokens, redis_url):
    api = Api(http, tokens("operator"))
    api("PUT", "/v1/nodes/n1", json={"cpu": 4, "memory": "8GiB"})
    api("POST", "/v1/jobs", json=SPEC)
    before = snapshot(redis_url, app.keys.namespace)
    for method, path in (("POST", "/v1/jobs/plan"), ("POST", "/v1/jobs"), ("POST", "/v1/jobs/web/scale"),
                         ("PUT", "/v1/nodes/n2"), ("PUT", "/v1/config"), ("POST", "/v1/jobs/web/dispatch")):
        for body in (b"null", b"[1]", b"3", b'"web"'):
            if path == "/v1/jobs" and body == b"[1]":
                continue  # a list of specs: its item is refused, as the next test does
            response = api(method, path, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 422, (path, body, response.text)
    assert api("POST", "/v1/jobs", json=[1]).status_code == 422
    assert api("POST", "/v1/jobs/plan", content=b"", headers={"content-type": "application/json"}).status_code == 422
    assert snapshot(redis_url, app.keys.namespace) == before


# ----------------------------------------------------------------------------- the lockout's address
def _commands(client, name: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def test_jobs_are_paged_in_id_order_and_a_page_reads_only_its_jobs(app, http, tokens):
    api = Api(http, tokens("submitter"))
    specs = [{"id": f"{kind}-{i:03d}", "type": kind, "replicas": 0} for kind in ("batch", "service")
             for i in range(120)]
    assert api("POST", "/v1/jobs", json=specs).status_code == 201
    assert [j["id"] for j in api("GET", "/v1/jobs").json()] != []  # without per_page: every job, as before
    seen, token, pages = [], None, 0
    while True:
        path = "/v1/jobs?per_page=100" + (f"&next_token={token}" if token else "")
        before = _commands(app.client, "hmget")
        page = api("GET", path)
        assert _commands(app.client, "hmget") - before <= 100  # its own jobs' hashes, not the namespace's
        seen += [j["id"] for j in page.json()]
        pages += 1
        token = page.headers.get("x-sched-next-token")
        if token is None:
            break
    assert pages == 3 and seen == sorted(s["id"] for s in specs)
    assert [j["id"] for j in api("GET", "/v1/jobs?prefix=service-11").json()] == [f"service-11{i}" for i in range(10)]
    matched = api("GET", '/v1/jobs?per_page=5&filter=id matches "^service-" and status == "running"')
    assert [j["id"] for j in matched.json()] == [f"service-00{i}" for i in range(5)]
    assert matched.headers["x-sched-next-token"] == "service-005"
    batch = api("GET", '/v1/jobs?per_page=1000&filter=type == "batch"').json()
    assert len(batch) == 120 and {j["type"] for j in batch} == {"batch"}
    for bad, status in (('status = "x"', 400), ('colour == "red"', 400), ("status == running", 400),
                        ('id matches "["', 422), ("status in 3", 422)):  # it reads, but cannot be done
        response = api("GET", f"/v1/jobs?filter={quote(bad)}")
        assert response.status_code == status, (bad, response.text)
    app.client.delete(app.keys.jobs_by_id)  # a namespace from before the index: made on the first page
    assert [j["id"] for j in api("GET", "/v1/jobs?per_page=3").json()] == ["batch-000", "batch-001", "batch-002"]
    assert app.client.zcard(app.keys.jobs_by_id) == 240


def test_a_blocking_query_answers_when_something_changed_or_the_wait_ends(app, http, tokens):
    api = Api(http, tokens("submitter"))
    api("POST", "/v1/jobs", json={"id": "a", "replicas": 0})
    first = api("GET", "/v1/jobs")
    index = int(first.headers["x-sched-index"])
    started = time.monotonic()
    quiet = api("GET", f"/v1/jobs?index={index}&wait=1500ms")  # longer than one XREAD BLOCK step
    assert 1.4 < time.monotonic() - started < 6 and int(quiet.headers["x-sched-index"]) == index
    threading.Timer(0.5, lambda: api("POST", "/v1/jobs", json={"id": "b", "replicas": 0})).start()
    started = time.monotonic()
    woken = api("GET", f"/v1/jobs?index={index}&wait=30s")
    assert time.monotonic() - started < 10 and int(woken.headers["x-sched-index"]) > index
    assert [j["id"] for j in woken.json()] == ["a", "b"]
    assert api("GET", f"/v1/jobs/a?index={index}&wait=30s").json()["id"] == "a"  # already past it: at once
    assert api("GET", "/v1/jobs?wait=forever").status_code == 400


def test_sched_api_with_workers_serves_from_every_worker_and_stops_on_sigterm(cluster, tokens):
    """`sched api --workers 2`: two processes on one port, both answering; SIGTERM to the
    parent stops them all."""
    port = free_port()
    server = cluster._start("api", "api", "--port", str(port), "--workers", "2")
    base, token = f"http://127.0.0.1:{port}", tokens("viewer")

    def workers() -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == server.pid:
                    found.append(int(stat.parent.name))
            except (OSError, ValueError):
                pass
        return found

    def up() -> bool:
        try:
            return urllib.request.urlopen(f"{base}/v1/openapi.json", timeout=2).status == 200
        except OSError:
            return server.poll() is None and False

    cluster.wait(lambda: up() and len(workers()) == 2, "sched api --workers 2 to listen")
    for _ in range(40):  # each a new connection: the kernel hands them to either worker
        request = urllib.request.Request(f"{base}/v1/token", headers={"authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    children = workers()
    assert len(children) == 2
    server.terminate()
    assert server.wait(timeout=20) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)

"""The web dashboard (`sched ui`): its routes against a real redis-server, and, in a real
headless browser, its pages updating live as the cluster changes."""

from __future__ import annotations

import os
import threading
import time

import httpx2
import orjson
import pytest
import redis
from starlette.testclient import TestClient

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.app import App
from scheduler.tools.ui.app import create_app
from scheduler.tools.web import Background
from scheduler.tools.ui.templates import when
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

ORIGIN = "http://testserver"  # what TestClient sends as Host
HOSTILE = "<script>alert(1)</script>"


# ----------------------------------------------------------------------------- helpers
def place(app: App) -> None:
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()


def cluster(app: App) -> None:
    """Two nodes (one with HTML in a label value), a placed service, and a job that cannot fit."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB", labels=["zone=eu-1"]))
    app.store.put_node(make_node("n2", cpu=2, memory="4GiB", labels=[f"note={HOSTILE}"]))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 3, "resources": {"cpu": 1, "memory": "1GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "huge", "replicas": 1, "resources": {"cpu": 64, "memory": "1GiB"}}))
    place(app)


def snapshot(redis_url: str, namespace: str) -> dict:
    """Every key of the namespace with its serialised value: equal snapshots, nothing written."""
    raw = redis.Redis.from_url(redis_url)
    try:
        return {key: raw.dump(key) for key in raw.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000)}
    finally:
        raw.close()


@pytest.fixture
def web(app):
    with TestClient(create_app(app)) as client:
        yield client


def post(client, path: str, data=None, *, json=None, origin: str | None = ORIGIN, accept="application/json",
         **headers):
    if origin is not None:
        headers["Origin"] = origin
    headers["Accept"] = accept
    return client.post(path, data=data, json=json, headers=headers, follow_redirects=False)


# ----------------------------------------------------------------------------- pages and API
def test_every_page_and_api_route_answers(app, web):
    cluster(app)
    ns = app.keys.namespace
    app.client.hset(app.keys.task("web.1") + ":output", mapping={"stdout": "hello <b>world</b>", "stderr": "",
                                                                   "result": "42"})
    for path in ["/", "/nodes", "/nodes/n1", "/jobs", "/jobs/web", "/tasks/web.0", "/tasks/web.1", "/tasks/huge.0",
                 "/static/dashboard.css", "/static/dashboard.js"]:
        response = web.get(f"{path}?ns={ns}")
        assert response.status_code == 200, (path, response.text[:300])
    for path in ["/api/namespaces", "/api/overview", "/api/nodes", "/api/nodes/n1", "/api/jobs", "/api/jobs/web",
                 "/api/tasks/web.0"]:
        response = web.get(f"{path}?ns={ns}")
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["content-type"].startswith("application/json")

    overview = web.get(f"/api/overview?ns={ns}").json()
    assert overview["queues"]["unschedulable"] + overview["queues"]["backoff"] == 1
    assert overview["placed"] == 3
    assert sum(n["tasks"] for n in overview["nodes"]) == 3
    assert {j["id"]: j["tasks"]["assigned"] for j in overview["jobs"]} == {"huge": 0, "web": 3}
    assert ns in web.get("/api/namespaces").json()["namespaces"]

    job = web.get(f"/api/jobs/web?ns={ns}").json()
    assert job["job"]["tasks"]["assigned"] == 3 and [t["id"] for t in job["tasks"]] == ["web.0", "web.1", "web.2"]
    assert web.get(f"/api/jobs/web?ns={ns}&limit=1").json()["tasks"][0]["id"] == "web.2"

    # A pending task: its explanation in words and per reason; no output.
    pending = web.get(f"/api/tasks/huge.0?ns={ns}").json()
    assert pending["explanation"]["reasons"] == {"insufficient cpu": 2}
    page = web.get(f"/tasks/huge.0?ns={ns}").text
    assert "0/2 nodes available: 2 insufficient cpu." in page and "no output captured" in page
    # A placed task with captured output, escaped.
    page = web.get(f"/tasks/web.1?ns={ns}").text
    assert "hello &lt;b&gt;world&lt;/b&gt;" in page and "<b>world" not in page
    assert "placed on node" in page and '<span class="tl-what">placed on <a href="/nodes/' in page

    # Another namespace of the same Redis, empty: pages still answer.
    assert web.get("/?ns=elsewhere").status_code == 200
    assert web.get("/jobs?ns=elsewhere").status_code == 200


def test_a_finished_batch_job_shows_complete(app, web):
    """As `sched job ls` says it: a batch job none of whose tasks is pending or live."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "crunch", "type": "batch", "replicas": 2,
                                           "resources": {"cpu": 1, "memory": "1GiB"}}))
    place(app)
    ns = app.keys.namespace

    def statuses() -> tuple[str, str]:
        listed = {j["id"]: j["status"] for j in web.get(f"/api/jobs?ns={ns}").json()["jobs"]}
        return listed["crunch"], web.get(f"/api/jobs/crunch?ns={ns}").json()["job"]["status"]

    reconcile.task_ended(app.store, app.store.get_task("crunch.0"), True, "done")
    assert statuses() == ("running", "running")
    reconcile.task_ended(app.store, app.store.get_task("crunch.1"), True, "done")
    assert statuses() == ("complete", "complete")
    assert "complete" in web.get(f"/jobs/crunch?ns={ns}").text


def test_a_job_is_running_only_while_one_of_its_tasks_runs(app, web):
    """On a node added with `sched node add` (no agent) a job's tasks are placed but never
    start: the dashboard says "assigned", and why, not "running"; "running" once a task
    has started; "pending" while none is placed; "idle" when scaled to 0. The API's
    `status` stays what `sched job ls` says."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 2, "resources": {"cpu": 1, "memory": "1GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "huge", "replicas": 1, "resources": {"cpu": 64}}))
    place(app)
    ns = app.keys.namespace

    def shown(path: str, job_id: str) -> str:
        page = web.get(f"{path}?ns={ns}").text
        row = page[page.index(f'data-job="{job_id}"'):] if path != f"/jobs/{job_id}" else page
        cell = row[row.index('data-field="status"'):]
        return cell[cell.index('<span class="state'):cell.index("</span>") + 7]

    def phases() -> dict[str, tuple[str, str]]:
        return {j["id"]: (j["status"], j["phase"]) for j in web.get(f"/api/jobs?ns={ns}").json()["jobs"]}

    assert phases() == {"web": ("running", "assigned"), "huge": ("running", "pending")}
    for path in ("/", "/jobs", "/jobs/web"):
        cell = shown(path, "web")
        assert ">assigned<" in cell and "running" not in cell, (path, cell)
        assert "no agent runs them yet" in cell  # its title says why
    assert ">pending<" in shown("/jobs", "huge")
    assert app.store.start_task("web.0", "n1")  # what an agent does when the command starts
    assert phases()["web"] == ("running", "running")
    assert ">running<" in shown("/", "web") and ">running<" in shown("/jobs/web", "web")
    reconcile.scale(app.store, "huge", 0)
    assert phases()["huge"] == ("running", "idle")


def test_a_node_card_says_which_of_status_and_availability_stands_in_the_way(app, web):
    """A red `down` beside a green `active`: the card says in words that the node takes no
    tasks because it is down (its agent stopped reporting), and each badge says on hover
    who sets it."""
    for name in ("up", "gone", "held"):
        app.store.put_node(make_node(name, cpu=2, memory="4GiB"))
    app.store.set_status("gone", "down")
    app.store.set_availability("held", "pause")
    ns = app.keys.namespace
    words = {n["name"]: n["meaning"] for n in web.get(f"/api/nodes?ns={ns}").json()["nodes"]}
    assert words == {"up": "takes new tasks: ready and active",
                     "gone": "takes no tasks: down, its agent stopped reporting (its tasks were lost and replaced)",
                     "held": "takes no new tasks: paused by people; its tasks run on"}
    for path in ("/", "/nodes", "/nodes/gone"):
        page = web.get(f"{path}?ns={ns}").text
        card = page[page.index('data-node="gone"'):]
        assert 'class="node-meaning node-blocked" data-field="meaning">' + words["gone"] in card, path
        assert 'title="status down: its agent stopped reporting' in card
        assert 'title="availability active: people let it take tasks' in card


def test_user_text_is_escaped(app, web):
    cluster(app)
    ns = app.keys.namespace
    app.client.hset(app.keys.task("web.2"), "message", HOSTILE)  # as an end message would be stored
    for path in ["/", "/nodes", "/nodes/n2", "/jobs/web", "/tasks/web.2"]:
        text = web.get(f"{path}?ns={ns}").text
        assert "<script>alert" not in text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.get(f"/nodes?ns={ns}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.get(f"/tasks/web.2?ns={ns}").text
    # Ids in the address are refused, and quoted back escaped.
    response = web.get("/jobs/%3Cscript%3Ealert(1)", headers={"Accept": "text/html"})
    assert response.status_code == 400 and "<script>alert" not in response.text and "&lt;script&gt;" in response.text
    response = web.get(f"/nodes/{HOSTILE}", headers={"Accept": "text/html"})
    assert response.status_code in (400, 404) and "<script>alert" not in response.text
    # Every response forbids inline scripts and framing.
    headers = web.get(f"/?ns={ns}").headers
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"


def test_unknown_things_are_404(app, web):
    cluster(app)
    ns = app.keys.namespace
    for path in ["/nodes/nope", "/jobs/nope", "/tasks/nope.0", "/api/nodes/nope", "/api/jobs/nope",
                 "/api/tasks/web.99", "/no/such/page"]:
        response = web.get(f"{path}?ns={ns}")
        assert response.status_code == 404, path
    assert web.get(f"/api/jobs/nope?ns={ns}").json() == {"error": "job 'nope' does not exist."}


@pytest.mark.parametrize("path", ["/", "/jobs", "/api/overview", "/api/jobs", "/api/events"])
@pytest.mark.parametrize("ns", ["a{b}", "a:b", "a b", "x" * 300, "a\x01b"])
def test_bad_namespace_is_refused(web, path, ns):
    response = web.get(path, params={"ns": ns})
    assert response.status_code == 400


def test_hostile_actions_are_refused_and_write_nothing(app, web, redis_url):
    cluster(app)
    ns = app.keys.namespace
    before = snapshot(redis_url, ns)
    cases = [
        # bad values
        (f"/api/nodes/n1/availability?ns={ns}", {"availability": "evil"}, None, 400),
        (f"/api/nodes/n1/availability?ns={ns}", {}, None, 400),
        (f"/api/nodes/n1/availability?ns={ns}", None, {"availability": ["drain"]}, 400),
        (f"/api/nodes/..x/availability?ns={ns}", {"availability": "drain"}, None, 400),
        (f"/api/nodes/%3Cb%3E/availability?ns={ns}", {"availability": "drain"}, None, 400),
        (f"/api/nodes/..%2Fx/availability?ns={ns}", {"availability": "drain"}, None, 404),  # no such route
        (f"/api/nodes/{'n' * 300}/availability?ns={ns}", {"availability": "drain"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": "-1"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": "1000001"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": "1e3"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": "abc"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": ""}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", {"replicas": "5; FLUSHALL"}, None, 400),
        (f"/api/jobs/web/scale?ns={ns}", None, {"replicas": True}, 400),
        (f"/api/jobs/web/scale?ns={ns}", None, {"replicas": 2.5}, 400),
        (f"/api/jobs/web/scale?ns={ns}", None, [1], 400),
        (f"/api/jobs/web%3Cb%3E/scale?ns={ns}", {"replicas": "1"}, None, 400),
        (f"/api/jobs/web%3Cb%3E/stop?ns={ns}", {}, None, 400),
        (f"/api/jobs/web/stop?ns=a{{b}}", {}, None, 400),
        (f"/api/nodes/n1/availability?ns=a:b", {"availability": "drain"}, None, 400),
        # unknown things
        (f"/api/nodes/nope/availability?ns={ns}", {"availability": "drain"}, None, 404),
        (f"/api/jobs/nope/scale?ns={ns}", {"replicas": "2"}, None, 404),
        (f"/api/jobs/nope/stop?ns={ns}", {}, None, 404),
    ]
    for path, form, body, status in cases:
        response = post(web, path, data=form, json=body)
        assert response.status_code == status, (path, form, body, response.text)
        error = response.json()["error"]
        assert error.endswith(".") and "\n" not in error, error
    # Too large, and not a form or JSON.
    assert post(web, f"/api/jobs/web/scale?ns={ns}", data={"replicas": "1" * 20_000}).status_code == 413
    response = web.post(f"/api/jobs/web/scale?ns={ns}", content=b"replicas=1", headers={
        "Origin": ORIGIN, "Content-Type": "text/plain"})
    assert response.status_code == 415
    # GET on an action route.
    assert web.get(f"/api/jobs/web/stop?ns={ns}").status_code == 405
    assert snapshot(redis_url, ns) == before


def test_cross_origin_posts_are_refused(app, web, redis_url):
    cluster(app)
    ns = app.keys.namespace
    before = snapshot(redis_url, ns)
    path = f"/api/jobs/web/stop?ns={ns}"
    for headers in [{"origin": "http://evil.example"}, {"origin": "null"}, {"origin": None},
                    {"origin": None, "Referer": "http://evil.example/jobs"},
                    {"origin": "http://testserver.evil.example"}]:
        origin = headers.pop("origin")
        response = post(web, path, {}, origin=origin, **headers)
        assert response.status_code == 403, headers
        assert "cross-origin" in response.json()["error"]
    assert snapshot(redis_url, ns) == before
    # The same page's Referer is enough when a browser sends no Origin.
    response = post(web, path, {}, origin=None, Referer=f"{ORIGIN}/jobs?ns={ns}")
    assert response.status_code == 200 and response.json()["stopped"] == ["web.0", "web.1", "web.2"]


def test_actions_change_the_cluster(app, web):
    cluster(app)
    ns = app.keys.namespace
    response = post(web, f"/api/nodes/n2/availability?ns={ns}", {"availability": "pause"})
    assert response.status_code == 200 and response.json()["message"] == "node n2: active -> pause."
    assert app.store.get_node("n2").availability == "pause"

    node = next(n for n in app.store.nodes() if n.tasks)
    response = post(web, f"/api/nodes/{node.name}/availability?ns={ns}", json={"availability": "drain"})
    assert response.status_code == 200 and len(response.json()["moved"]) == node.tasks
    assert app.store.get_node(node.name).availability == "drain"
    assert not app.store.node_task_ids(node.name)
    post(web, f"/api/nodes/{node.name}/availability?ns={ns}", {"availability": "active"})
    assert app.store.get_node(node.name).availability == "active"

    response = post(web, f"/api/jobs/web/scale?ns={ns}", {"replicas": "5"})
    assert response.status_code == 200 and len(response.json()["added"]) == 2
    assert app.store.get_job("web")["spec"]["replicas"] == 5
    # A plain HTML form is sent back to its page; a `next` naming another site is ignored.
    response = post(web, f"/api/jobs/web/scale?ns={ns}", {"replicas": "4", "next": f"/jobs/web?ns={ns}"},
                    accept="text/html,*/*")
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/web?ns={ns}"
    response = post(web, f"/api/jobs/web/scale?ns={ns}", {"replicas": "4", "next": "//evil.example/"},
                    accept="text/html")
    assert response.status_code == 303 and response.headers["location"] == "/"

    response = post(web, f"/api/jobs/web/stop?ns={ns}", {})
    assert response.status_code == 200 and app.store.get_job("web")["status"] == "stopped"
    # A stopped job cannot be scaled: refused (409), as by the CLI.
    response = post(web, f"/api/jobs/web/scale?ns={ns}", {"replicas": "2"})
    assert response.status_code == 409 and "stopped" in response.json()["error"]


def test_lists_are_searched_filtered_and_sorted_in_the_query_string(app, web):
    ns = app.keys.namespace
    for name, cpu, zone in (("eu-1a", 4, "eu"), ("eu-1b", 8, "eu"), ("us-1a", 2, "us")):
        app.store.put_node(make_node(name, cpu=cpu, memory="8GiB", labels=[f"zone={zone}"]))
    app.store.set_availability("eu-1b", "pause")
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 3, "priority": 60,
                                           "resources": {"cpu": 1, "memory": "1GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "batch", "type": "batch", "replicas": 1, "priority": 20,
                                           "resources": {"cpu": 3, "memory": "1GiB"}}))
    place(app)

    def names(path: str, key: str, field: str = "name") -> list[str]:
        response = web.get(f"{path}&ns={ns}" if "?" in path else f"{path}?ns={ns}")
        assert response.status_code == 200, response.text
        return [row[field] for row in response.json()[key]]

    assert names("/api/nodes?q=zone=eu", "nodes") == ["eu-1a", "eu-1b"]  # labels are searched
    assert names("/api/nodes?availability=active", "nodes") == ["eu-1a", "us-1a"]
    assert names("/api/nodes?sort=tasks&order=desc", "nodes")[0] in ("eu-1a", "us-1a")
    assert names("/api/nodes?sort=name&order=desc", "nodes") == ["us-1a", "eu-1b", "eu-1a"]
    assert web.get(f"/api/nodes?q=eu&ns={ns}").json()["total"] == 3
    page = web.get(f"/nodes?q=US&ns={ns}").text  # case does not matter
    assert 'data-node="us-1a"' in page and 'data-node="eu-1a"' not in page and "1 of 3 nodes match" in page

    assert names("/api/jobs?sort=priority&order=desc", "jobs", "id") == ["web", "batch"]
    assert names("/api/jobs?type=batch", "jobs", "id") == ["batch"]
    pending = [t.id for t in app.store.tasks(app.store.all_task_ids()) if t.state == "pending"]
    assert names("/api/jobs/web?state=pending", "tasks", "id") == [t for t in pending if t.startswith("web.")]
    assert names("/api/jobs/web?sort=index&order=desc", "tasks", "id") == ["web.2", "web.1", "web.0"]
    page = web.get(f"/jobs/web?state=assigned&ns={ns}").text
    assigned = [t.id for t in app.store.tasks(app.store.job_task_ids("web")) if t.state == "assigned"]
    assert all(f'data-task="{t}"' in page for t in assigned) and f"{len(assigned)} of 3 tasks match" in page
    # The page follows the JSON route with the same choices (its live updates compare the two).
    assert "/api/jobs/web?ns=" in page and "state=assigned" in page.split('data-live="')[1].split('"')[0]

    for path, sentence in (("/api/nodes?sort=zone", "nodes can be sorted by name, status, tasks, cpu, memory"),
                           ("/api/jobs?status=sleeping", "status must be one of running, complete, stopped"),
                           ("/api/jobs/web?order=up", "order must be asc or desc"),
                           ("/jobs?q=" + "x" * 101, "the search must be printable text of at most 100")):
        response = web.get(f"{path}&ns={ns}")
        assert response.status_code == 400 and sentence in response.text, (path, response.text[:200])


def test_a_pending_task_says_node_by_node_what_it_needs_and_each_node_has_free(app, web):
    cluster(app)
    ns = app.keys.namespace
    nodes = {n.name: n for n in app.store.nodes()}
    record = web.get(f"/api/tasks/huge.0?ns={ns}").json()
    places = record["places"]
    assert places["needs"] == {"cpu": 64000, "memory": 2**30} and places["fits"] == 0
    assert {v["node"]: v["free"] for v in places["nodes"]} == {
        name: {r: node.capacity[r] - node.allocated.get(r, 0) for r in ("cpu", "memory")} for name, node in nodes.items()}
    assert all(v["reason"] == "insufficient cpu" and v["short"] == ["cpu"] for v in places["nodes"])
    page = web.get(f"/tasks/huge.0?ns={ns}").text
    assert "Where it could go now" in page and "No node could take it now" in page and "needs 64" in page
    assert page.count('class="num short" data-free="cpu"') == 2

    # The job page sums up why its pending tasks wait.
    waits = web.get(f"/api/jobs/huge?ns={ns}").json()["pending"]
    assert waits["pending"] == 1 and waits["unattempted"] == 0 and waits["example"] == "huge.0"
    message = app.queue.attempts("huge.0")[-1]["message"]
    assert message.startswith("0/2 nodes available: 2 insufficient cpu.")
    assert waits["last"] == [{"message": message, "tasks": 1, "example": "huge.0"}]
    assert waits["now"]["available"] == 0 and waits["now"]["reasons"] == {"insufficient cpu": 2}
    page = web.get(f"/jobs/huge?ns={ns}").text
    assert "Why 1 task is pending" in page and message in page
    assert web.get(f"/api/jobs/web?ns={ns}").json()["pending"] is None  # nothing of web waits

    # Its history: each attempt, repeats in one entry.
    app.queue.move_all_to_active()
    place(app)
    attempts = web.get(f"/api/tasks/huge.0?ns={ns}").json()["attempts"]
    assert [(a["first"], a["last"], a["message"]) for a in attempts] == [(1, 2, message)]
    assert "attempts 1–2: not placed" in web.get(f"/tasks/huge.0?ns={ns}").text

    # A node with room: the pages say where it could go before a worker places it there.
    app.store.put_node(make_node("n3", cpu=64, memory="8GiB"))
    places = web.get(f"/api/tasks/huge.0?ns={ns}").json()["places"]
    assert places["fits"] == 1 and places["nodes"][0] | {"free": None} == {
        "node": "n3", "fits": True, "reason": None, "free": None, "short": [], "ports": {}}
    waits = web.get(f"/api/jobs/huge?ns={ns}").json()["pending"]
    assert waits["fits_on"] == ["n3"] and waits["now"]["available"] == 1
    assert "one more task would fit on 1 of 3 nodes" in web.get(f"/jobs/huge?ns={ns}").text
    place(app)
    page = web.get(f"/tasks/huge.0?ns={ns}").text
    assert "attempt 3: placed on" in page and "attempts 1–2: not placed" in page and "Where it could go" not in page


def test_a_global_jobs_pending_task_is_judged_against_its_own_node(app, web):
    ns = app.keys.namespace
    app.store.put_node(make_node("small", cpu=1, memory="8GiB"))
    app.store.put_node(make_node("large", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "agent", "type": "global", "resources": {"cpu": 2, "memory": "1GiB"}}))
    place(app)
    waiting = [t for t in app.store.tasks(app.store.job_task_ids("agent")) if t.state == "pending"]
    assert [t.pin for t in waiting] == ["small"]
    places = web.get(f"/api/tasks/{waiting[0].id}?ns={ns}").json()["places"]
    assert places["pinned"] == "small" and [v["node"] for v in places["nodes"]] == ["small"]
    assert places["nodes"][0]["reason"] == "insufficient cpu" and places["fits"] == 0
    waits = web.get(f"/api/jobs/agent?ns={ns}").json()["pending"]
    assert waits["now"]["nodes_evaluated"] == 1 and waits["now"]["available"] == 0 and waits["fits_on"] == []


def test_times_are_relative_with_the_absolute_time_on_hover(app, web):
    cluster(app)
    page = web.get(f"/jobs/web?ns={app.keys.namespace}").text
    created = app.store.get_task("web.0").created_ms
    element = page.split(f'data-ms="{created}"')[1].split("</time>")[0]
    assert f'title="{when(created)}"' in element and element.endswith(("just now", "s ago"))


def test_specs_show_memory_in_units_and_the_json_keeps_bytes(app, web):
    cluster(app)
    ns = app.keys.namespace
    page = web.get(f"/jobs/web?ns={ns}").text
    assert "memory: 1Gi" in page and "1073741824" not in page and "cpu 1, memory 1 GiB" in page
    assert web.get(f"/api/jobs/web?ns={ns}").json()["job"]["spec"]["resources"]["memory"] == 2**30


def test_event_stream_forwards_the_namespace_events(app):
    app.store.put_node(make_node("n1", cpu=1, memory="1GiB"))
    with Background(app) as url, httpx2.Client(timeout=10) as client:
        assert client.get(f"{url}/api/events", params={"ns": "a:b"}).status_code == 400
        with client.stream("GET", f"{url}/api/events", params={"ns": app.keys.namespace}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert next(lines).startswith("retry:") and next(lines) == "event: ready"
            app.store.set_availability("n1", "pause")
            data = next(line for line in lines if line.startswith("data: {\"type\""))
            assert orjson.loads(data[6:]) | {"ts": 0} == {"type": "node", "name": "n1", "availability": "pause",
                                                           "ts": 0}


# ----------------------------------------------------------------------------- the browser
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser_page():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(10_000)
        page.on("dialog", lambda dialog: dialog.accept())  # the drain and stop confirmations
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        yield page
        browser.close()
        assert not errors, errors  # no script errors, no CSP violations


def open_live(page, url: str) -> None:
    """Open a page, wait for its event stream, and mark the document: a reload would lose the mark."""
    page.goto(url)
    page.wait_for_selector("body[data-live-state=connected]")
    page.evaluate("window.__notReloaded = true")


def still_same_document(page) -> bool:
    return page.evaluate("window.__notReloaded === true")


def state_of(page, task_id: str) -> str:
    return page.text_content(f'tr[data-task="{task_id}"] [data-field="state"]').strip()


@pytest.mark.slow
def test_pages_update_live_in_a_browser(app, browser_page):
    page = browser_page
    ns = app.keys.namespace
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB", labels=["zone=eu-1"]))
    app.store.put_node(make_node("n2", cpu=4, memory="8GiB", labels=[f"zone={HOSTILE}"]))
    api_requests: list[str] = []
    page.on("request", lambda r: api_requests.append(r.url) if "/api/" in r.url and "/api/events" not in r.url
            else None)
    with Background(app) as url:
        # Every page opens; a label with HTML in it is shown as text.
        for path in ["/", "/nodes", "/nodes/n1", "/jobs"]:
            open_live(page, f"{url}{path}?ns={ns}")
            assert page.locator("main").count() == 1
        open_live(page, f"{url}/nodes?ns={ns}")
        assert page.locator("text=zone=" + HOSTILE).count() == 1
        assert page.evaluate("typeof window.alert") == "function"

        # Nothing happens: nothing is fetched.
        time.sleep(1.5)
        seen = len(api_requests)
        time.sleep(2.5)
        assert len(api_requests) == seen, api_requests[seen:]

        # A job submitted now appears on the jobs page without a reload.
        open_live(page, f"{url}/jobs?ns={ns}")
        reconcile.submit(app.store, parse_job({"id": "web", "replicas": 3,
                                               "resources": {"cpu": 1, "memory": "1GiB"}}))
        page.wait_for_selector('tr[data-job="web"] [data-count="pending"]:text("3")')
        assert still_same_document(page)

        # On the job page, a worker's placements turn its tasks from pending to assigned.
        open_live(page, f"{url}/jobs/web?ns={ns}")
        assert [state_of(page, f"web.{i}") for i in range(3)] == ["pending"] * 3
        place(app)
        page.wait_for_function("""() => [...document.querySelectorAll('tr[data-task] [data-field="state"]')]
                                  .every(el => el.textContent.trim() === 'assigned')""")
        page.wait_for_selector('[data-count="assigned"]:text("3")')
        assert still_same_document(page)

        # Scaling from the page's form adds task rows as they are created.
        page.fill('input[name="replicas"]', "5")
        page.click('form[action*="/scale"] button')
        page.wait_for_selector('tr[data-task="web.4"]')
        page.wait_for_selector("#flash:text('job web scaled to 5')")
        assert still_same_document(page)

        # The task page follows its task: assigned, then running (as an agent starts it).
        open_live(page, f"{url}/tasks/web.0?ns={ns}")
        assert "assigned" in page.text_content("h1")
        node = app.store.get_task("web.0").node
        assert app.store.start_task("web.0", node)
        page.wait_for_selector('h1 .state:text("running")')
        page.wait_for_selector(".timeline :text('started')")
        assert still_same_document(page)

        # The overview counts the tasks on each node, and shows placements as they happen.
        open_live(page, f"{url}/?ns={ns}")
        counts = {n: page.text_content(f'[data-node="{n}"] [data-field="tasks"]') for n in ("n1", "n2")}
        assert sum(int(c) for c in counts.values()) == 3
        placing = threading.Thread(target=place, args=(app,))
        placing.start()
        placing.join()
        page.wait_for_function("""() => [...document.querySelectorAll('[data-node] [data-field="tasks"]')]
                                  .reduce((n, el) => n + parseInt(el.textContent, 10), 0) === 5""")
        page.wait_for_selector('[data-stat="placed"]:text("5")')
        assert still_same_document(page)

        # Pausing and draining from the nodes page.
        open_live(page, f"{url}/nodes?ns={ns}")
        page.click('tr[data-node="n1"] form:has(input[value="pause"]) button')
        page.wait_for_selector('tr[data-node="n1"] [data-field="availability"]:text("pause")')
        assert app.store.get_node("n1").availability == "pause"
        page.click('tr[data-node="n2"] form:has(input[value="drain"]) button')
        page.wait_for_selector('tr[data-node="n2"] [data-field="availability"]:text("drain")')
        page.wait_for_selector('tr[data-node="n2"] [data-field="tasks"]:text("0")')
        assert still_same_document(page)


@pytest.mark.slow
def test_lists_narrow_as_you_type_and_pending_tasks_say_why_in_a_browser(app, browser_page):
    page = browser_page
    ns = app.keys.namespace
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB", labels=["zone=eu"]))
    app.store.put_node(make_node("n2", cpu=2, memory="4GiB", labels=["zone=us"]))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 3, "resources": {"cpu": 1, "memory": "1GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "huge", "replicas": 1, "resources": {"cpu": 64, "memory": "1GiB"}}))
    place(app)
    with Background(app) as url:
        # Typing in the search narrows the list without a reload; the address keeps the search.
        open_live(page, f"{url}/nodes?ns={ns}")
        assert not page.is_visible("form[data-listing] button.apply")  # applied as typed
        page.fill('form[data-listing] input[name="q"]', "zone=us")
        page.wait_for_function("() => document.querySelectorAll('tr[data-node]').length === 1")
        assert page.locator('tr[data-node="n2"]').count() == 1 and "q=zone%3Dus" in page.url
        page.wait_for_selector(".matched:text('1 of 2 nodes match')")
        assert still_same_document(page)

        # A filter on a job's tasks, kept while the job changes: new pending tasks join the list live.
        open_live(page, f"{url}/jobs/web?ns={ns}")
        page.select_option('form[data-listing] select[name="state"]', "pending")
        page.wait_for_selector("td:text('no task matches')")
        reconcile.scale(app.store, "web", 8)
        place(app)  # 6 cpu in all: 3 more fit, 2 wait
        waiting = sorted(t.id for t in app.store.tasks(app.store.job_task_ids("web")) if t.state == "pending")
        assert len(waiting) == 2
        page.wait_for_function(f"""() => JSON.stringify([...document.querySelectorAll('tr[data-task]')]
                                   .map(row => row.dataset.task).sort()) === '{orjson.dumps(waiting).decode()}'""")
        assert "state=pending" in page.url and still_same_document(page)
        # The job says why they wait.
        page.wait_for_selector("[data-why=job] h2:text('Why 2 tasks are pending')")

        # Sorting by a column header, the other way on a second click.
        page.click('th a[data-sort="index"]')
        page.wait_for_selector('th[aria-sort="descending"] a[data-sort="index"]')
        assert [row.get_attribute("data-task") for row in page.query_selector_all("tr[data-task]")] == \
            sorted(waiting, key=lambda t: -int(t.split(".")[1]))

        # Times read relative, with the absolute time on hover.
        stamp = page.query_selector("time[data-ms]")
        assert stamp.text_content() in ("just now",) or stamp.text_content().endswith(" s ago")
        assert stamp.get_attribute("title").endswith(" UTC")

        # A pending task's page: each node's verdict with amounts, its attempts as they happen,
        # and a node with room as soon as it is added.
        open_live(page, f"{url}/tasks/huge.0?ns={ns}")
        page.wait_for_selector('tr[data-verdict="n1"] td.short[data-free="cpu"]')
        assert page.text_content('tr[data-verdict="n2"] td[data-free="memory"]').strip().endswith("GiB")
        app.queue.move_all_to_active()
        place(app)
        page.wait_for_selector(".timeline :text('attempts 1–2: not placed')")
        app.store.put_node(make_node("n3", cpu=64, memory="8GiB"))
        page.wait_for_selector('tr[data-verdict="n3"].fits')
        assert page.text_content("[data-why=nodes] strong").startswith("1 of 3 nodes could take it now")
        assert still_same_document(page)


# ----------------------------------------------------------------------------- capacity
def test_the_capacity_page_shows_the_last_answer_nodes_to_add_nodes_that_can_go_and_savings(app, web):
    from scheduler.client import Client

    ns = app.keys.namespace
    empty = web.get(f"/capacity?ns={ns}")
    assert empty.status_code == 200 and "No answer recorded yet" in empty.text
    api = Client(app=app)
    for name in ("n1", "n2", "n3"):
        api.add_node(name, cpu=4, memory="8GiB")
    api.add_pool("std", cpu=4, memory="8GiB", cost=2)
    api.add_pool("gpu", cpu=8, memory="32GiB", gpu=1, cost=5, taints=["note=x:NoSchedule"])
    api.submit({"id": "web", "replicas": 2, "resources": {"cpu": 1}})
    api.submit({"id": "train", "replicas": 2, "resources": {"cpu": 1, "gpu": 1},
                "tolerations": [{"key": "note", "operator": "Exists", "effect": "NoSchedule"}]})
    api.submit({"id": "huge", "replicas": 1, "resources": {"cpu": 64}})
    place(app)
    result = api.capacity(record=True)
    page = web.get(f"/capacity?ns={ns}").text
    assert '<a href="/capacity' in page and 'aria-current="page">Capacity' in page
    assert "<td>gpu</td><td>2</td><td>2</td><td>10.0</td>" in page  # two gpu nodes for train
    assert f'<strong class="capacity-savings">{result["scale_down"]["savings"]}</strong>' in page
    assert result["scale_down"]["nodes"] >= 1 and result["scale_down"]["savings"] == 2 * result["scale_down"]["nodes"]
    assert "huge</a> (1): pool gpu: insufficient cpu; pool std: insufficient cpu" in page
    live = web.get(f"/api/capacity?ns={ns}").json()
    assert live["answer"]["scale_up"]["add"] == [{k: v for k, v in a.items()} for a in result["scale_up"]["add"]]
    assert [p["name"] for p in live["pools"]] == ["gpu", "std"]

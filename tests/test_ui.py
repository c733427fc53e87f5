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
from scheduler.tools.ui.server import Background
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
        app.scripts.start(keys=[app.keys.task("web.0")], args=[node, app.keys.events])
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

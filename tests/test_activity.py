"""The dashboard's activity page (``/activity``, ``/api/activity``) and its live event
stream (``/api/events``), which a browser resumes after a reconnection from the stream."""

from __future__ import annotations

import os

import httpx2
import orjson
import pytest
from starlette.testclient import TestClient

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.tools.ui.app import create_app
from scheduler.tools.web import Background

from worker_harness import run_worker_until_idle

HOSTILE = "<script>alert(1)</script>"


def busy(app) -> None:
    """Two nodes, two jobs placed, a node paused."""
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    app.store.put_node(make_node("n2", cpu=4, memory="8GiB", labels=[f"note={HOSTILE}"]))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 2, "resources": {"cpu": 1, "memory": "1GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "api", "replicas": 1, "resources": {"cpu": 1, "memory": "1GiB"}}))
    run_worker_until_idle(app)
    app.store.set_availability("n2", "pause")


@pytest.fixture
def web(app):
    with TestClient(create_app(app)) as client:
        yield client


def test_the_activity_page_lists_the_latest_events_filtered(app, web):
    busy(app)
    ns = app.keys.namespace
    everything = web.get("/api/activity", params={"ns": ns}).json()
    events = everything["events"]
    newest = app.client.xrevrange(app.keys.stream, count=1)[0][0]
    assert everything["newest"] == newest and events[0]["id"] == newest  # newest first
    assert len(events) == app.client.xlen(app.keys.stream)
    assert events[0] | {"ts": 0} == {"id": newest, "ts": 0, "type": "node", "subject": "n2", "job": None,
                                     "change": "availability pause", "details": []}
    web_only = web.get("/api/activity", params={"ns": ns, "job": "web"}).json()["events"]
    assert [(e["type"], e["subject"], e["change"]) for e in reversed(web_only)] == [
        ("job", "web", "submitted"), ("task", "web.0", "pending"), ("task", "web.1", "pending"),
        *sorted([(e["type"], e["subject"], "assigned") for e in web_only if e["change"] == "assigned"])]
    placed_on_n1 = web.get("/api/activity", params={"ns": ns, "node": "n1", "type": "task"}).json()["events"]
    assert placed_on_n1 and all(e["type"] == "task" and e["change"] == "assigned" for e in placed_on_n1)
    assert all(e["details"] == ["node=n1"] for e in placed_on_n1)

    page = web.get("/activity", params={"ns": ns, "job": "web"})
    assert page.status_code == 200
    html = page.text
    assert 'href="/tasks/web.0?ns=' in html and 'href="/jobs/web?ns=' in html and "api.0" not in html
    assert f'data-activity-after="{newest}"' in html and 'data-activity-job="web"' in html
    assert 'aria-current="page">Activity<' in html
    assert HOSTILE not in web.get("/activity", params={"ns": ns}).text  # escaped, like every page


@pytest.mark.parametrize("query", [{"type": "cluster"}, {"job": "no spaces"}, {"node": "a/b"}])
def test_bad_filters_are_one_sentence(web, app, query):
    response = web.get("/api/activity", params={"ns": app.keys.namespace, **query})
    assert response.status_code == 400
    message = response.json()["error"]
    assert message.endswith(".") and message.count(". ") == 0


def _data_lines(lines, count: int) -> list[tuple[str, dict]]:
    """The next ``count`` events of an SSE response's lines, as (id, event)."""
    out, entry_id = [], None
    for line in lines:
        if line.startswith("id: "):
            entry_id = line[4:]
        elif line.startswith("data: {\"type\""):
            out.append((entry_id, orjson.loads(line[6:])))
            entry_id = None
            if len(out) == count:
                return out
    raise AssertionError("the stream ended")


def test_the_event_stream_resumes_after_the_last_event_a_browser_saw(app):
    """Events carry their stream id; a stream opened with Last-Event-ID (as EventSource
    sends after a reconnection) or ?after= first sends what came after it, then what
    comes, each once."""
    app.store.put_node(make_node("n1", cpu=1, memory="1GiB"))
    ns = app.keys.namespace
    with Background(app) as url, httpx2.Client(timeout=10) as client:
        with client.stream("GET", f"{url}/api/events", params={"ns": ns}) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("retry:") and next(lines) == "event: ready"
            start = next(lines)
            assert start == f"id: {app.client.xrevrange(app.keys.stream, count=1)[0][0]}"  # the position
            app.store.set_availability("n1", "pause")
            (first_id, first), = _data_lines(lines, 1)
            assert first | {"ts": 0} == {"type": "node", "name": "n1", "availability": "pause", "ts": 0}
        # Missed while away: two changes.
        app.store.set_availability("n1", "active")
        app.store.set_availability("n1", "drain")
        for headers, params in (({"Last-Event-ID": first_id}, {"ns": ns}), ({}, {"ns": ns, "after": first_id})):
            with client.stream("GET", f"{url}/api/events", params=params, headers=headers) as response:
                lines = response.iter_lines()
                missed = _data_lines(lines, 2)
                assert [e["availability"] for _, e in missed] == ["active", "drain"]
                app.store.set_availability("n1", "pause" if "after" in params else "active")
                (_, live), = _data_lines(lines, 1)
                assert live["availability"] in ("pause", "active")
                ids = [i for i, _ in missed]
                assert ids == [entry_id for entry_id, _ in app.client.xrange(app.keys.stream, min=f"({first_id}",
                                                                            count=2)]


# ----------------------------------------------------------------------------- the browser
CHROMIUM = "/usr/bin/chromium"


@pytest.mark.slow
def test_the_activity_page_is_live_in_a_browser(app):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    busy(app)
    ns = app.keys.namespace
    with Background(app) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(10_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{url}/activity?ns={ns}&node=n2")
        page.wait_for_selector("body[data-live-state=connected]")
        before = page.locator("#activity-rows tr").count()
        assert page.text_content("#activity-rows tr td.when").strip().endswith("ago") or "just now"
        app.store.set_availability("n2", "active")  # about n2: shown
        app.store.set_availability("n1", "pause")  # about n1: not shown
        page.wait_for_selector('#activity-rows tr:first-child td:has-text("availability active")')
        assert page.locator("#activity-rows tr").count() == before + 1
        first = page.locator("#activity-rows tr").first
        assert first.locator("td.when").text_content().strip() == "just now"
        assert first.locator("a").get_attribute("href") == f"/nodes/n2?ns={ns}"
        browser.close()
    assert not errors, errors

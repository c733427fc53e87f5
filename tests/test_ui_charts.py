"""The overview's charts over time: the namespace's series (``sched:{ns}:series``, samples
the scheduler workers take, one per interval however many take part, capped) served on
``/api/series``, and drawn as SVG lines by the page in a real browser, where they are
still there after a reload."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.series import SAMPLES_KEPT
from scheduler.tools.ui.app import create_app
from scheduler.tools.web import Background
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from test_ui import browser_page, open_live  # noqa: F401  (the fixture)


def place(app) -> None:
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()


def test_workers_take_one_sample_per_interval_and_the_list_is_capped(app):
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 3, "resources": {"cpu": 1, "memory": "1GiB"}}))
    place(app)  # its upkeep offers a sample as it starts
    taken = app.store.series()
    assert len(taken) == 1 and taken[0]["active"] == 3 and taken[0]["cap"] == {"cpu": 4000, "memory": 8 * 2**30}
    # Two workers' offers within the interval make one sample, by Redis time.
    assert app.store.sample({"cpu": 4000}) is False
    assert app.store.sample({"cpu": 4000}, every_ms=0) is True
    last = app.store.series()[-1]
    assert (last["placed"], last["active"], last["tasks"], last["alloc"]) == (3, 0, 3, {"cpu": 3000,
                                                                                       "memory": 3 * 2**30})
    assert app.store.series(after_ms=last["ts"] - 1) == [last]
    for _ in range(12):
        app.store.sample({"cpu": 4000}, every_ms=0, kept=5)
    assert app.client.llen(app.keys.series) == 5  # bounded
    assert SAMPLES_KEPT * 300 < 250_000  # about 150 KB at most per namespace (a sample is under 300 bytes)
    assert max(len(text) for text in app.client.lrange(app.keys.series, 0, -1)) < 300


def test_the_series_route(app):
    app.store.sample({"cpu": 1000}, every_ms=0)
    ns = app.keys.namespace
    with TestClient(create_app(app)) as web:
        served = web.get(f"/api/series?ns={ns}").json()
        assert served["every_ms"] == 5000 and served["kept"] == SAMPLES_KEPT and len(served["samples"]) == 1
        after = served["samples"][0]["ts"]
        assert web.get(f"/api/series?ns={ns}&after={after}").json()["samples"] == []
        bad = web.get(f"/api/series?ns={ns}&after=soon")
        assert bad.status_code == 400 and "is not a time in milliseconds" in bad.json()["error"]
        page = web.get(f"/?ns={ns}").text
        assert 'data-charts="/api/series?ns=' in page and "/static/charts.js" in page


@pytest.mark.slow
def test_the_overview_draws_the_series_and_keeps_it_across_a_reload(app, browser_page):  # noqa: F811
    page = browser_page
    ns = app.keys.namespace
    app.store.put_node(make_node("n1", cpu=4, memory="8GiB"))
    app.store.sample(app.store.nodes()[0].capacity, every_ms=0)  # before: nothing placed
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 2, "resources": {"cpu": 1, "memory": "2GiB"}}))
    reconcile.submit(app.store, parse_job({"id": "huge", "replicas": 1, "resources": {"cpu": 64}}))
    place(app)
    time.sleep(0.05)
    app.store.sample(app.store.nodes()[0].capacity, every_ms=0)  # after: 2 placed, one unschedulable
    with Background(app) as url:
        open_live(page, f"{url}/?ns={ns}")
        page.wait_for_selector("section[data-charts][data-samples]")
        count = int(page.get_attribute("section[data-charts]", "data-samples"))
        assert count == len(app.store.series()) >= 2
        assert page.locator("[data-chart] polyline").count() >= 1 + 4 + 2  # a line per series
        assert not page.is_visible("[data-charts-note]")
        keys = {el.get_attribute("data-series"): el.text_content()
                for el in page.query_selector_all("[data-chart] .key")}
        assert keys["cpu"] == "cpu 50 %" and keys["memory"] == "memory 50 %"
        assert keys["unschedulable"] == "unschedulable 1" and keys["active"] == "active 0"
        assert float(keys["placements / s"].split()[-1]) > 0
        page.reload()
        page.wait_for_selector("section[data-charts][data-samples]")
        assert int(page.get_attribute("section[data-charts]", "data-samples")) == count  # kept in Redis

"""The dashboard's view of time and order: a periodic job's next launch and last launches,
a launch's page (its id holds a '/'), and a job's dependencies drawn as a graph."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from scheduler import Client
from scheduler.tools.ui.app import create_app


@pytest.fixture
def web(app):
    with TestClient(create_app(app)) as client:
        yield client


def test_a_periodic_job_shows_its_next_launch_and_last_launches(app, web):
    client = Client(app=app)
    client.submit({"id": "nightly", "type": "batch", "periodic": {"cron": "0 2 * * *", "time_zone": "Europe/Berlin"}})
    child = client.launch("nightly")["launched"]
    page = web.get(f"/jobs/nightly?ns={app.keys.namespace}").text
    nxt = client.job("nightly")["next_launch"]
    assert 'data-region="schedule"' in page and f'<time datetime="{nxt}">' in page
    assert f'data-launch="{child}"' in page and "0 2 * * *" in page
    launch = web.get(f"/jobs/{quote(child, safe='')}?ns={app.keys.namespace}")
    assert launch.status_code == 200 and "launched by" in launch.text and 'href="/jobs/nightly' in launch.text
    api = web.get(f"/api/jobs/{quote(child, safe='')}?ns={app.keys.namespace}")
    assert api.status_code == 200
    task = client.tasks(job=child)[0].id
    assert web.get(f"/tasks/{quote(task, safe='')}?ns={app.keys.namespace}").status_code == 200


def test_a_jobs_page_draws_what_it_waits_for_and_what_waits_for_it(app, web):
    client = Client(app=app)
    client.submit({"id": "extract", "type": "batch"})
    client.submit({"id": "transform", "type": "batch", "after": ["extract"]})
    client.submit({"id": "load", "type": "batch", "after": [{"job": "transform", "state": "ended"}]})
    page = web.get(f"/jobs/transform?ns={app.keys.namespace}").text
    assert 'class="dep-graph"' in page
    assert 'data-upstream="extract"' in page and 'data-downstream="load"' in page
    assert "waiting for job extract to complete" in page
    assert 'data-region="dependencies"' not in web.get(f"/jobs/nothing-waits?ns={app.keys.namespace}").text

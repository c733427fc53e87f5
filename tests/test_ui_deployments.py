"""Deployments on the dashboard: a job's deployment with its progress, its versions and a
diff between them, each task's version and health, and the promote, pause, resume, fail
and revert buttons; through the routes, and live in a real headless browser.

The cluster is static nodes (no agents): the tests start placed tasks and record their
health as agents would (``Store.start_task``, ``Store.set_task_health``), and advance the
deployment with the same ``deployer.advance`` every scheduler worker calls. Real health
checks and real rollouts are tested against real agents in test_deployments.py.
"""

from __future__ import annotations

import pytest

from scheduler.control import deployer, reconcile
from scheduler.model import make_node, parse_job
from scheduler.tools.web import Background

from test_ui import ORIGIN, browser_page, open_live, place, post, snapshot, still_same_document, web  # noqa: F401

LIVENESS_STEPS = 200  # steps of a deployment before a test gives up: a bound, not a target


def service(seconds: str, **update) -> dict:
    """4 replicas of a command sleeping ``seconds`` (which tells versions apart), 1 canary."""
    return {"id": "web", "replicas": 4, "resources": {"cpu": 0.5, "memory": "256MiB"},
            "run": {"command": ["sleep", seconds]}, "health": {"http": {"port": 8080, "path": "/healthz"}},
            "update": {"max_parallel": 2, "min_healthy_time": 0, "canary": 1, "auto_revert": True, **update}}


def agents_report(app) -> None:
    """Start the placed tasks and mark the running ones healthy, as their agents would."""
    for task in app.store.tasks(app.store.job_task_ids("web")):
        if task.state == "assigned":
            app.store.start_task(task.id, task.node)
        if app.store.get_task(task.id).state == "running" and task.health != "healthy":
            app.store.set_task_health(task.id, task.node, "healthy", "GET /healthz answered 200")


def step(app, deployment: str) -> str:
    """One step of the deployment, then what the workers and agents do after it."""
    state = deployer.advance(app.store, deployment)
    place(app)
    agents_report(app)
    return state


def until(app, deployment: str, states: tuple[str, ...]) -> str:
    for _ in range(LIVENESS_STEPS):
        state = step(app, deployment)
        if state in states:
            return state
    raise AssertionError(f"deployment {deployment} did not reach {states}: {app.store.get_deployment(deployment)}")


def waiting_canary(app) -> None:
    """Version 1 running healthy on n1, and version 2's deployment waiting for promotion
    with its healthy canary."""
    app.store.put_node(make_node("n1", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job(service("600")))
    place(app)
    agents_report(app)
    assert reconcile.submit(app.store, parse_job(service("601")))["deployment"] == "web@2"
    assert until(app, "web@2", ("awaiting_promotion",)) == "awaiting_promotion"


# ----------------------------------------------------------------------------- routes
def test_the_job_page_shows_its_deployment_versions_and_task_health(app, web):
    waiting_canary(app)
    ns = app.keys.namespace
    record = web.get(f"/api/jobs/web?ns={ns}").json()
    d = record["deployment"]
    assert (d["id"], d["state"], d["from"], d["to"]) == ("web@2", "awaiting_promotion", 1, 2)
    assert d["to_counts"] == {"desired": 4, "placed": 1, "healthy": 1, "unhealthy": 0}
    assert d["from_counts"]["placed"] == 4 and d["from_counts"]["healthy"] == 4
    command = {"field": "run.command", "old": ["sleep", "600"], "new": ["sleep", "601"]}
    assert [(v["version"], v["current"], v["deployment_state"], v["changes"]) for v in record["versions"]] == [
        (2, True, "awaiting_promotion", [command]), (1, False, None, [])]
    assert record["older_versions"] == 0 and record["diff"] is None
    assert {(t["version"], t["health"]) for t in record["tasks"]} == {(1, "healthy"), (2, "healthy")}
    assert record["tasks"][-1]["health_check"] == "GET /healthz answered 200"

    page = web.get(f"/jobs/web?ns={ns}").text
    assert 'data-deployment="web@2"' in page and "<strong>Promote</strong> rolls the rest out" in page
    assert {action for action in ("promote", "pause", "resume", "fail", "revert")
            if f'data-action="{action}"' in page} == {"promote", "fail", "revert"}
    assert 'data-versions="2,1"' in page and "rolled out 2 at a time, stop-first, 1 canary first" in page
    assert '<td class="num" data-dcount="to_healthy">1</td>' in page
    assert page.count('class="health health-healthy"') == 5  # the task list: 4 old tasks and the canary

    # Two versions compared, on the page and in its JSON; versions that are not there.
    diff = web.get(f"/api/jobs/web?ns={ns}&from=1&to=2").json()["diff"]
    assert diff == {"from": 1, "to": 2, "changes": [command]}
    page = web.get(f"/jobs/web?ns={ns}&from=2&to=1").text
    assert 'data-diff="2-1"' in page and "<code>[&#34;sleep&#34;,&#34;601&#34;]</code>" in page
    assert web.get(f"/api/jobs/web?ns={ns}&from=1&to=9").status_code == 404
    for query, sentence in (("from=1", "give both from and to"), ("from=1&to=x", "to must be a job version"),
                            ("from=0&to=1", "from must be a job version")):
        response = web.get(f"/api/jobs/web?ns={ns}&{query}")
        assert response.status_code == 400 and sentence in response.json()["error"], query

    # A task's page: its version and health, with what its last check said.
    page = web.get(f"/tasks/web.4?ns={ns}").text
    assert "GET /healthz answered 200" in page and '<span class="health health-healthy">healthy</span>' in page

    # The overview and the deployments route list the deployment.
    assert [d["id"] for d in web.get(f"/api/overview?ns={ns}").json()["deployments"]] == ["web@2"]
    assert 'data-deployment="web@2"' in web.get(f"/?ns={ns}").text
    listed = web.get(f"/api/deployments?ns={ns}&job=web").json()["deployments"]
    assert [(d["id"], d["state"]) for d in listed] == [("web@2", "awaiting_promotion")]
    assert web.get(f"/api/deployments?ns={ns}&job=a<b").status_code == 400


def test_deployment_buttons_and_revert_act_as_the_cli(app, web):
    waiting_canary(app)
    ns = app.keys.namespace

    def act(action: str, deployment: str = "web@2"):
        return post(web, f"/api/deployments/{deployment}/{action}?ns={ns}", {})

    response = act("promote")
    assert response.status_code == 200 and response.json()["message"] == "deployment web@2 promoted."
    assert app.store.get_deployment("web@2")["state"] == "running"
    # What the deployment's state does not allow is refused in one sentence (409), as by the CLI.
    response = act("promote")
    assert response.status_code == 409
    assert response.json()["error"] == "deployment web@2 is running and has no canary tasks waiting for promotion."
    assert act("pause").json()["state"] == "paused"
    assert act("resume").json()["message"] == "deployment web@2 resumed."
    response = act("fail")
    assert response.status_code == 200 and response.json()["state"] == "reverted"
    assert response.json()["message"] == "deployment web@2 failed; version 1 comes back as version 3."
    assert app.store.get_job("web")["version"] == 3  # auto_revert: version 1's spec again, as version 3

    # Revert by hand, from a plain HTML form: back to its page.
    response = post(web, f"/api/jobs/web/revert?ns={ns}", {"version": "2", "next": f"/jobs/web?ns={ns}"},
                    accept="text/html")
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/web?ns={ns}"
    assert app.store.job_spec("web", 4).raw == parse_job(service("601")).raw
    assert app.store.get_deployment("web@4")["state"] == "running"
    response = post(web, f"/api/jobs/web/revert?ns={ns}", json={"version": 4})
    assert response.json()["message"] == "job web: version 4 is the running spec; nothing changes."


def test_bad_deployment_actions_are_refused_and_write_nothing(app, web, redis_url):
    waiting_canary(app)
    ns = app.keys.namespace
    before = snapshot(redis_url, ns)
    cases = [
        (f"/api/deployments/web/promote?ns={ns}", {}, 400),  # not <job>@<version>
        (f"/api/deployments/web@x/promote?ns={ns}", {}, 400),
        (f"/api/deployments/web@0/promote?ns={ns}", {}, 400),
        (f"/api/deployments/%3Cb%3E@2/pause?ns={ns}", {}, 400),
        (f"/api/deployments/web@2/explode?ns={ns}", {}, 404),
        (f"/api/deployments/web@9/promote?ns={ns}", {}, 404),
        (f"/api/deployments/nope@2/pause?ns={ns}", {}, 404),
        (f"/api/deployments/web@2/resume?ns={ns}", {}, 409),  # it is not paused
        (f"/api/jobs/web/revert?ns={ns}", {}, 400),
        (f"/api/jobs/web/revert?ns={ns}", {"version": "0"}, 400),
        (f"/api/jobs/web/revert?ns={ns}", {"version": "1; FLUSHALL"}, 400),
        (f"/api/jobs/web/revert?ns={ns}", {"version": "9"}, 404),
        (f"/api/jobs/nope/revert?ns={ns}", {"version": "1"}, 404),
        (f"/api/jobs/web/revert?ns=a:b", {"version": "1"}, 400),
    ]
    for path, form, status in cases:
        response = post(web, path, form)
        assert response.status_code == status, (path, form, response.text)
        error = response.json()["error"]
        assert error.endswith(".") and "\n" not in error, error
    for origin in ("http://evil.example", None):
        response = post(web, f"/api/deployments/web@2/promote?ns={ns}", {}, origin=origin)
        assert response.status_code == 403
        response = post(web, f"/api/jobs/web/revert?ns={ns}", {"version": "1"}, origin=origin)
        assert response.status_code == 403
    assert web.get(f"/api/deployments/web@2/promote?ns={ns}").status_code == 405
    assert snapshot(redis_url, ns) == before


# ----------------------------------------------------------------------------- the browser
@pytest.mark.slow
def test_a_deployment_rolls_live_on_the_job_page_in_a_browser(app, browser_page):
    page = browser_page
    ns = app.keys.namespace
    app.store.put_node(make_node("n1", cpu=8, memory="8GiB"))
    reconcile.submit(app.store, parse_job(service("600")))
    place(app)
    agents_report(app)
    with Background(app) as url:
        open_live(page, f"{url}/jobs/web?ns={ns}")
        assert page.locator("[data-deployment]").count() == 0

        # A new version: its deployment appears, and its canary turns healthy, without a reload.
        reconcile.submit(app.store, parse_job(service("601")))
        page.wait_for_selector('[data-deployment="web@2"] [data-field="dstate"] .state:text("running")')
        until(app, "web@2", ("awaiting_promotion",))
        page.wait_for_selector('[data-deployment="web@2"] button[data-action="promote"]')
        page.wait_for_selector('[data-deployment="web@2"] [data-dcount="to_healthy"]:text("1")')
        page.wait_for_selector('tr[data-task="web.4"] [data-field="health"] .health-healthy')
        assert page.text_content('tr[data-task="web.4"] [data-field="version"]').strip() == "2"
        assert still_same_document(page)

        # Promote, pause and resume from the page.
        page.click('button[data-action="promote"]')
        page.wait_for_selector("#flash:text('deployment web@2 promoted.')")
        page.wait_for_selector('[data-deployment="web@2"][data-state="running"]')
        page.click('button[data-action="pause"]')
        page.wait_for_selector('[data-deployment="web@2"][data-state="paused"] button[data-action="resume"]')
        assert app.store.get_deployment("web@2")["state"] == "paused"
        page.click('button[data-action="resume"]')
        page.wait_for_selector('[data-deployment="web@2"][data-state="running"]')

        # It rolls on: the counts follow each step, then it ends.
        for _ in range(LIVENESS_STEPS):
            step(app, "web@2")
            record = app.store.get_deployment("web@2")
            if record["to_counts"]["healthy"] >= 2:
                break
        assert record["state"] == "running"  # old tasks are left: not done yet
        page.wait_for_selector(f'[data-deployment="web@2"] [data-dcount="to_healthy"]'
                               f':text("{record["to_counts"]["healthy"]}")')
        page.wait_for_selector(f'[data-deployment="web@2"] [data-dcount="from_placed"]'
                               f':text("{record["from_counts"]["placed"]}")')
        until(app, "web@2", ("successful",))
        page.wait_for_selector('[data-deployment="web@2"][data-state="successful"]')
        page.wait_for_selector('[data-deployment="web@2"] [data-dcount="to_healthy"]:text("4")')
        assert page.eval_on_selector('[data-deployment="web@2"] [data-seg="healthy"]', "el => el.style.width") == "100%"
        assert page.locator('[data-deployment="web@2"] button').count() == 0  # nothing left to do to it
        assert still_same_document(page)

        # Revert to version 1 from the versions: a new deployment, version 3, shows.
        page.click('tr[data-version="1"] button[data-action="revert"]')
        page.wait_for_selector("#flash:text('job web: version 1 submitted again as version 3')")
        page.wait_for_selector('[data-deployment="web@3"]')
        page.wait_for_selector('[data-versions="3,2,1"]')
        # The diff between two versions.
        page.click('tr[data-version="2"] a:text("diff with current")')
        page.wait_for_selector('[data-diff="2-3"] td.new code:text(\'["sleep","600"]\')')

        # The overview lists the deployments and follows them.
        open_live(page, f"{url}/?ns={ns}")
        page.wait_for_selector('tr[data-deployment="web@3"] [data-dcount="to_healthy"]:text("0")')
        assert page.locator("tr[data-deployment]").count() == 2
        until(app, "web@3", ("awaiting_promotion",))
        page.wait_for_selector('tr[data-deployment="web@3"] .state:text("awaiting_promotion")')
        assert still_same_document(page)

        # A task's page follows its health.
        open_live(page, f"{url}/tasks/web.8?ns={ns}")
        task = app.store.get_task("web.8")
        assert task.state == "running" and task.version == 3
        app.store.set_task_health("web.8", task.node, "unhealthy", "GET /healthz answered 503")
        page.wait_for_selector('[data-field="health"] .health-unhealthy')
        page.wait_for_selector(".timeline :text('GET /healthz answered 503')")
        assert still_same_document(page)

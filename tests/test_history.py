"""The audit trail: every action is recorded with who did it, in the history of its job,
node or namespace and in an ``audit`` event, against a real redis-server: a Redis ACL
user's name from ``ACL WHOAMI``, ``default`` without one, ``ui:<name>`` for a dashboard
operator; ``sched job show`` prints the history; the lists keep a bounded number."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from scheduler import Client
from scheduler.model import parse_job
from scheduler.state.app import App
from scheduler.state.history import HISTORY_KEEP, Record
from scheduler.tools.ui.app import create_app
from scheduler.tools.ui.auth import AuthSettings

from test_acl import WEB, create, names, ok, refused, sched, server  # noqa: F401 (fixtures)
from test_ui import cluster
from test_ui_auth import JSON_HEADERS, OPERATOR_PASSWORD, people, sign_in  # noqa: F401 (fixture)


def audit_events(subscription) -> list[dict]:
    """The audit events published so far (the actions' other events left out)."""
    return [e for e in subscription.iter(timeout=0.5) if e.get("type") == "audit"]


def test_an_acl_users_actions_name_that_user(server, names):
    admin, _ = server
    a, _, prefix = names
    user = f"{prefix}-ci"
    url = create(admin, user, a, "submitter")
    watcher = App(redis_url=admin, namespace=a)
    with watcher.store.subscribe() as subscription:
        ok(sched(url, "-n", a, "job", "submit", "-", input=WEB))
        ok(sched(url, "-n", a, "job", "scale", "web", "3"))
        ok(sched(url, "-n", a, "job", "stop", "web"))
        events = audit_events(subscription)
    assert [(e["action"], e["job"], e["by"]) for e in events] == [
        ("submit", "web", user), ("scale", "web", user), ("stop", "web", user)]
    assert events[1]["replicas"] == 3 and events[1]["added"] == 1 and events[2]["stopped"] == 3
    assert list(events[0]) == ["type", "action", "job", "by", "version", "change", "tasks", "ts"]

    history = watcher.store.read_history(job="web")
    assert [(h["action"], h["by"]) for h in history] == [("submit", user), ("scale", user), ("stop", user)]
    assert history[0]["details"] == {"version": 1, "change": "create", "tasks": 2}
    assert [h["ts"] for h in history] == [e["ts"] for e in events]

    # A viewer reads the history; what Redis refuses the submitter leaves none.
    viewer = create(admin, f"{prefix}-view", a, "viewer")
    shown = json.loads(ok(sched(viewer, "-n", a, "job", "show", "web", "--json")).stdout)
    assert [h["by"] for h in shown["history"]] == [user] * 3
    refused(sched(url, "-n", a, "quota", "set", a, "--cpu", "1"), "may not make that change")
    assert watcher.store.read_history() == []
    for name in (user, f"{prefix}-view"):
        ok(sched(admin, "acl", "rm", name))


def test_without_acl_users_the_default_user_acts(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8Gi")
    sched("job", "submit", "-", input=WEB)
    sched("job", "scale", "web", "1")
    sched("node", "pause", "n1")
    sched("node", "drain", "n1")
    sched("node", "activate", "n1")
    sched("quota", "set", app.keys.namespace, "--cpu", "10", "--memory", "8Gi")
    sched("tenant", "set", "team", "--weight", "0.5")

    shown = sched("job", "show", "web").stdout
    history = shown[shown.index("history:"):].splitlines()
    assert len(history) == 3
    assert history[1].endswith("submit by default: version=1 change=create tasks=2")
    assert history[2].endswith("scale by default: replicas=1 added=0 stopped=1")

    node = json.loads(sched("node", "history", "n1", "--json").stdout)
    assert [(h["action"], h["by"], h["details"]["before"]) for h in node] == [
        ("pause", "default", "active"), ("drain", "default", "pause"), ("activate", "default", "drain")]
    assert node[1]["details"] == {"before": "pause", "stopped": 0, "replacements": 0}
    namespace = json.loads(sched("quota", "history", app.keys.namespace, "--json").stdout)
    assert [(h["action"], h["by"], h["details"]) for h in namespace] == [
        ("quota-set", "default", {"quota": "cpu=10,memory=8Gi"}),
        ("tenant-set", "default", {"tenant": "team", "weight": "0.5"})]
    unknown = sched("node", "history", "n9", ok=False)
    assert unknown.exit_code != 0 and "does not exist" in unknown.stderr


def test_a_client_records_the_actor_it_acts_for(app):
    client = Client(app=app, actor="deploy-bot")
    client.submit({"id": "api", "replicas": 1, "resources": {"cpu": 0.1, "memory": "64Mi"}})
    client.revert("api", 1)
    assert [(h["action"], h["by"]) for h in client.audit_trail(job="api")] == [
        ("submit", "deploy-bot"), ("revert", "deploy-bot")]
    assert client.audit_trail(job="api")[1]["details"] == {"version": 1, "change": "none", "tasks": 0, "to": 1}
    assert Client(app=app).by == "default"


def test_a_dashboard_operators_drain_is_recorded_as_the_operator(app, people):
    cluster(app)
    ns = app.keys.namespace
    operator = people["operator"]
    with app.store.subscribe() as subscription, \
            TestClient(create_app(app, auth=AuthSettings(sign_in=True))) as web:
        csrf = sign_in(web, operator, OPERATOR_PASSWORD)
        response = web.post(f"/api/nodes/n1/availability?ns={ns}", data={"availability": "drain", "csrf": csrf},
                            headers=JSON_HEADERS)
        assert response.status_code == 200, response.text
        events = audit_events(subscription)
        shown = web.get(f"/api/nodes/n1?ns={ns}", headers=JSON_HEADERS).json()
        page = web.get(f"/nodes/n1?ns={ns}").text
    assert [(e["action"], e["node"], e["by"]) for e in events] == [("drain", "n1", f"ui:{operator}")]
    assert events[0]["stopped"] == len(response.json()["moved"]) > 0
    assert shown["history"][0]["by"] == f"ui:{operator}" and shown["history"][0]["action"] == "drain"
    assert f"ui:{operator}" in page and "who did what" in page


def test_a_history_keeps_its_newest_entries(app):
    store = app.store
    written = store.record_history([Record("scale", "default", job="web", details={"replicas": n})
                                    for n in range(HISTORY_KEEP + 5)])
    assert written == HISTORY_KEEP + 5
    kept = store.read_history(job="web")
    assert len(kept) == HISTORY_KEEP
    assert [h["details"]["replicas"] for h in kept] == list(range(5, HISTORY_KEEP + 5))


def test_a_submit_is_recorded_by_the_call_that_makes_it(app):
    """A submit that creates tasks writes its record in the same script call (one job, or
    many in bulk): entries and events shaped as history.lua writes them, timed as the job's
    creation, a history still bounded; resending a bulk call records nothing twice."""
    client = Client(app=app, actor="deploy-bot")
    calls = lambda: app.client.info("commandstats")["cmdstat_evalsha"]["calls"]
    store = app.store
    app.scripts.load_all()  # so that each call below is one EVALSHA
    store.record_history([Record("scale", "default", job="one", details={"replicas": n})
                          for n in range(HISTORY_KEEP)])
    with store.subscribe() as subscription:
        before = calls()
        client.submit({"id": "one", "replicas": 2})
        assert calls() == before + 1  # enqueue.lua alone
        client.submit_many([{"id": f"many{i}", "replicas": 1} for i in range(3)])
        assert calls() == before + 2  # one enqueue_many.lua call
        events = audit_events(subscription)
    assert [(e["job"], e["by"]) for e in events] == [("one", "deploy-bot")] + [(f"many{i}", "deploy-bot")
                                                                              for i in range(3)]
    for event in events:
        assert list(event) == ["type", "action", "job", "by", "version", "change", "tasks", "ts"]
        assert (event["action"], event["version"], event["change"]) == ("submit", 1, "create")
        entry = store.read_history(job=event["job"])[-1]
        assert entry == {"ts": event["ts"], "action": "submit", "by": "deploy-bot",
                         "details": {"version": 1, "change": "create", "tasks": event["tasks"]}}
        assert entry["ts"] == client.job(event["job"])["created"]
    assert events[0]["tasks"] == 2 and events[1]["tasks"] == 1
    kept = store.read_history(job="one")
    assert len(kept) == HISTORY_KEEP and kept[0]["details"] == {"replicas": 1}

    spec = parse_job({"id": "many0", "replicas": 1})
    assert store.enqueue_many([("many0", spec)], by="deploy-bot") == [False]  # as a resent call
    assert len(store.read_history(job="many0")) == 1

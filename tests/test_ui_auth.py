"""Signing in to the dashboard (`sched ui` with users): every route needs a session,
viewers look and operators act, every action carries the session's CSRF token, failed
sign-ins are limited, signing out ends the session, /metrics takes a bearer token; then
the same in a real headless browser (slow). Against the suite's real redis-server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from scheduler.model import make_node
from scheduler.state.app import App
from scheduler.state.dashboard_users import FAILED_PREFIX, SESSION_PREFIX, DashboardUsers
from scheduler.tools.cli import main
from scheduler.tools.ui import passwords
from scheduler.tools.ui.app import create_app
from scheduler.tools.ui.auth import COOKIE, MAX_FAILED, AuthSettings
from scheduler.tools.web import Background

from test_ui import CHROMIUM, CHROMIUM_ARGS, ORIGIN, cluster, snapshot

OPERATOR_PASSWORD = "operator-Pa55word"
VIEWER_PASSWORD = "viewer-Pa55word"
JSON_HEADERS = {"Origin": ORIGIN, "Accept": "application/json"}


@pytest.fixture
def people(app):
    """An operator and a viewer of the dashboard (unique names, removed afterwards)."""
    tag = uuid.uuid4().hex[:8]
    users = DashboardUsers(app.client)
    names = {"operator": f"op-{tag}", "viewer": f"vi-{tag}"}
    users.put(names["operator"], "operator", passwords.hash_password(OPERATOR_PASSWORD))
    users.put(names["viewer"], "viewer", passwords.hash_password(VIEWER_PASSWORD))
    yield names
    for name in names.values():
        users.remove(name)
    # Keys with a TTL would change under other tests' snapshots of the whole server.
    for key in app.client.scan_iter(match=SESSION_PREFIX + "*", count=1000):
        if (app.client.get(key) or "").split("|")[0] in names.values():
            app.client.delete(key)
    for key in app.client.scan_iter(match=FAILED_PREFIX + "*", count=1000):
        app.client.delete(key)


@pytest.fixture
def web(app):
    with TestClient(create_app(app, auth=AuthSettings(sign_in=True, metrics_token="scrape-T0ken"))) as client:
        yield client


def sign_in(web, name: str, password: str) -> str:
    response = web.post("/signin", json={"user": name, "password": password}, headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    return response.json()["csrf"]


def with_cookie(web, path: str, cookie: str):
    """GET ``path`` with this session cookie only."""
    return web.get(path, headers={"Cookie": f"{COOKIE}={cookie}"})


def act(web, path: str, fields: dict, csrf: str | None = None):
    data = dict(fields, csrf=csrf) if csrf is not None else fields
    return web.post(path, data=data, headers=JSON_HEADERS)


# ----------------------------------------------------------------------------- routes
def test_every_route_but_sign_in_and_static_files_needs_a_session(app, web, people):
    ns = app.keys.namespace
    response = web.get(f"/jobs?ns={ns}", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/signin?next=%2Fjobs%3Fns%3D{ns}"
    for path in ("/api/overview", "/api/nodes", "/api/events", "/api/namespaces"):
        response = web.get(f"{path}?ns={ns}")
        assert response.status_code == 401 and response.json() == {"error": "sign in first (POST /signin)."}
    assert act(web, f"/api/jobs/web/stop?ns={ns}", {}).status_code == 401
    assert web.get("/static/dashboard.css").status_code == 200
    page = web.get("/signin?next=/jobs")
    assert page.status_code == 200 and 'name="password"' in page.text and 'value="/jobs"' in page.text
    assert web.get("/metrics").status_code == 401

    # A cookie that was not signed here, or was altered, is no session.
    sign_in(web, people["operator"], OPERATOR_PASSWORD)
    good = web.cookies[COOKIE]
    web.cookies.clear()
    session, mac = good.rsplit(".", 1)
    for forged in (f"{session}.{'A' * len(mac)}", f"x{session}.{mac}", session, ""):
        assert with_cookie(web, f"/api/nodes?ns={ns}", forged).status_code == 401, forged
    assert with_cookie(web, f"/api/nodes?ns={ns}", good).status_code == 200


def test_an_operator_acts_with_the_csrf_token_and_a_viewer_only_looks(app, web, people, redis_url):
    cluster(app)
    ns = app.keys.namespace
    csrf = sign_in(web, people["viewer"], VIEWER_PASSWORD)
    page = web.get(f"/nodes?ns={ns}").text
    assert f'data-user="{people["viewer"]}"' in page and "Sign out" in page and 'data-role="viewer"' in page
    before = snapshot(redis_url, ns)
    for path, fields in ((f"/api/nodes/n1/availability?ns={ns}", {"availability": "drain"}),
                         (f"/api/jobs/web/scale?ns={ns}", {"replicas": "1"}), (f"/api/jobs/web/stop?ns={ns}", {})):
        response = act(web, path, fields, csrf)
        assert response.status_code == 403
        assert response.json()["error"] == (f"{people['viewer']} is a viewer: only operators may drain, pause, "
                                            "activate, scale or stop.")
    assert snapshot(redis_url, ns) == before

    csrf = sign_in(web, people["operator"], OPERATOR_PASSWORD)
    for token in (None, "", "not-the-token", csrf[:-1] + ("A" if csrf[-1] != "A" else "B")):
        response = act(web, f"/api/nodes/n1/availability?ns={ns}", {"availability": "pause"}, token)
        assert response.status_code == 403 and "CSRF token" in response.json()["error"], token
    response = web.post(f"/api/nodes/n1/availability?ns={ns}", json={"availability": "pause", "csrf": "wrong"},
                        headers=JSON_HEADERS)
    assert response.status_code == 403
    assert snapshot(redis_url, ns) == before
    # The right token, in the form, in a JSON body, or in the header.
    assert act(web, f"/api/nodes/n1/availability?ns={ns}", {"availability": "pause"}, csrf).status_code == 200
    assert web.post(f"/api/jobs/web/scale?ns={ns}", json={"replicas": 2, "csrf": csrf},
                    headers=JSON_HEADERS).status_code == 200
    assert web.post(f"/api/jobs/web/stop?ns={ns}", headers={**JSON_HEADERS, "X-CSRF-Token": csrf}).status_code == 200
    assert app.store.get_node("n1").availability == "pause" and app.store.get_job("web")["status"] == "stopped"


def test_signing_out_ends_the_session(app, web, people):
    ns = app.keys.namespace
    csrf = sign_in(web, people["operator"], OPERATOR_PASSWORD)
    cookie = web.cookies[COOKIE]
    session = cookie.rsplit(".", 1)[0]
    assert app.client.ttl(SESSION_PREFIX + session) > 0
    assert web.post("/signout", data={}, headers=JSON_HEADERS).status_code == 403  # an action: it needs the token
    response = web.post("/signout", data={"csrf": csrf}, headers={"Origin": ORIGIN}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/signin"
    assert not app.client.exists(SESSION_PREFIX + session)
    web.cookies.clear()
    assert with_cookie(web, f"/api/nodes?ns={ns}", cookie).status_code == 401  # kept by someone: it opens nothing


def test_a_new_password_or_removing_the_user_ends_its_sessions(app, web, people):
    ns = app.keys.namespace
    users = DashboardUsers(app.client)
    sign_in(web, people["operator"], OPERATOR_PASSWORD)
    assert web.get(f"/api/nodes?ns={ns}").status_code == 200
    users.put(people["operator"], "operator", passwords.hash_password("another-Pa55word"))
    assert web.get(f"/api/nodes?ns={ns}").status_code == 401
    sign_in(web, people["viewer"], VIEWER_PASSWORD)
    users.remove(people["viewer"])
    assert web.get(f"/api/nodes?ns={ns}").status_code == 401


def test_failed_sign_ins_are_limited_per_user_and_per_address(app, web, people):
    name = people["operator"]
    for _ in range(MAX_FAILED["user"]):
        response = web.post("/signin", json={"user": name, "password": "wrong-password"}, headers=JSON_HEADERS)
        assert response.status_code == 401 and response.json() == {"error": "wrong user name or password."}
    response = web.post("/signin", json={"user": name, "password": OPERATOR_PASSWORD}, headers=JSON_HEADERS)
    assert response.status_code == 429
    assert response.json()["error"].startswith("too many failed sign-ins for this user; try again in 15 minutes")
    assert 0 < app.client.ttl(f"{FAILED_PREFIX}user:{name}") <= 15 * 60
    # The viewer may still sign in from here, until this address has failed too often.
    assert sign_in(web, people["viewer"], VIEWER_PASSWORD)
    for i in range(MAX_FAILED["address"] - MAX_FAILED["user"]):
        web.post("/signin", json={"user": f"nobody-{i}", "password": "wrong-password"}, headers=JSON_HEADERS)
    response = web.post("/signin", json={"user": people["viewer"], "password": VIEWER_PASSWORD}, headers=JSON_HEADERS)
    assert response.status_code == 429 and "for this address" in response.json()["error"]
    # An unknown user is answered as a wrong password is.
    DashboardUsers(app.client).forget_failures("address", "testclient")
    response = web.post("/signin", json={"user": "no-such-user", "password": "wrong-password"}, headers=JSON_HEADERS)
    assert response.json() == {"error": "wrong user name or password."}


def test_the_form_signs_in_and_goes_where_it_was_asked_only_on_this_site(app, web, people):
    ns = app.keys.namespace
    fields = {"user": people["viewer"], "password": VIEWER_PASSWORD}
    response = web.post("/signin", data={**fields, "next": f"/jobs?ns={ns}"}, headers={"Origin": ORIGIN},
                        follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/jobs?ns={ns}"
    set_cookie = response.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "path=/" in set_cookie
    response = web.post("/signin", data={**fields, "next": "//evil.example/"}, headers={"Origin": ORIGIN},
                        follow_redirects=False)
    assert response.headers["location"] == "/"
    wrong = web.post("/signin", data={**fields, "password": "not-it-at-all"}, headers={"Origin": ORIGIN})
    assert wrong.status_code == 401 and "wrong user name or password." in wrong.text
    # The same-origin check still comes first.
    assert web.post("/signin", data=fields, headers={"Origin": "http://evil.example"}).status_code == 403


def test_metrics_take_the_bearer_token(app, web):
    app.store.put_node(make_node("n1", cpu=1, memory="1GiB"))
    for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "scrape-T0ken"}):
        response = web.get("/metrics", headers=header)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    response = web.get("/metrics", headers={"Authorization": "Bearer scrape-T0ken"})
    assert response.status_code == 200 and f'namespace="{app.keys.namespace}"' in response.text
    # Without sign-in, the token still guards /metrics and nothing else.
    with TestClient(create_app(app, auth=AuthSettings(sign_in=False, metrics_token="scrape-T0ken"))) as open_web:
        assert open_web.get("/metrics").status_code == 401
        assert open_web.get(f"/api/nodes?ns={app.keys.namespace}").status_code == 200


def test_passwords_are_stored_as_salted_scrypt_hashes(app, people):
    users = DashboardUsers(app.client)
    stored = {name: users.get(name)["password"] for name in people.values()}
    raw = app.client.hgetall("sched:ui:users")
    assert OPERATOR_PASSWORD not in json.dumps(raw) and VIEWER_PASSWORD not in json.dumps(raw)
    assert all(value.startswith("scrypt$16384$8$1$") for value in stored.values())
    again = passwords.hash_password(OPERATOR_PASSWORD)
    assert again != stored[people["operator"]]  # a new salt each time
    assert passwords.verify(OPERATOR_PASSWORD, again) and passwords.verify(OPERATOR_PASSWORD,
                                                                           stored[people["operator"]])
    assert not passwords.verify(VIEWER_PASSWORD, stored[people["operator"]])


# ----------------------------------------------------------------------------- sched ui and sched ui user
def test_the_user_commands(own_redis):
    _, url = own_redis
    runner = CliRunner()

    def sched(*args, input=None):
        return runner.invoke(main, ["--redis-url", url, "ui", *args], input=input)

    assert sched("user", "add", "ann", "--role", "operator", "--password-stdin", input="short\n").exit_code == 2
    assert sched("user", "add", "bad name", "--role", "viewer", "--password-stdin",
                 input="long-enough-pw\n").exit_code == 2
    added = sched("user", "add", "ann", "--role", "operator", "--password-stdin", input="long-enough-pw\n")
    assert added.exit_code == 0 and added.stdout == "dashboard user ann added: operator\n"
    updated = sched("user", "add", "ann", "--role", "viewer", "--password-stdin", input="another-long-pw\n")
    assert updated.stdout == "dashboard user ann updated (its sessions ended): viewer\n"
    assert json.loads(sched("user", "ls", "--json").stdout)[0] | {"created": 0} == {"name": "ann", "role": "viewer",
                                                                                    "created": 0}
    assert "long-enough-pw" not in json.dumps(App(redis_url=url).client.hgetall("sched:ui:users"))
    assert sched("user", "rm", "ann").stdout == "dashboard user ann removed\n"
    missing = sched("user", "rm", "ann")
    assert missing.exit_code == 2 and missing.stderr == "Error: dashboard user 'ann' does not exist.\n"


def test_user_add_without_a_terminal_reads_the_password_from_stdin(own_redis):
    """`sched ui user add NAME` in a pipe or a script (a real process, stdin not a
    terminal): the password is the first line of stdin, with no prompt, no warning that it
    may be echoed and no bare "Aborted!"; none at all is one sentence."""
    _, url = own_redis
    command = [str(Path(sys.executable).parent / "sched"), "--redis-url", url, "ui", "user", "add", "bob"]
    added = subprocess.run(command, input="long-enough-pw\n", capture_output=True, text=True, timeout=60)
    assert (added.returncode, added.stdout, added.stderr) == (0, "dashboard user bob added: viewer\n", "")
    stored = json.loads(App(redis_url=url).client.hget("sched:ui:users", "bob"))
    assert stored["role"] == "viewer" and passwords.verify("long-enough-pw", stored["password"])
    nothing = subprocess.run(command, input="", capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 2 and nothing.stdout == ""
    assert nothing.stderr.startswith("Error: no password came on stdin for dashboard user bob")
    assert nothing.stderr.count("\n") == 1 and "Aborted" not in nothing.stderr and "Warning" not in nothing.stderr


def test_serving_a_network_address_without_sign_in_is_refused(own_redis):
    _, url = own_redis
    result = CliRunner().invoke(main, ["--redis-url", url, "ui", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert result.stderr == ("Error: sched ui will not serve 0.0.0.0 without sign-in: anyone who can reach it could "
                             "drain nodes and stop jobs; add a user with sched ui user add NAME --role operator, or "
                             "pass --no-auth.\n")


# ----------------------------------------------------------------------------- the browser
REFUSED = re.compile(r"Failed to load resource: the server responded with a status of 40[13] ")


@pytest.fixture
def auth_page():
    """A headless Chromium page, as test_ui's, whose console may show only the refusals
    this test asks for (401 and 403 answers), no other error and no CSP violation."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(10_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        yield page
        browser.close()
        assert [error for error in errors if not REFUSED.match(error)] == []
        assert len(errors) == 3  # the wrong password, the request without a token, the viewer's request


def browser_sign_in(page, url: str, name: str, password: str, next_path: str) -> None:
    page.goto(f"{url}{next_path}")
    assert page.url.startswith(f"{url}/signin?next=")
    page.fill("#user", name)
    page.fill("#password", password)
    page.click("form.signin button")
    page.wait_for_url(f"{url}{next_path}")


@pytest.mark.slow
def test_sign_in_act_and_sign_out_in_a_browser(app, people, auth_page):
    page = auth_page
    ns = app.keys.namespace
    cluster(app)
    with Background(app, auth=AuthSettings(sign_in=True)) as url:
        # A wrong password shows the sign-in form again, with one sentence.
        page.goto(f"{url}/nodes?ns={ns}")
        page.fill("#user", people["operator"])
        page.fill("#password", "not-the-password")
        page.click("form.signin button")
        page.wait_for_selector("text=wrong user name or password.")

        # An operator signs in, lands where it was going, and pauses a node from its form.
        browser_sign_in(page, url, people["operator"], OPERATOR_PASSWORD, f"/nodes?ns={ns}")
        page.wait_for_selector("body[data-live-state=connected]")
        assert page.text_content(f'[data-user="{people["operator"]}"]').strip() == f"{people['operator']} · operator"
        page.click('tr[data-node="n1"] form:has(input[value="pause"]) button')
        page.wait_for_selector('tr[data-node="n1"] [data-field="availability"]:text("pause")')
        assert app.store.get_node("n1").availability == "pause"

        # A request without the page's CSRF token is refused, and changes nothing.
        status = page.evaluate("""async (path) => (await fetch(path, {method: 'POST',
            headers: {'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json'},
            body: 'availability=active'})).status""", f"/api/nodes/n1/availability?ns={ns}")
        assert status == 403 and app.store.get_node("n1").availability == "pause"

        # Signing out goes to the sign-in form; the pages need signing in again.
        page.click(".who button")
        page.wait_for_url(f"{url}/signin")
        page.goto(f"{url}/nodes?ns={ns}")
        assert page.url.startswith(f"{url}/signin?next=")

        # A viewer sees no action forms, and the server refuses it one all the same.
        browser_sign_in(page, url, people["viewer"], VIEWER_PASSWORD, f"/nodes?ns={ns}")
        assert page.text_content(f'[data-user="{people["viewer"]}"]').strip() == f"{people['viewer']} · viewer"
        assert not page.is_visible('tr[data-node="n1"] form:has(input[value="active"]) button')
        answer = page.evaluate("""async (path) => {
            const csrf = document.querySelector('meta[name="csrf-token"]').content;
            const response = await fetch(path, {method: 'POST', headers: {Accept: 'application/json',
                'Content-Type': 'application/x-www-form-urlencoded'},
                body: new URLSearchParams({availability: 'active', csrf})});
            return [response.status, (await response.json()).error]; }""", f"/api/nodes/n1/availability?ns={ns}")
        assert answer == [403, f"{people['viewer']} is a viewer: only operators may drain, pause, activate, scale "
                               "or stop."]
        assert app.store.get_node("n1").availability == "pause"

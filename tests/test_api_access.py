"""Who may call the HTTP API, against the suite's real redis-server: tokens (made once,
stored as a hash, scoped to a namespace and a role, revoked, expiring, refused past a
number of failures from an address), the audit trail under the token's name, and
without tokens only programs and same-site pages; ``sched api`` and ``sched ui`` serving
the API, with or without tokens."""

from __future__ import annotations

import time

import orjson
from starlette.testclient import TestClient

from scheduler.state.api_tokens import FAILED_PREFIX, TOKEN_PREFIX, TOKENS, ApiTokens, digest
from scheduler.tools.api.access import MAX_FAILED
from scheduler.tools.api.app import create_api
from scheduler.tools.web import Background

from test_ui import snapshot
from api_harness import http, tokens  # noqa: F401 (fixtures)
from api_harness import Api, SPEC


def test_token_create_prints_the_token_last_and_stores_only_its_hash(app, sched, http):
    made = sched("token", "create", "ci-bot", "--namespace", app.keys.namespace, "--role", "submitter")
    token = made.stdout.split()[-1]
    try:
        assert token.startswith("sched_") and len(token) > 40
        everything = b"".join(app.client.dump(key) or b"" for key in app.client.scan_iter(match="sched:api:*"))
        assert token.encode() not in everything  # only its SHA-256 is kept
        api = Api(http, token)
        assert api("GET", "/v1/token").json() == {"name": "ci-bot", "namespace": app.keys.namespace,
                                                  "role": "submitter"}
        listed = orjson.loads(sched("token", "ls", "--json").stdout)
        assert {"name": "ci-bot", "namespace": app.keys.namespace, "role": "submitter"}.items() <= \
            next(r for r in listed if r["name"] == "ci-bot").items()
        again = sched("token", "create", "ci-bot", "--namespace", app.keys.namespace, "--role", "viewer", ok=False)
        assert again.exit_code == 2 and "a token named ci-bot exists" in again.stderr
        sched("token", "revoke", "ci-bot")
        refused = api("GET", "/v1/token")
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert "ci-bot" not in sched("token", "ls").stdout
    finally:
        sched("token", "revoke", "ci-bot", ok=False)
        for key in app.client.scan_iter(match=FAILED_PREFIX + "*"):
            app.client.delete(key)


def test_token_create_refuses_bad_input_and_writes_nothing(app, sched):
    before = app.client.hgetall(TOKENS)
    for args, said in ((("bad name", "--namespace", "a", "--role", "viewer"), "token name 'bad name' is not valid"),
                       (("x", "--role", "viewer"), "give --namespace NS or --all-namespaces"),
                       (("x", "--namespace", "a", "-A", "--role", "viewer"), "give --namespace NS or"),
                       (("x", "--namespace", "a:b", "--role", "viewer"), "namespace 'a:b' is not valid"),
                       (("x", "--namespace", "a", "--role", "viewer", "--ttl", "soon"), "--ttl 'soon' is not"),
                       (("x", "--namespace", "a", "--role", "admin"), "'admin' is not one of")):
        result = sched("token", "create", *args, ok=False)
        assert result.exit_code == 2 and said in result.stderr, (args, result.stderr)
    assert app.client.hgetall(TOKENS) == before


def test_a_token_expires_after_its_ttl(app, http, tokens):
    token = tokens("viewer", ttl_s=1)
    api = Api(http, token)
    assert api("GET", "/v1/nodes").status_code == 200
    assert 0 < app.client.ttl(TOKEN_PREFIX + digest(token)) <= 1
    deadline = time.monotonic() + 10
    while api("GET", "/v1/nodes").status_code == 200:
        assert time.monotonic() < deadline, "the token did not expire"
        time.sleep(0.2)
    assert api("GET", "/v1/nodes").status_code == 401
    assert tokens.names[-1] not in [r["name"] for r in ApiTokens(app.client).records()]


def test_roles_and_namespaces_are_enforced_and_refusals_write_nothing(app, http, tokens, redis_url):
    ns = app.keys.namespace
    viewer, submitter, other = Api(http, tokens("viewer")), Api(http, tokens("submitter")), \
        Api(http, tokens("operator", namespace="elsewhere"))
    operator = Api(http, tokens("operator"))
    operator("PUT", "/v1/nodes/n1", json={"cpu": 4, "memory": "8GiB"})
    submitter("POST", "/v1/jobs", json=SPEC)
    before = snapshot(redis_url, ns)
    refusals = [(viewer, "POST", "/v1/jobs", {"json": {**SPEC, "id": "more"}}, "may not POST /v1/jobs: that takes a "
                                                                                "submitter's token"),
                (viewer, "POST", "/v1/jobs/web/stop", {}, "a viewer of namespace"),
                (submitter, "POST", "/v1/nodes/n1/drain", {}, "that takes an operator's token"),
                (submitter, "PUT", "/v1/tenants/t", {"json": {"weight": 1}}, "an operator's token"),
                (submitter, "POST", "/v1/gc", {}, "an operator's token"),
                (viewer, "PUT", "/v1/config", {"json": {"job_retention": 0}}, "an operator's token"),
                (submitter, "POST", "/v1/layout/upgrade", {}, "an operator's token"),
                (viewer, "POST", "/v1/snapshot",
                 {"content": b"{}\n", "headers": {"content-type": "application/x-ndjson"}}, "an operator's token"),
                (operator, "PUT", "/v1/quota", {"json": {"cpu": 1}}, "a token of every namespace"),
                (operator, "GET", "/v1/quotas", {}, "a token of every namespace"),
                (other, "GET", f"/v1/jobs?namespace={ns}", {}, f"may not reach namespace {ns}"),
                (other, "POST", f"/v1/jobs/web/stop?namespace={ns}", {}, f"may not reach namespace {ns}")]
    for api, method, path, options, said in refusals:
        response = api(method, path, **options)
        assert response.status_code == 403 and said in response.json()["detail"], (path, response.text)
    assert snapshot(redis_url, ns) == before
    assert other("GET", "/v1/jobs").json() == []  # its own namespace, by default
    assert viewer("POST", "/v1/jobs/plan", json=SPEC).status_code == 200  # a dry run is a read


def test_actions_are_recorded_under_the_token_name(app, http, tokens):
    api = Api(http, tokens("operator"))
    name = tokens.names[-1]
    api("PUT", "/v1/nodes/n1", json={"cpu": 4, "memory": "8GiB"})
    api("POST", "/v1/jobs", json=SPEC)
    api("POST", "/v1/jobs/web/scale", json={"replicas": 1})
    api("POST", "/v1/nodes/n1/pause")
    trail = app.store.read_history(job="web")
    assert [(e["action"], e["by"]) for e in trail] == [("submit", f"token:{name}"), ("scale", f"token:{name}")]
    assert [(e["action"], e["by"]) for e in app.store.read_history(node="n1")] == [("pause", f"token:{name}")]


def test_failures_from_an_address_are_limited(app, http, tokens):
    good = tokens("viewer")
    api = Api(http)
    for i in range(MAX_FAILED):
        assert api("GET", "/v1/nodes", token=None if i % 2 else f"sched_wrong{i}").status_code == 401
    limited = api("GET", "/v1/nodes", token=good)
    assert limited.status_code == 429 and "too many requests" in limited.json()["detail"]
    assert 0 < int(limited.headers["retry-after"]) <= 15 * 60
    for key in app.client.scan_iter(match=FAILED_PREFIX + "*"):
        app.client.delete(key)
    assert api("GET", "/v1/nodes", token=good).status_code == 200


def test_without_auth_only_same_site_or_programs_may_act(app, tokens):
    with TestClient(create_api(app, auth=False)) as http:
        api = Api(http)
        assert api("GET", "/v1/token", token=None).json() == {"name": None, "namespace": "*", "role": "operator"}
        assert api("PUT", "/v1/nodes/n1", token=None, json={"cpu": 1, "memory": "1GiB"}).status_code == 201
        assert app.store.read_history(node="n1") == []  # registering is not an action with a history
        cross = api("POST", "/v1/nodes/n1/pause", token=None, headers={"origin": "http://evil.example"})
        assert cross.status_code == 403 and "cross-origin" in cross.json()["detail"]
        assert app.store.get_node("n1").availability == "active"
        assert api("POST", "/v1/nodes/n1/pause", token=None).json()["before"] == "active"
        assert app.store.read_history(node="n1")[0]["by"] == app.store.redis_user()


def test_sched_api_refuses_no_auth_on_a_network_address(sched):
    result = sched("api", "--host", "0.0.0.0", "--no-auth", ok=False)
    assert result.exit_code == 2
    assert "sched api will not serve 0.0.0.0 without tokens" in result.stderr


def test_sched_ui_serves_the_api_beside_the_dashboard(app, tokens):
    import httpx2 as httpx

    token = tokens("viewer")
    with Background(app) as url:
        with httpx.Client(base_url=url) as http:
            assert http.get("/").status_code == 200  # the dashboard, without sign-in on loopback
            assert http.get("/v1/nodes").status_code == 401  # the API, with tokens
            assert http.get("/v1/nodes", headers={"authorization": f"Bearer {token}"}).json() == []
    with Background(app, api_auth=False) as url:
        assert httpx.get(f"{url}/v1/token").json()["name"] is None


def test_the_lockout_counts_by_the_real_peer_whatever_it_forwards(app, tokens):
    """By default no forwarded header is believed: refused requests from 127.0.0.1 that
    each claim another X-Forwarded-For meet the lockout all the same, and a good token
    claiming another address is locked out with them. Behind a proxy named with
    --forwarded-allow-ips, the address it forwards is the one counted."""
    import httpx2 as httpx

    good = tokens("viewer")
    with Background(app) as url:
        for i in range(MAX_FAILED):
            refused = httpx.get(f"{url}/v1/nodes", headers={"x-forwarded-for": f"10.9.{i}.9"})
            assert refused.status_code == 401
        walked = httpx.get(f"{url}/v1/nodes", headers={"authorization": f"Bearer {good}",
                                                       "x-forwarded-for": "10.9.9.9"})
        assert walked.status_code == 429
    assert app.client.exists(FAILED_PREFIX + "127.0.0.1") and not app.client.exists(FAILED_PREFIX + "10.9.9.9")
    app.client.delete(FAILED_PREFIX + "127.0.0.1")
    with Background(app, forwarded_allow_ips="127.0.0.1") as url:
        for _ in range(MAX_FAILED):
            assert httpx.get(f"{url}/v1/nodes", headers={"x-forwarded-for": "10.9.9.9"}).status_code == 401
        assert httpx.get(f"{url}/v1/nodes", headers={"authorization": f"Bearer {good}",
                                                     "x-forwarded-for": "10.9.9.9"}).status_code == 429
        assert httpx.get(f"{url}/v1/nodes", headers={"authorization": f"Bearer {good}",
                                                     "x-forwarded-for": "10.8.8.8"}).status_code == 200
    assert not app.client.exists(FAILED_PREFIX + "127.0.0.1")


def test_sched_api_refuses_forwarded_allow_ips_that_are_no_addresses(sched):
    result = sched("api", "--forwarded-allow-ips", "proxy.local", ok=False)
    assert result.exit_code == 2 and "--forwarded-allow-ips 'proxy.local' is not an address" in result.stderr


# ----------------------------------------------------------------------------- pages and blocking queries

"""Calls to the HTTP API for its tests (tests/test_api.py, test_api_access.py): each
answer checked against the OpenAPI document (:class:`Api`), server-sent events read as
messages, and the fixtures ``http`` (a test client of the API) and ``tokens`` (made for
the test, revoked after it)."""

from __future__ import annotations

import re
import uuid

import orjson
import pytest
from jsonschema import Draft202012Validator
from starlette.testclient import TestClient

from scheduler.state.api_tokens import FAILED_PREFIX, ApiTokens
from scheduler.tools.api.app import DOCUMENT, create_api

SPEC = {"id": "web", "replicas": 2, "resources": {"cpu": 0.5, "memory": "256MiB"}}


class Api:
    """Requests to the API, each answer checked against the OpenAPI document: its status
    must be one its operation lists, its media type too, and its body must match the
    schema. ``covered``: the operations that answered a success so checked."""

    def __init__(self, http: TestClient, token: str | None = None):
        self.http, self.token = http, token
        self.document = orjson.loads(DOCUMENT)
        self.covered: set[str] = set()
        self.templates = [(re.compile("^" + re.sub(r"{\w+}", "[^/]+", path) + "$"), path)
                          for path in self.document["paths"]]

    def operation(self, method: str, path: str) -> dict | None:
        found = [template for pattern, template in self.templates
                 if pattern.match(path.split("?")[0]) and method.lower() in self.document["paths"][template]]
        found.sort(key=lambda template: template.count("{"))  # /v1/jobs/plan before /v1/jobs/{job_id}
        return self.document["paths"][found[0]][method.lower()] if found else None

    def check(self, method: str, path: str, response) -> None:
        media = response.headers.get("content-type", "").split(";")[0]
        operation = self.operation(method, path)
        if operation is None:  # no such route: a problem all the same
            assert response.status_code in (404, 405) and media == "application/problem+json", response.text
            return self.validate(response.json(), {"$ref": "#/components/schemas/Problem"})
        listed = operation["responses"].get(str(response.status_code))
        assert listed is not None, (f"{method} {path} answered {response.status_code}, which "
                                    f"{operation['operationId']} does not list: {response.text[:300]}")
        assert media in listed["content"], (method, path, response.status_code, media)
        if media in ("application/json", "application/problem+json"):
            self.validate(response.json(), listed["content"][media]["schema"])
        elif media != "text/event-stream":  # a file (a snapshot)
            self.validate(response.text, listed["content"][media]["schema"])
        if response.status_code < 300:
            self.covered.add(operation["operationId"])

    def validate(self, body, schema: dict) -> None:
        Draft202012Validator({**schema, "components": self.document["components"]}).validate(body)

    def __call__(self, method: str, path: str, token: str | None = "default", **options):
        headers = dict(options.pop("headers", {}))
        token = self.token if token == "default" else token
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        response = self.http.request(method, path, headers=headers, **options)
        self.check(method, path, response)
        return response

    def stream(self, path: str, messages: int, headers: dict | None = None) -> list[dict]:
        """The first ``messages`` messages of a stream of server-sent events."""
        headers = {"authorization": f"Bearer {self.token}", **(headers or {})}
        lines = []
        with self.http.stream("GET", path, headers=headers) as response:
            self.check("GET", path, response)
            for line in response.iter_lines():
                lines.append(line)
                if not line and len(sse_messages(lines)) >= messages:
                    break
        return sse_messages(lines)


def sse_messages(lines: list[str]) -> list[dict]:
    """Messages of a stream's lines: {id, event, data}, comments left out."""
    messages, current = [], {}
    for line in lines:
        if not line:
            if current:
                messages.append(current)
            current = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            current[field] = orjson.loads(value) if field == "data" else value
    return messages


@pytest.fixture
def tokens(app):
    """make(role, namespace=the test's, every=False) -> a token; all revoked afterwards."""
    store, made = ApiTokens(app.client), []

    def make(role: str, namespace: str | None = None, every: bool = False, ttl_s: int | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        made.append(name)
        return store.create(name, "*" if every else namespace or app.keys.namespace, role, ttl_s)["token"]

    make.names = made
    yield make
    for name in made:
        try:
            store.revoke(name)
        except Exception:
            pass
    for key in app.client.scan_iter(match=FAILED_PREFIX + "*", count=1000):
        app.client.delete(key)


@pytest.fixture
def http(app):
    with TestClient(create_api(app)) as client:
        yield client

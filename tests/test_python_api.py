"""The examples of docs/python-api.md, run in order against the test Redis, and the
API's own promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler import Client, NotFound, SpecError, WaitTimeout
from scheduler.state.app import App

DOC = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"


def examples() -> list[tuple[int, str]]:
    """The python blocks of the doc, each with the line it starts on."""
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def run_example(line: int, block: str, scope: dict) -> None:
    # Padded to its place in the doc, so that a traceback names docs/python-api.md and the line.
    exec(compile("\n" * line + block, str(DOC), "exec"), scope)


def tour_namespace() -> str:
    """The namespace the examples name: their own, not the README walk-through's."""
    names = set(re.findall(r'Client\(namespace="([^"]+)"\)', DOC.read_text()))
    assert len(names) == 1 and names != {"default"}, names
    return names.pop()


@pytest.fixture
def tour(redis_url, monkeypatch):
    monkeypatch.setenv("SCHED_REDIS_URL", redis_url)
    monkeypatch.delenv("SCHED_NAMESPACE", raising=False)
    namespace = App(redis_url=redis_url, namespace=tour_namespace())
    copy = App(client=namespace.client, namespace=tour_namespace() + "-copy")  # the snapshot example's
    for app in (namespace, copy):
        app.store.clear_namespace()
    yield namespace
    for app in (namespace, copy):
        app.store.clear_namespace()
    namespace.client.close()


def test_the_documented_examples_run(tour):
    blocks = examples()
    assert len(blocks) >= 4
    scope: dict = {}
    for line, block in blocks:
        run_example(line, block, scope)
    ids = {job["id"] for job in Client(namespace=tour.keys.namespace).jobs()}
    launches = {job_id for job_id in ids if "/" in job_id}
    assert ids - launches == {"api", "cache", "db", "etl", "feed", "train", "web", "nightly", "render", "report"}
    assert sorted(job_id.split("/")[0] for job_id in launches) == ["nightly", "render"]


def test_the_examples_run_again_say_why_they_stop(tour):
    """Run a second time in the same namespace, the first example stops with a sentence that
    names the namespace and what to do, not with a bare AssertionError."""
    line, first = examples()[0]
    run_example(line, first, {})
    with pytest.raises(AssertionError, match=f"namespace {tour.keys.namespace} already has a job web") as failure:
        run_example(line, first, {})
    assert failure.traceback[-1].path == DOC and failure.traceback[-1].lineno + 1 > line


def test_bad_input_is_refused_before_anything_is_written(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    with pytest.raises(SpecError, match="document 2"):
        client.submit_many([{"id": "ok"}, "replicas: [1"])
    assert client.jobs() == []
    with pytest.raises(NotFound):
        client.task("nothing.0")
    with pytest.raises(SpecError):
        client.tasks(state="sleeping")


def test_wait_gives_up_with_one_sentence(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    client.submit({"id": "idle", "replicas": 1})
    with pytest.raises(WaitTimeout, match=r"job idle: 0 of 1 task\(s\) running after 0.3 s"):
        client.wait("idle", "running", timeout=0.3)

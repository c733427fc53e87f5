"""The examples of docs/python-api.md, run in order against the test Redis, and the
API's own promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler import Client, NotFound, SpecError, WaitTimeout

DOC = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_examples_run(redis_url, namespace, monkeypatch, app):
    monkeypatch.setenv("SCHED_REDIS_URL", redis_url)
    monkeypatch.setenv("SCHED_NAMESPACE", namespace)
    blocks = examples()
    assert len(blocks) >= 4
    scope: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)


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

"""Key layout versions: a namespace records its layout; a process refuses to write to a
namespace of another layout, in one sentence naming it and the command that fixes it;
``sched upgrade`` moves a namespace written by the sched before layouts were recorded
(the fixture tests/fixtures/layout1.jsonl, made by scripts/layout_fixture.py with that
version) forward in place, idempotently, and work then runs on it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler import Client
from scheduler.control import reconcile, retention
from scheduler.control.audit import audit
from scheduler.model.retention import Retention
from scheduler.state.app import App
from scheduler.state.layout import CURRENT, STEPS, LayoutError
from scheduler.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "layout1.jsonl"


def _fixture_module():
    spec = importlib.util.spec_from_file_location("layout_fixture", ROOT / "scripts" / "layout_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def old(app, redis_url, namespace) -> Client:
    """The fixture's keys in the test's namespace, and a client of a process started after."""
    fixture = _fixture_module()
    fixture.load(app.client, fixture.read(FIXTURE), namespace)
    return Client(app=App(redis_url=redis_url, namespace=namespace))


def _indexes(client: Client) -> dict:
    k, r = client.app.keys, client.app.client
    return {"finished": sorted(r.zrange(k.jobs_finished, 0, -1)), "ended": sorted(r.zrange(k.jobs_ended, 0, -1)),
            "counted": {job: sorted(r.zrange(k.job_ended(job), 0, -1, withscores=True))
                        for job in sorted(r.smembers(k.jobs))}}


def test_an_empty_namespace_gets_the_current_layout_at_its_first_write(app):
    client = Client(app=app)
    assert client.layout() == 0
    client.add_node("n1", cpu=1, memory="1GiB")
    assert client.layout() == CURRENT == int(app.client.get(app.keys.layout))


def test_a_newer_layout_is_refused_in_one_sentence(app, sched, redis_url, namespace):
    app.client.set(app.keys.layout, CURRENT + 1)
    client = Client(app=App(redis_url=redis_url, namespace=namespace))
    with pytest.raises(LayoutError) as refused:
        client.submit({"id": "web"})
    text = str(refused.value)
    assert f"layout {CURRENT + 1}, newer than this sched knows ({CURRENT})" in text and "pip install" in text
    assert not app.client.exists(app.keys.job("web"))  # nothing half-written
    result = sched("node", "add", "n1", "--cpu", "1", "--memory", "1GiB", ok=False)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "newer than this sched" in result.stderr
    assert "newer than this sched" in sched("upgrade", ok=False).stderr
    worker = sched("worker", "--until-idle", ok=False)
    assert worker.exit_code == 2 and "newer than this sched" in worker.stderr and "Traceback" not in worker.output


def test_the_old_layout_is_refused_until_sched_upgrade(old, sched, namespace, redis_url):
    assert old.layout() == 1
    with pytest.raises(LayoutError, match=rf"layout 1, older than this sched's \({CURRENT}\); run `sched -n {namespace} upgrade`") as refused:
        old.submit({"id": "new"})
    assert not old.app.client.exists(old.app.keys.job("new"))
    # The command the sentence names, word for word (the fixture adds only the Redis URL).
    command = re.search(r"`sched (.+?)`", str(refused.value)).group(1).split()
    result = CliRunner().invoke(main, ["--redis-url", redis_url, *command])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().startswith(f"namespace {namespace}: key layout 1 -> {CURRENT}")
    assert old.layout() == CURRENT
    assert "already" in sched("upgrade").stdout


def test_upgrade_indexes_the_old_namespace_then_work_runs_on_it(old):
    before = audit(old.store)
    assert before.ok, before.problems
    done = old.upgrade()
    assert (done["from"], done["to"]) == (1, CURRENT)
    assert done["steps"][2] == {"jobs": 5, "ended_tasks": 8}
    indexes = _indexes(old)
    # done (3 completed), flaky (2 failed, retries spent) and old (stopped) finished; web
    # has ended tasks (one crashed, one stopped by the rolling deployment); huge is pending.
    assert indexes["finished"] == ["done", "flaky", "old"]
    assert indexes["ended"] == ["web"]
    assert [score for _, score in indexes["counted"]["done"]] == [float("inf")] * 3
    assert old.app.client.hget(old.app.keys.task("web.0"), "replaced_by") == "web.2"
    finished_at = int(old.app.client.hget(old.app.keys.job("done"), "finished_at"))
    ends = [t.ended_ms for t in old.tasks(job="done")]
    assert finished_at == max(ends)  # the job's own finish, not the upgrade's time

    # Idempotent: the step again, and the command again, change nothing.
    STEPS[2](old.store)
    assert _indexes(old) == indexes
    assert old.upgrade()["steps"] == {}

    # Work runs on it: new jobs are placed and end, the old finished ones go, the live stay.
    # (The fixture's jobs finished when it was made: a long job_retention keeps the workers'
    # own retention from removing them first, whatever the day the test runs.)
    old.set_config(job_retention=10 * 365 * 86_400)
    old.add_node("n3", cpu=4, memory="8GiB")
    old.submit({"id": "fresh", "type": "batch", "replicas": 2})
    old.run_workers(until_idle=True)
    for task in old.tasks(job="fresh"):
        reconcile.task_ended(old.store, task, True, "ok")
    swept = retention.collect(old.store, retention=Retention(job_retention=0, task_retention=0))
    assert sorted(swept.jobs_removed) == ["done", "flaky", "fresh", "old"]
    assert sorted(old.store.job_ids()) == ["huge", "web"]
    assert {t.id for t in old.tasks(job="web") if not t.terminal} == {"web.1", "web.3"}
    after = audit(old.store)
    assert after.ok, after.problems


def test_the_fixture_is_a_namespace_of_layout_1():
    """Every kind of key, and no layout recorded (scripts/layout_fixture.py remakes it)."""
    fixture = _fixture_module()
    lines = fixture.read(FIXTURE)
    assert {line["type"] for line in lines} >= {"hash", "zset", "set", "list", "string", "stream"}
    assert not any(line["key"].endswith(":layout") for line in lines)  # layout 1: none recorded

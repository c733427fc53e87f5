"""Dependencies between jobs (``after``): tasks wait in ``q:waiting`` with a reason
``task explain`` names, run once their dependencies hold (a chain and a diamond, in order,
on real agents), and fail when one can no longer hold; unknown jobs and cycles are refused
at submit; the audit knows the waiting set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler import Client
from scheduler.control.audit import audit, repair
from scheduler.model import SpecError, make_node
from agent_cluster import cluster  # noqa: F401 (the fixture)
from worker_harness import run_worker_until_idle


def _end_live(client: Client, job: str, ok: bool = True) -> None:
    from scheduler.control import reconcile

    for task in client.tasks(job=job):
        if task.live:
            reconcile.task_ended(client.store, task, ok, "done" if ok else "exited with code 1")


def test_tasks_wait_say_why_and_go_once_their_dependency_completes(app):
    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="4GiB")
    client.submit({"id": "extract", "type": "batch", "replicas": 2})
    client.submit({"id": "load", "type": "batch", "replicas": 3, "after": [{"job": "extract", "state": "complete"}]})
    run_worker_until_idle(app)
    assert [t.state for t in client.tasks(job="load")] == ["pending"] * 3
    assert client.queue_counts()["waiting"] == 3
    why = client.explain("load.0")
    assert why["queue"] == "waiting" and why["message"] == "waiting for job extract to complete."
    assert client.job("load")["waiting_for"] == ["waiting for job extract to complete"]
    assert audit(app.store).ok
    _end_live(client, "extract")
    run_worker_until_idle(app)
    assert sorted(t.state for t in client.tasks(job="load")) == ["assigned"] * 3
    assert client.queue_counts()["waiting"] == 0 and "waiting_for" not in client.job("load")
    assert audit(app.store).ok


def test_retention_keeps_a_job_while_another_waits_for_it(app):
    """A job that another waits for is held (job:<id>:holds) until the waiting job is let go."""
    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="4GiB")
    client.submit({"id": "extract", "type": "batch"})
    client.submit({"id": "load", "type": "batch", "after": ["extract"]})
    assert app.client.smembers(app.keys.job_holds("extract")) == {"load"}
    run_worker_until_idle(app)
    _end_live(client, "extract")
    run_worker_until_idle(app)
    assert app.client.smembers(app.keys.job_holds("extract")) == set()


def test_a_waiting_job_stopped_and_removed_lets_go_of_what_it_waited_for(app):
    """A job stopped while it waits is removed by retention only once the upkeep has let go
    of its hold on what it waited for: that job is then removed in turn once it finishes,
    instead of being kept for ever by a job that no longer exists."""
    from scheduler.control.retention import collect
    from scheduler.model.retention import Retention

    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="4GiB")
    client.submit({"id": "extract"})
    client.submit({"id": "load", "type": "batch", "after": ["extract"]})
    client.stop("load")

    def gc(later_s: int) -> list[str]:
        return collect(app.store, now_ms=app.store.now_ms() + later_s * 1000,
                       retention=Retention(job_retention=0)).jobs_removed

    assert gc(1) == []  # still listed as waiting: the upkeep has not let go of extract yet
    run_worker_until_idle(app)
    assert app.client.smembers(app.keys.job_holds("extract")) == set()
    assert gc(61) == ["load"]  # kept ones are looked at again a minute later
    client.stop("extract")
    assert gc(62) == ["extract"]
    assert app.client.keys(f"{app.keys.prefix}job:*") == []


def test_a_failed_dependency_fails_its_dependants_down_the_chain(app):
    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="4GiB")
    client.submit({"id": "a", "type": "batch", "max_retries": 0})
    client.submit({"id": "b", "type": "batch", "after": ["a"]})
    client.submit({"id": "c", "type": "batch", "after": [{"job": "b", "state": "complete"}]})
    client.submit({"id": "cleanup", "type": "batch", "after": [{"job": "a", "state": "failed"}]})
    client.submit({"id": "report", "type": "batch", "after": [{"job": "a", "state": "ended"}]})
    run_worker_until_idle(app)
    _end_live(client, "a", ok=False)
    run_worker_until_idle(app)
    run_worker_until_idle(app)  # b failed in the first round; c follows in the next
    assert client.job("a")["status"] == "failed"
    for job in ("b", "c"):
        record = client.job(job)
        assert record["status"] == "failed", record
        [task] = client.tasks(job=job)
        assert task.state == "failed" and "can never hold" in task.message
    assert client.job("b")["failure"].startswith("job a failed, so the dependency on it (complete) can never hold")
    assert client.job("c")["failure"].startswith("job b failed")
    assert [t.state for t in client.tasks(job="cleanup")] == ["assigned"]  # it waited for a failure
    assert [t.state for t in client.tasks(job="report")] == ["assigned"]
    assert client.queue_counts()["waiting"] == 0 and audit(app.store).ok


def test_a_stopped_dependency_fails_the_waiting_job_but_ended_holds(app):
    client = Client(app=app)
    client.submit({"id": "svc"})
    client.submit({"id": "after-complete", "type": "batch", "after": ["svc"]})
    client.submit({"id": "after-end", "type": "batch", "after": [{"job": "svc", "state": "ended"}]})
    client.stop("svc")
    run_worker_until_idle(app)
    assert client.job("after-complete")["failure"].startswith("job svc was stopped")
    assert client.store.is_waiting("after-end.0") is False and client.job("after-end")["status"] == "running"


@pytest.mark.parametrize("spec, words", [
    ({"id": "x", "type": "batch", "after": ["nope"]}, "job x: after names job nope, which does not exist; submit it first."),
    ({"id": "x", "type": "batch", "after": ["x"]}, "job x: after names the job itself"),
    ({"id": "x", "type": "batch", "after": [{"job": "a", "state": "done"}]}, "state 'done' for job a is not one of"),
    ({"id": "x", "type": "batch", "after": "a"}, "after must be a list"),
])
def test_bad_dependencies_are_one_sentence_and_nothing_is_written(app, sched, spec, words):
    Client(app=app).submit({"id": "a", "type": "batch"})
    before = set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*"))
    out = sched("job", "submit", "-", input=json.dumps(spec), ok=False)
    assert out.exit_code == 2 and words in out.output
    assert set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*")) == before


def test_a_cycle_is_refused_at_submit(app):
    client = Client(app=app)
    client.submit({"id": "a", "type": "batch"})
    client.submit({"id": "b", "type": "batch", "after": ["a"]})
    client.submit({"id": "c", "type": "batch", "after": ["b"]})
    before = client.store.job_fields("a")
    with pytest.raises(SpecError, match=r"job a: after would close a cycle: a -> c -> b -> a\."):
        client.submit({"id": "a", "type": "batch", "after": ["c"]})
    assert client.store.job_fields("a") == before


def test_one_file_may_name_a_job_written_below_it_but_not_close_a_cycle(app, sched):
    before = set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*"))
    cycle = '{"id": "a", "type": "batch", "after": ["b"]}\n{"id": "b", "type": "batch", "after": ["a"]}\n'
    out = sched("job", "submit", "-", input=cycle, ok=False)
    assert (out.exit_code, out.stderr) == (2, "Error: job a: after would close a cycle: a -> b -> a.\n")
    assert set(app.client.keys(f"sched:{{{app.keys.namespace}}}:*")) == before
    chain = '{"id": "load", "type": "batch", "after": ["clean"]}\n{"id": "clean", "type": "batch", ' \
            '"after": ["extract"]}\n{"id": "extract", "type": "batch"}\n'
    assert sched("job", "submit", "-", input=chain).stdout.split() == ["load", "clean", "extract"]  # in file order
    client = Client(app=app)
    assert client.job("load")["waiting_for"] and client.job("clean")["waiting_for"]
    assert "waiting_for" not in client.job("extract")


def test_repair_puts_a_lost_waiting_task_back_in_the_waiting_set(app):
    client = Client(app=app)
    client.submit({"id": "a", "type": "batch"})
    client.submit({"id": "b", "type": "batch", "after": ["a"]})
    app.client.zrem(app.keys.waiting, "b.0")
    assert "pending task b.0 is in 0 queues (none)" in audit(app.store).problems
    repair(app.store)
    assert app.client.zscore(app.keys.waiting, "b.0") is not None and audit(app.store).ok


def _ledger_command(ledger: Path, seconds: float) -> list[str]:
    return ["sh", "-c", f'echo "start $SCHED_JOB_ID $(date +%s.%N)" >> {ledger}; sleep {seconds}; '
                        f'echo "end $SCHED_JOB_ID $(date +%s.%N)" >> {ledger}']


def _spans(ledger: Path) -> dict[str, list[float]]:
    spans: dict[str, list[float]] = {}
    for line in ledger.read_text().splitlines():
        word, job, at = line.split()
        spans.setdefault(job, []).append(float(at))
    return spans


def test_a_chain_and_a_diamond_run_in_order_on_agents(cluster, app, tmp_path):
    """extract -> transform -> load, and a diamond (top -> left, right -> bottom), with real
    agents and a worker: each job's commands start after its dependencies' commands ended,
    as the commands' own ledger says."""
    ledger = tmp_path / "ledger"
    cluster.agent("n1", cpu="4", slots=4)
    cluster.worker()
    client = Client(app=app)
    batch = {"type": "batch", "resources": {"cpu": 0.1, "memory": "16MiB"}, "run": {"command": _ledger_command(ledger, 0.3)}}
    client.submit({**batch, "id": "extract", "replicas": 2})
    client.submit({**batch, "id": "transform", "after": ["extract"]})
    client.submit({**batch, "id": "load", "after": ["transform"]})
    client.submit({**batch, "id": "top"})
    client.submit({**batch, "id": "left", "after": ["top"]})
    client.submit({**batch, "id": "right", "after": ["top"]})
    client.submit({**batch, "id": "bottom", "after": ["left", {"job": "right", "state": "complete"}]})
    jobs = ("extract", "transform", "load", "top", "left", "right", "bottom")
    cluster.wait(lambda: all(client.job(j)["status"] == "complete" for j in jobs), "every job to complete", 60)
    spans = _spans(ledger)
    for job, before in (("transform", "extract"), ("load", "transform"), ("left", "top"), ("right", "top"),
                        ("bottom", "left"), ("bottom", "right")):
        assert min(spans[job]) >= max(spans[before]), (job, before, spans)
    assert len(spans["extract"]) == 4 and all(len(spans[j]) == 2 for j in jobs[1:])  # each ran once
    assert audit(app.store).ok

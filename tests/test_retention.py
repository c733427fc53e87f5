"""Retention of ended work, against the real Redis the suite starts: finished jobs go with
every key of them after their retention, ended tasks of running jobs after theirs (and
beyond the count kept), and what is live or still needed stays."""

from __future__ import annotations

import json

import pytest

from scheduler import Client
from scheduler.control import dependencies, reconcile, retention
from scheduler.control.outcomes import Outcomes
from scheduler.control.retention import collect
from scheduler.model import SpecError
from scheduler.model.retention import Retention
from scheduler.state.retention import CALL_TASKS

NOW = Retention(task_retention=0, job_retention=0)  # everything ended is due at once
HOUR_MS = 3_600_000


@pytest.fixture
def client(app) -> Client:
    c = Client(app=app)
    c.add_node("n1", cpu=8, memory="16GiB")
    return c


def keys_of(app) -> set[str]:
    return {k[len(app.keys.prefix):] for k in app.client.scan_iter(match=f"{app.keys.prefix}*", count=1000)}


def events(app, kind: str) -> list[dict]:
    found = [json.loads(fields["event"]) for _, fields in app.client.xrange(app.keys.stream)]
    return [e for e in found if e.get("type") == "job" and e.get("event") == kind]


def end_all(client: Client, job: str, succeeded: bool = True) -> None:
    for task in client.tasks(job=job):
        if task.live:
            reconcile.task_ended(client.store, task, succeeded, "ok" if succeeded else "exited with code 1")


def test_a_finished_batch_job_is_removed_with_every_key_of_it(client, app):
    before = keys_of(app)
    client.submit({"id": "b", "type": "batch", "replicas": 3, "max_retries": 0})
    client.run_workers(until_idle=True)
    app.store.save_output("b.0", {"stdout": "hello"})
    end_all(client, "b")
    app.client.hset(app.keys.config, "stream_maxlen", 1000)
    done = collect(app.store, retention=NOW)
    assert done.finished == ["b"] and done.jobs_removed == ["b"] and done.job_tasks_removed == 3
    left = keys_of(app) - before
    assert not [k for k in left if "b" in k.split(":")[-1] or ":b" in k or k.startswith(("job:", "task:"))], left
    assert "b" not in app.client.smembers(app.keys.jobs) and not app.client.hexists(app.keys.job_shares, "b")
    finished, removed = events(app, "finished"), events(app, "removed")
    assert finished[0]["id"] == "b" and finished[0]["status"] == "complete" and finished[0]["remove_at"] > 0
    assert removed == [{**removed[0], "id": "b", "event": "removed", "status": "complete", "tasks": 3}]


def test_the_finished_and_removed_events_say_the_status_job_ls_says(client, app, sched):
    """A batch job whose task failed for good, one failed by its dependency, one stopped and
    one complete: each event's status is the job's in `sched job ls`, and the human line of
    `sched events` gives remove_at as a time."""
    app.client.hset(app.keys.config, "stream_maxlen", 1000)
    client.submit({"id": "ok", "type": "batch", "replicas": 2})
    client.submit({"id": "bad", "type": "batch", "replicas": 2, "max_retries": 0})
    client.submit({"id": "next", "type": "batch", "after": ["bad"]})
    client.submit({"id": "web"})
    client.run_workers(until_idle=True)
    end_all(client, "ok")
    reconcile.task_ended(client.store, client.task("bad.0"), True, "ok")
    reconcile.task_ended(client.store, client.task("bad.1"), False, "exited with code 1")
    client.stop("web")
    dependencies.release(app.store, Outcomes())  # bad failed: next can never run
    listed = {r["id"]: r["status"] for r in json.loads(sched("job", "ls", "--json").stdout)}
    assert listed == {"ok": "complete", "bad": "failed", "next": "failed", "web": "stopped"}
    collect(app.store, retention=NOW)
    said = {e["id"]: e["status"] for e in events(app, "finished")}
    assert said == listed
    assert {e["id"]: e["status"] for e in events(app, "removed")} == said
    from scheduler.tools.cli.events import describe
    line = describe(events(app, "finished")[0])
    assert " remove_at=20" in line and "T" in line.split("remove_at=")[1], line


def test_a_finished_job_stays_for_its_retention_and_ttl_after_finished_is_its_own(client, app):
    client.submit({"id": "kept", "type": "batch"})
    client.submit({"id": "quick", "type": "batch", "ttl_after_finished": 0})
    client.submit({"id": "hour", "type": "batch", "ttl_after_finished": "1h"})
    client.run_workers(until_idle=True)
    for job in ("kept", "quick", "hour"):
        end_all(client, job)
    settings = Retention(job_retention=86_400)
    now = app.store.now_ms()
    assert collect(app.store, retention=settings, now_ms=now).jobs_removed == ["quick"]
    assert collect(app.store, retention=settings, now_ms=now + HOUR_MS + 1000).jobs_removed == ["hour"]
    assert collect(app.store, retention=settings, now_ms=now + 23 * HOUR_MS).jobs_removed == []
    assert collect(app.store, retention=settings, now_ms=now + 24 * HOUR_MS + 1000).jobs_removed == ["kept"]


def test_a_finished_job_says_when_it_finished_and_when_it_goes(client, app, sched):
    """``finished_at`` and ``remove_at`` in Client.job, `sched job show` (and --json) and
    the dashboard's job page: the job finished event's figures, following job_retention
    as it is set now, or the job's own ttl_after_finished."""
    from starlette.testclient import TestClient

    from scheduler.control.schedule import iso
    from scheduler.tools.ui.app import create_app

    client.set_config(job_retention="6h")
    client.submit({"id": "kept", "type": "batch"})
    client.submit({"id": "hour", "type": "batch", "ttl_after_finished": "1h"})
    client.run_workers(until_idle=True)
    assert "finished_at" not in client.job("kept") and "remove_at" not in client.job("kept")
    for job in ("kept", "hour"):
        end_all(client, job)
    assert sorted(collect(app.store).finished) == ["hour", "kept"]  # the namespace's 6h: nothing removed yet
    kept, hour = client.job("kept"), client.job("hour")
    said = {e["id"]: e["remove_at"] for e in events(app, "finished")}
    assert kept["remove_at"] == kept["finished_at"] + 6 * HOUR_MS == said["kept"]
    assert hour["remove_at"] == hour["finished_at"] + HOUR_MS == said["hour"]
    assert kept["finished_at"] == int(app.client.hget(app.keys.job("kept"), "finished_at"))
    client.set_config(job_retention="1h")  # the setting as it is now
    assert client.job("kept")["remove_at"] == kept["finished_at"] + HOUR_MS
    assert client.job("hour")["remove_at"] == hour["remove_at"]  # its own
    shown = sched("job", "show", "kept").stdout
    assert f"finished_at: '{iso(kept['finished_at'])}'" in shown
    assert f"remove_at: '{iso(kept['finished_at'] + HOUR_MS)}'" in shown
    record = json.loads(sched("job", "show", "kept", "--json").stdout)
    assert (record["finished_at"], record["remove_at"]) == (kept["finished_at"], kept["finished_at"] + HOUR_MS)
    with TestClient(create_app(app)) as web:
        page = web.get(f"/jobs/hour?ns={app.keys.namespace}").text
    assert 'data-field="finished-at"' in page and f'data-ms="{hour["remove_at"]}"' in page
    assert "its ttl_after_finished" in page


def test_a_stopped_job_is_removed_once_its_tasks_ended(client, app):
    client.submit({"id": "svc", "replicas": 2})
    client.run_workers(until_idle=True)
    assert collect(app.store, retention=NOW).jobs_removed == []  # running
    client.stop("svc")
    assert collect(app.store, retention=NOW).jobs_removed == ["svc"]
    assert events(app, "finished")[0]["status"] == "stopped"
    # A job stopped when none of its tasks was open finishes at once too.
    client.submit({"id": "idle", "replicas": 0})
    client.stop("idle")
    assert collect(app.store, retention=NOW).jobs_removed == ["idle"]


def test_a_live_or_pending_task_and_its_job_are_never_removed(client, app):
    client.submit({"id": "live", "type": "batch", "replicas": 2})
    client.submit({"id": "wait", "type": "batch", "resources": {"cpu": 64}})  # fits nowhere: pending
    client.run_workers(until_idle=True)
    reconcile.task_ended(client.store, client.tasks(job="live")[0], True, "ok")  # one of two done
    done = collect(app.store, retention=NOW)
    assert done.jobs_removed == [] and done.tasks_removed == 0
    assert len(client.tasks(job="live")) == 2 and client.tasks(job="wait")[0].state == "pending"


def test_a_complete_batch_job_scaled_up_again_is_not_removed(client, app):
    client.submit({"id": "b", "type": "batch"})
    client.run_workers(until_idle=True)
    end_all(client, "b")
    assert collect(app.store, retention=Retention(job_retention=3600)).finished == ["b"]
    client.scale("b", 2)  # running again: its new task is pending
    now = app.store.now_ms() + 2 * HOUR_MS
    done = collect(app.store, retention=Retention(job_retention=3600), now_ms=now)
    assert done.jobs_removed == [] and done.kept == {"open": 1}
    assert not app.client.hexists(app.keys.job("b"), "finished_at")
    states = [t.state for t in client.tasks(job="b")]
    assert states[0] == "completed" and set(states[1:]) == {"pending"}


def test_ended_tasks_of_a_running_service_go_after_task_retention_or_beyond_the_count(client, app):
    client.submit({"id": "crash", "replicas": 1, "restart_delay": 0})
    for _ in range(6):  # it crashes six times; each time a replacement is queued and placed
        client.run_workers(until_idle=True)
        end_all(client, "crash", succeeded=False)
    client.run_workers(until_idle=True)
    ids = [t.id for t in client.tasks(job="crash")]
    assert len(ids) == 7
    # Count rule: keep the newest 3 ended (set now: the jobs already counted are looked at
    # again); time rule off (an hour).
    client.set_config(task_retention="1h", ended_tasks_per_job=3)
    done = collect(app.store)
    assert done.tasks_removed == 3 and done.jobs_removed == []
    assert [t.id for t in client.tasks(job="crash")] == ids[3:]
    assert events(app, "tasks removed")[0]["tasks"] == ids[:3]
    # Time rule: an hour later every ended task may go, but the one the live task replaces.
    later = app.store.now_ms() + HOUR_MS + 1000
    done = collect(app.store, retention=Retention(task_retention=3600), now_ms=later)
    assert done.tasks_removed == 2
    live = [t for t in client.tasks(job="crash") if t.live]
    assert [t.id for t in client.tasks(job="crash")] == [ids[5], ids[6]] == [live[0].replaces, live[0].id]
    assert not app.client.exists(app.keys.task_output(ids[0]), app.keys.task_attempts(ids[0]))


def test_a_batch_jobs_results_stay_while_it_runs(client, app):
    client.submit({"id": "b", "type": "batch", "replicas": 3, "max_retries": 2, "restart_delay": 0})
    client.run_workers(until_idle=True)
    first, second, third = client.tasks(job="b")
    reconcile.task_ended(client.store, first, True, "ok")
    reconcile.task_ended(client.store, second, False, "exited with code 1")  # retried: b.3
    client.run_workers(until_idle=True)
    retry = next(t for t in client.tasks(job="b") if t.replaces == second.id)
    reconcile.task_ended(client.store, retry, True, "ok")
    done = collect(app.store, retention=Retention(task_retention=0, ended_tasks_per_job=0))
    assert done.tasks_removed == 1  # the failed try; the completed ones are the job's results
    assert sorted(t.id for t in client.tasks(job="b")) == sorted([first.id, third.id, retry.id])
    # A slot that failed with no retry left is a result too.
    client.submit({"id": "last", "type": "batch", "replicas": 2, "max_retries": 0})
    client.run_workers(until_idle=True)
    failed, running = client.tasks(job="last")
    reconcile.task_ended(client.store, failed, False, "exited with code 1")
    assert collect(app.store, retention=Retention(task_retention=0, ended_tasks_per_job=0)).tasks_removed == 0
    assert [t.state for t in client.tasks(job="last")] == ["failed", "assigned"]


def test_a_sysbatch_jobs_results_stay_so_it_runs_once_per_node(client, app):
    """What ran to its end on a node is the sysbatch job's result there: retention keeps it,
    whatever its age or count, so that a node change does not run the job there again."""
    client.add_node("n2", cpu=8, memory="16GiB")
    client.submit({"id": "sweep", "type": "sysbatch", "max_retries": 0})
    client.run_workers(until_idle=True)
    done_on_n1, failed_on_n2 = sorted(client.tasks(job="sweep"), key=lambda t: t.pin)
    reconcile.task_ended(client.store, done_on_n1, True, "ok")
    reconcile.task_ended(client.store, failed_on_n2, False, "exited with code 1")  # no retry left
    assert collect(app.store, retention=Retention(task_retention=0, ended_tasks_per_job=0)).tasks_removed == 0
    client.add_node("n3", cpu=8, memory="16GiB")
    reconcile.reconcile_global(app.store)
    tasks = sorted(client.tasks(job="sweep"), key=lambda t: t.pin)
    assert [(t.pin, t.state) for t in tasks] == [("n1", "completed"), ("n2", "failed"), ("n3", "pending")]


def test_a_deployments_failures_stay_while_it_rolls(client, app):
    update = {"max_parallel": 1, "min_healthy_time": 0, "healthy_deadline": 600, "max_failure_ratio": 1}
    client.submit({"id": "web", "replicas": 2, "restart_delay": 0, "update": update})
    client.run_workers(until_idle=True)
    client.submit({"id": "web", "replicas": 2, "restart_delay": 0, "update": update, "priority": 60})
    from scheduler.control import deployer
    deployer.advance_all(app.store)
    client.run_workers(until_idle=True)
    new = [t for t in client.tasks(job="web") if t.version == 2 and t.live]
    assert new
    reconcile.task_ended(client.store, new[0], False, "exited with code 3")
    client.run_workers(until_idle=True)
    replacement = next(t for t in client.tasks(job="web") if t.replaces == new[0].id)
    reconcile.task_ended(client.store, replacement, False, "exited with code 3")  # new[0] now only in the chain
    done = collect(app.store, retention=Retention(task_retention=0, ended_tasks_per_job=0))
    kept = {t.id for t in client.tasks(job="web") if t.terminal}
    assert new[0].id in kept  # version 2's failure, counted by the deployment in progress
    old_stopped = [t.id for t in client.tasks(job="web") if t.version == 1 and t.terminal]
    assert old_stopped == [] and done.tasks_removed >= 1  # version 1's stopped tasks went


def test_a_held_job_stays_until_its_holds_are_gone(client, app):
    client.submit({"id": "up", "type": "batch"})
    client.run_workers(until_idle=True)
    end_all(client, "up")
    app.client.sadd(app.keys.job_holds("up"), "down")
    assert collect(app.store, retention=NOW).kept == {"held": 1}
    app.client.srem(app.keys.job_holds("up"), "down")
    # Looked at again a minute later.
    assert collect(app.store, retention=NOW, now_ms=app.store.now_ms() + 61_000).jobs_removed == ["up"]


def test_a_job_of_more_tasks_than_one_call_takes_is_removed_in_parts(client, app):
    n = CALL_TASKS * 2 + 7
    client.submit({"id": "big", "type": "batch", "replicas": n})
    ids = [f"big.{i}" for i in range(n)]
    client.store.finish_ids(ids, "completed", "ok")  # ended while pending: complete without placing
    done = collect(app.store, retention=NOW)
    assert done.jobs_removed == ["big"] and done.job_tasks_removed == n
    assert not any(k.startswith(("task:big.", "job:big")) for k in keys_of(app))
    assert events(app, "removed")[0]["tasks"] == n


def test_workers_remove_on_their_own(client, app):
    client.set_config(job_retention=0, task_retention=0)
    client.submit({"id": "b", "type": "batch", "replicas": 2})
    client.run_workers(until_idle=True)
    end_all(client, "b")
    client.run_workers(until_idle=True)  # its upkeep counts, finds it finished, removes it
    assert client.store.job_ids() == []


def test_removing_a_node_takes_every_key_of_it(client, app):
    client.pause("n1")  # recorded in the node's history
    app.store.beat("n1", 3000)  # an agent's: its heartbeat, in agents and agents:ttl
    assert app.client.exists(app.keys.node_history("n1"), app.keys.heartbeat("n1")) == 2
    client.remove_node("n1")
    assert not [k for k in keys_of(app) if k.startswith("node:n1")]
    assert "n1" not in app.client.smembers(app.keys.agents) and not app.client.hexists(app.keys.agent_ttls, "n1")


def test_sched_gc_says_what_it_removed_and_dry_run_removes_nothing(client, app, sched):
    client.submit({"id": "a", "type": "batch"})
    client.submit({"id": "b", "type": "batch"})
    client.run_workers(until_idle=True)
    end_all(client, "a")
    end_all(client, "b")
    sched("config", "set", "job_retention", "0s")
    # The ends are not counted yet: the dry run says what the real run will remove all the same.
    assert app.store.retention_counts()["uncounted_ends"] > 0
    dry = sched("gc", "--dry-run").stdout
    assert dry.startswith(("would remove 2 finished job(s): a, b", "would remove 2 finished job(s): b, a")), dry
    assert "not counted yet" not in dry and client.store.job_ids() == ["a", "b"]
    dry = json.loads(sched("gc", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and sorted(dry["jobs_removed"]) == ["a", "b"] and client.store.job_ids() == ["a", "b"]
    out = sched("gc").stdout
    assert out.startswith("removed 2 finished job(s): a, b") or out.startswith("removed 2 finished job(s): b, a")
    assert client.store.job_ids() == []
    assert json.loads(sched("gc", "--json").stdout)["jobs_removed"] == []
    assert client.audit_trail()[-1]["action"] == "gc"


def test_config_show_set_and_unset(client, sched):
    shown = sched("config", "show").stdout
    assert "job_retention        1d      (default)" in shown and "redis memory:" in shown
    assert sched("config", "set", "job_retention", "6h", "ended_tasks_per_job", "20").stdout.splitlines() == [
        "job_retention = 6h", "ended_tasks_per_job = 20"]
    assert client.config()["job_retention"] == {"value": 21600.0, "default": False}
    bad = sched("config", "set", "job_retention", "-3", ok=False)
    assert bad.exit_code == 2 and "job_retention must be a duration of 0 or more" in bad.stderr
    bad = sched("config", "set", "job_retension", "1h", ok=False)
    assert "did you mean 'job_retention'?" in bad.stderr
    bad = sched("config", "set", "job_retention", ok=False)
    assert (bad.exit_code, bad.stderr) == (2, "Error: setting job_retention has no value; give each setting one, "
                                              "as in `sched config set job_retention VALUE`.\n")
    bad = sched("gc", "--dryrun", ok=False)
    assert (bad.exit_code, bad.stderr) == (2, "Error: No such option '--dryrun'. Did you mean '--dry-run'?\n")
    assert client.config()["job_retention"]["value"] == 21600.0  # nothing written by a refusal
    sched("config", "unset", "job_retention")
    assert client.config()["job_retention"] == {"value": 86400.0, "default": True}
    with pytest.raises(SpecError, match="ended_tasks_per_job must be a whole number"):
        client.set_config(ended_tasks_per_job="many")
    memory = json.loads(sched("config", "show", "--json").stdout)["memory"]
    assert memory["used_memory"] > 0 and memory["nodes"] == 1 and memory["bytes_per_node"] > 0


def test_upkeep_is_one_worker_at_a_time(client, app):
    assert app.store.take_lock(retention.LOCK, 5000)
    assert retention.upkeep(app.store) is None
    app.store.release_lock(retention.LOCK)
    assert retention.upkeep(app.store) is not None


def test_output_that_comes_after_its_task_was_removed_is_dropped(client, app):
    client.submit({"id": "b", "type": "batch", "ttl_after_finished": 0})
    client.run_workers(until_idle=True)
    app.store.save_output("b.0", {"stdout": "first"})
    end_all(client, "b")
    assert collect(app.store).jobs_removed == ["b"]
    app.store.save_output("b.0", {"stdout": "late"})  # a work horse's last flush, after the removal
    assert not app.client.exists(app.keys.task_output("b.0"))


def test_a_worker_warns_once_when_redis_memory_passes_80_percent(own_redis, caplog):
    from scheduler.state.app import App
    from workers import metrics
    from workers.scheduler_worker import SchedulerWorker

    _, url = own_redis
    app = App(redis_url=url, namespace="mem")
    Client(app=app).add_node("n1", cpu=1, memory="1GiB")
    # 30 MB, beside which a script or a reply buffer is noise (a short command: no big query
    # buffer that Redis would free later)
    app.client.setrange("ballast", 30_000_000, "x")
    used = app.store.redis_memory()["used_memory"]
    app.client.config_set("maxmemory", int(used / 0.85))  # 85% used
    first, second = SchedulerWorker(app, name="w1"), SchedulerWorker(app, name="w2")
    with caplog.at_level("WARNING", logger="sched.worker"):
        first._watch_memory()
        first._watch_memory()
        second._watch_memory()
    warnings = [r.getMessage() for r in caplog.records if "maxmemory" in r.getMessage()]
    assert len(warnings) == 2 and "w1: Redis uses 8" in warnings[0]  # once per worker
    notes = [e for e in Client(app=app).audit_trail() if e["action"] == "memory-high"]
    assert len(notes) == 1 and notes[0]["details"]["maxmemory"] == int(used / 0.85)  # once per namespace
    assert metrics.REDIS_MEMORY_HIGH._value.get() == 1 and metrics.REDIS_MAXMEMORY._value.get() > 0
    app.client.config_set("maxmemory", 0)  # no limit: back under
    first._watch_memory()
    assert metrics.REDIS_MEMORY_HIGH._value.get() == 1  # no limit is neither high nor low: unchanged
    app.client.config_set("maxmemory", used * 10)
    first._watch_memory()
    assert metrics.REDIS_MEMORY_HIGH._value.get() == 0 and app.store.first_to_warn()  # a later crossing warns again

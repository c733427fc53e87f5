"""Periodic jobs on real worker and agent processes: every tick launched exactly once, or
recorded missed, through a worker SIGKILLed and Redis restarted from its append-only file
(judged from the commands' own ledger); overlap forbid and replace with a slow command."""

from __future__ import annotations

import os
import signal
import time

import pytest

from scheduler import Client
from scheduler.control.audit import audit
from agent_cluster import own_redis_cluster, cluster  # noqa: F401 (the fixture)


def _ledger(path) -> list[tuple[str, str, float]]:
    """(word, job id, time) of each line the commands wrote."""
    if not path.exists():
        return []
    return [(w, job, float(at)) for w, job, at in (line.split() for line in path.read_text().splitlines())]


def _command(ledger, seconds: float = 0.0) -> list[str]:
    sleep = f"sleep {seconds}; " if seconds else ""
    return ["sh", "-c", f'echo "start $SCHED_JOB_ID $(date +%s.%N)" >> {ledger}; {sleep}'
                        f'echo "end $SCHED_JOB_ID $(date +%s.%N)" >> {ledger}']


def _missed(client: Client, job: str) -> set[int]:
    """The ticks (ms) the job's history records as missed, with the ticks between."""
    out: set[int] = set()
    for entry in client.audit_trail(job=job):
        if entry["action"] == "missed":
            details = entry["details"]
            out |= set(range(details["first"], details["last"] + 1, 2000))
    return out


@pytest.mark.slow
def test_every_tick_is_launched_exactly_once_through_a_worker_kill_and_a_redis_restart(tmp_path, namespace):
    """``@every 2s`` with three worker processes and an agent. Mid-run a worker is SIGKILLed
    and Redis is SIGKILLed and started again from its append-only file. Every tick from
    the first launch to the end of the window ran exactly once (the commands' ledger) or is
    recorded missed; none ran twice."""
    ledger = tmp_path / "ledger"
    with own_redis_cluster(tmp_path, namespace) as (server, app, cluster):
        cluster.agent("a", heartbeat="3.0", slots=2)  # a TTL of 9 s: the outage does not take it down
        workers = [cluster.worker() for _ in range(3)]
        client = Client(app=app)
        client.submit({"id": "beat", "type": "batch", "resources": {"cpu": 0.1, "memory": "16MiB"},
                       "periodic": {"cron": "@every 2s"}, "run": {"command": _command(ledger)}})
        anchor = int(app.store.job_fields("beat")["anchor"])
        cluster.wait(lambda: len(_ledger(ledger)) >= 4, "two launches to run", 30)
        os.kill(workers[0].pid, signal.SIGKILL)
        time.sleep(3)
        server.kill()
        time.sleep(3)  # a tick or two come due while Redis is away
        server.start()
        end = time.time() + 8
        time.sleep(8)
        last_tick = anchor + ((int(end * 1000) - 4000 - anchor) // 2000) * 2000  # due long enough ago to have run
        cluster.wait(lambda: all(child["status"] != "running" for child in client.job("beat")["launches"]),
                     "the launches to end", 30)
        runs: dict[int, int] = {}
        for word, job, _ in _ledger(ledger):
            if word == "start":
                tick_ms = int(job.rsplit("-", 1)[1]) * 1000
                runs[tick_ms] = runs.get(tick_ms, 0) + 1
        assert all(count == 1 for count in runs.values()), runs  # none twice
        missed = _missed(client, "beat")
        ticks = range(anchor + 2000, last_tick + 1, 2000)
        seconds = {t // 1000 for t in ticks}
        unaccounted = [t for t in ticks if (t // 1000) * 1000 not in runs and t not in missed]
        assert unaccounted == [], (sorted(runs), sorted(missed))
        assert not set(runs) - {s * 1000 for s in seconds} - {(last_tick // 1000 + k) * 1000 for k in range(1, 20)}
        assert len(runs) >= len(ticks) // 2  # most ran: the window was not one long miss
        report = audit(app.store)
        assert report.ok, report.problems


@pytest.mark.slow
def test_forbid_never_overlaps_and_replace_stops_the_running_launch(cluster, app, tmp_path):
    """A command of 2.5 s launched every second: with forbid, no two runs overlap (the
    commands' ledger) and the skipped ticks are recorded; with replace, each new launch
    stops the one before, so no run reaches its end but the last."""
    forbid, replace = tmp_path / "forbid", tmp_path / "replace"
    cluster.agent("n1", cpu="4", slots=4)
    cluster.worker()
    client = Client(app=app)
    small = {"cpu": 0.1, "memory": "16MiB"}
    client.submit({"id": "forbid", "type": "batch", "resources": small, "run": {"command": _command(forbid, 2.5)},
                   "periodic": {"cron": "@every 1s", "overlap": "forbid"}})
    client.submit({"id": "replace", "type": "batch", "resources": small, "run": {"command": _command(replace, 2.5)},
                   "periodic": {"cron": "@every 1s", "overlap": "replace", "history": {"completed": 20, "failed": 20}}})
    cluster.wait(lambda: sum(w == "end" for w, _, _ in _ledger(forbid)) >= 2, "two forbid runs to end", 30)
    client.suspend("forbid")
    client.suspend("replace")
    cluster.wait(lambda: all(l["status"] != "running" for j in ("forbid", "replace") for l in client.job(j)["launches"]),
                 "the last launches to end", 30)
    spans: dict[str, list[float]] = {}
    for word, job, at in _ledger(forbid):
        spans.setdefault(job, []).append(at)
    ordered = sorted(spans.values())
    assert all(len(span) == 2 for span in ordered)
    assert all(later[0] >= earlier[1] for earlier, later in zip(ordered, ordered[1:])), ordered  # never overlapping
    assert any("overlap: forbid" in e["details"]["reason"] for e in client.audit_trail(job="forbid")
               if e["action"] == "missed")
    started = [job for word, job, _ in _ledger(replace) if word == "start"]
    ended = [job for word, job, _ in _ledger(replace) if word == "end"]
    assert len(started) >= 3 and set(ended) <= {started[-1]}  # each was stopped by the next but the last
    stopped = [t for child in started[:-1] for t in client.tasks(job=child)]
    assert stopped and {t.state for t in stopped} == {"stopped"}

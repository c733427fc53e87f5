"""Periodic jobs: the schedule (cron as Nomad's cronexpr reads it, @every, time zones and
daylight saving changes, by the library's clock), the launcher in the workers' upkeep
(each tick launched once by any number of launchers, missed ticks recorded, suspend and
resume, forced launches), and bad input."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from scheduler import Client
from scheduler.control import periodic, reconcile
from scheduler.control.outcomes import Outcomes
from scheduler.model import SpecError, parse_job
from scheduler.model.periodic import parse_periodic
from worker_harness import wait_until


def ms(text: str, zone: str = "UTC") -> int:
    tz = timezone.utc if zone == "UTC" else ZoneInfo(zone)
    return int(datetime.fromisoformat(text).replace(tzinfo=tz).timestamp() * 1000)


def walls(block: dict, start: str, count: int, zone: str = "UTC") -> list[str]:
    """The next ``count`` ticks after ``start`` as wall-clock times with their offsets."""
    p = parse_periodic(block, "j")
    tz = timezone.utc if zone == "UTC" else ZoneInfo(zone)
    at, out = ms(start, zone), []
    for _ in range(count):
        at = p.next_after(at, 0)
        out.append(datetime.fromtimestamp(at / 1000, timezone.utc).astimezone(tz).strftime("%m-%d %H:%M:%S%z"))
    return out


# ----------------------------------------------------------------------------- the schedule
def test_cron_forms_of_nomads_cronexpr():
    assert walls({"cron": "30 2 * * *"}, "2026-03-01T00:00:00", 2) == ["03-01 02:30:00+0000", "03-02 02:30:00+0000"]
    # 6 fields: the sixth is a year; 7: seconds first, a year last.
    assert walls({"cron": "0 0 1 1 * 2030"}, "2026-03-01T00:00:00", 1) == ["01-01 00:00:00+0000"]
    assert parse_periodic({"cron": "0 0 1 1 * 2025"}, "j").next_after(ms("2026-01-01T00:00:00")) is None
    assert walls({"cron": "15 */20 * * * * *"}, "2026-03-01T00:00:00", 2) == ["03-01 00:00:15+0000",
                                                                              "03-01 00:20:15+0000"]
    assert walls({"cron": "@daily"}, "2026-03-01T05:00:00", 1) == ["03-02 00:00:00+0000"]
    assert walls({"cron": "@weekly"}, "2026-03-02T05:00:00", 1) == ["03-08 00:00:00+0000"]  # a Sunday
    assert walls({"cron": "0 0 * * 5L"}, "2026-03-01T00:00:00", 1) == ["03-27 00:00:00+0000"]  # the last Friday
    assert walls({"cron": "0 9 * * 1#2"}, "2026-03-01T00:00:00", 1) == ["03-09 09:00:00+0000"]  # the second Monday
    every = parse_periodic({"cron": "@every 1h30m"}, "j")
    assert every.next_after(1000, anchor_ms=1000) == 1000 + 5_400_000
    assert every.ticks(0, 3 * 5_400_000, anchor_ms=0) == [5_400_000, 10_800_000, 16_200_000]


def test_a_spring_forward_skips_the_hour_and_a_fall_back_runs_it_twice():
    """Nomad's behaviour across DST, by the library's clock: 02:30 does not exist in Berlin on
    2026-03-29 (skipped that day) and occurs twice on 2026-10-25 (launched at both)."""
    berlin = {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"}
    assert walls(berlin, "2026-03-27T12:00:00", 3, "Europe/Berlin") == [
        "03-28 02:30:00+0100", "03-30 02:30:00+0200", "03-31 02:30:00+0200"]
    assert walls(berlin, "2026-10-24T12:00:00", 3, "Europe/Berlin") == [
        "10-25 02:30:00+0200", "10-25 02:30:00+0100", "10-26 02:30:00+0100"]
    # Every 20 minutes through New York's repeated hour: each wall-clock time twice, in order.
    ny = {"cron": "*/20 1 * * *", "time_zone": "America/New_York"}
    assert walls(ny, "2026-11-01T00:30:00", 6, "America/New_York") == [
        "11-01 01:00:00-0400", "11-01 01:20:00-0400", "11-01 01:40:00-0400",
        "11-01 01:00:00-0500", "11-01 01:20:00-0500", "11-01 01:40:00-0500"]
    # An interval is an interval: @every ignores the wall clock.
    p = parse_periodic({"cron": "@every 1h", "time_zone": "Europe/Berlin"}, "j")
    start = ms("2026-03-29T00:30:00", "Europe/Berlin")
    assert [t - start for t in p.ticks(start, start + 4 * 3_600_000, anchor_ms=start)] == [
        3_600_000, 7_200_000, 10_800_000, 14_400_000]


@pytest.mark.parametrize("block, words", [
    ({"cron": "61 * * * *"}, "periodic.cron '61 * * * *' is not a valid cron expression"),
    ({"cron": "* * *"}, "periodic.cron '* * *' has 3 fields; write 5 fields"),
    ({"cron": "@often"}, "is not a macro cron knows"),
    ({"cron": "@every 0s"}, "needs a duration of at least 1s"),
    ({"cron": "0 0 1 1 * 1960"}, "outside 1970 to 2099"),
    ({"cron": "@daily", "time_zone": "Europe/Berln"}, "(did you mean 'Europe/Berlin'?)"),
    ({"cron": "@daily", "overlap": "queue"}, "overlap must be one of allow, forbid, replace"),
    ({"cron": "@daily", "starting_deadline": 0}, "starting_deadline must be a number of seconds above 0"),
    ({"cron": "@daily", "histroy": {}}, "has unknown field 'histroy'"),
    ({}, "needs a cron"),
])
def test_bad_periodic_blocks_are_one_sentence(block, words):
    with pytest.raises(SpecError) as error:
        parse_job({"id": "j", "type": "batch", "periodic": block})
    assert words in str(error.value)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")


def test_a_service_cannot_be_periodic_and_nothing_is_written(sched, app):
    out = sched("job", "submit", "-", input=json.dumps({"id": "web", "periodic": {"cron": "@daily"}}), ok=False)
    assert out.exit_code == 2
    assert "periodic applies to batch and sysbatch jobs" in out.output
    bad_zone = {"id": "n", "type": "batch", "periodic": {"cron": "@daily", "time_zone": "Mars/Olympus"}}
    out = sched("job", "submit", "-", input=json.dumps(bad_zone), ok=False)
    assert out.exit_code == 2 and "'Mars/Olympus' is not a time zone" in out.output
    assert app.client.keys(f"sched:{{{app.keys.namespace}}}:*") == []


@pytest.mark.parametrize("cron, words", [
    ("0 2 30 2 *", "periodic.cron '0 2 30 2 *' never fires: no date matches it."),
    ("0 0 1 1 * 2020", "periodic.cron '0 0 1 1 * 2020' never fires again: its last year, 2020, is past."),
])
def test_a_schedule_that_never_fires_is_refused_and_nothing_is_written(sched, app, cron, words):
    """30 February, or only years that are past: refused at submit, as a user types it."""
    spec = {"id": "never", "type": "batch", "periodic": {"cron": cron}}
    out = sched("job", "submit", "-", input=json.dumps(spec), ok=False)
    assert out.exit_code == 2 and out.stderr == f"Error: job never: {words}\n"
    assert app.client.keys(f"sched:{{{app.keys.namespace}}}:*") == []
    sched("job", "submit", "-", input=json.dumps({**spec, "periodic": {"cron": "0 0 1 1 * 2020-2099"}}))


def test_job_ls_says_suspended_only_for_a_suspended_job_and_suspend_twice_changes_nothing(sched, app):
    client = Client(app=app)
    client.submit({"id": "n", "type": "batch", "periodic": {"cron": "0 3 * * *"}})
    assert "suspended" not in sched("job", "ls").stdout
    assert sched("job", "resume", "n").stdout == "job n is not suspended: next launch " \
        f"{client.job('n')['next_launch']}\n"
    assert sched("job", "suspend", "n").stdout.startswith("job n suspended")
    assert "suspended" in sched("job", "ls").stdout.splitlines()[1]
    assert sched("job", "suspend", "n").stdout.startswith("job n is already suspended")
    assert client.suspend("n")["changed"] is False
    actions = [e["action"] for e in app.store.read_history(job="n")]
    assert actions.count("suspend") == 1 and "resume" not in actions  # only what changed is recorded
    assert sched("job", "resume", "n").stdout.startswith("job n resumed: next launch ")
    assert "suspended" not in sched("job", "ls").stdout


def test_launch_of_a_job_that_is_not_periodic_says_so_and_suggests_dispatch_only_for_a_parameterized_one(sched, app):
    client = Client(app=app)
    client.submit({"id": "base", "type": "batch"})
    client.submit({"id": "render", "type": "batch", "parameterized": {}})
    out = sched("job", "launch", "base", ok=False)
    assert out.exit_code == 2 and out.stderr == "Error: job base is not periodic; only a periodic job is launched.\n"
    out = sched("job", "launch", "render", ok=False)
    assert out.exit_code == 2 and "`sched job dispatch render`" in out.stderr


# ----------------------------------------------------------------------------- the launcher
def _launch_rounds(app, seconds: float, threads: int = 4) -> None:
    """``threads`` launchers (each with its own cache, as workers have) running the upkeep's
    launch every 20 ms for ``seconds``."""
    stop = threading.Event()

    def run():
        outcomes = Outcomes()
        while not stop.is_set():
            periodic.launch_due(app.store, outcomes)
            time.sleep(0.02)

    runners = [threading.Thread(target=run) for _ in range(threads)]
    for runner in runners:
        runner.start()
    time.sleep(seconds)
    stop.set()
    for runner in runners:
        runner.join()


def test_each_tick_is_launched_once_by_racing_launchers(app):
    reconcile.submit(app.store, parse_job({"id": "tick", "type": "batch", "periodic": {"cron": "@every 1s"}}))
    anchor = int(app.store.job_fields("tick")["anchor"])
    _launch_rounds(app, 3.5)
    children = [child for child, _ in app.store.children("tick")]
    expected = [f"tick/periodic-{(anchor + i * 1000) // 1000}" for i in range(1, len(children) + 1)]
    assert len(children) >= 3 and children == expected  # one per tick, in order, none twice
    assert all(app.store.job_task_ids(child) == [f"{child}.0"] for child in children)
    fields = app.store.job_fields("tick")
    assert int(fields["launches"]) == len(children) and fields.get("missed") is None


def test_ticks_missed_while_no_launcher_ran_are_recorded_not_run_late(app):
    """Three ticks came due while no worker ran: only the latest is launched, if less than
    starting_deadline late, and the others are recorded missed; later than that, none runs.
    (The launcher is given the time: the claim compares the job's next tick, not a clock.)"""
    for job, cron, deadline in (("late", "@every 1s", 60), ("later", "@every 4s", 1)):
        spec = {"id": job, "type": "batch", "periodic": {"cron": cron, "starting_deadline": deadline}}
        reconcile.submit(app.store, parse_job(spec))
    tick = int(app.store.job_fields("late")["next_launch"])
    periodic.launch_tick(app.store, Outcomes(), "late", tick + 2500)
    [(child, _)] = app.store.children("late")
    assert child == f"late/periodic-{(tick + 2000) // 1000}" and app.store.job_fields(child)["tick"] == str(tick + 2000)
    [missed] = [e["details"] for e in app.store.read_history(job="late") if e["action"] == "missed"]
    assert (missed["first"], missed["last"], missed["count"]) == (tick, tick + 1000, 2)
    assert int(app.store.job_fields("late")["next_launch"]) == tick + 3000
    tick = int(app.store.job_fields("later")["next_launch"])
    periodic.launch_tick(app.store, Outcomes(), "later", tick + 9500)  # the latest is 1.5 s late: none runs
    assert app.store.children("later") == []
    [missed] = [e["details"] for e in app.store.read_history(job="later") if e["action"] == "missed"]
    assert (missed["first"], missed["last"], missed["count"]) == (tick, tick + 8000, 3)
    assert "starting_deadline" in missed["reason"]
    assert int(app.store.job_fields("later")["missed"]) == 3


def test_suspend_resume_and_a_forced_launch(app):
    client = Client(app=app)
    client.submit({"id": "n", "type": "batch", "periodic": {"cron": "0 3 * * *"}})
    record = next(r for r in client.jobs() if r["id"] == "n")
    assert record["next_launch"].endswith("T03:00:00Z")
    assert client.job("n")["next_launch"] == record["next_launch"]
    assert client.suspend("n")["next_launch"] is None
    assert client.job("n")["suspended"] is True and client.job("n")["next_launch"] is None
    launched = client.launch("n")["launched"]
    assert launched.startswith("n/periodic-") and client.job(launched)["parent"] == "n"
    assert client.resume("n")["next_launch"].endswith("T03:00:00Z")
    with pytest.raises(SpecError, match="job id 'n/periodic-1' names a launch of job n; launches are made by sched"):
        client.submit({"id": "n/periodic-1", "type": "batch"})
    client.submit({"id": "plain", "type": "batch"})
    with pytest.raises(SpecError, match="job plain is not periodic"):
        client.launch("plain")


def test_forbid_skips_a_tick_while_a_launch_runs_and_replace_stops_it(app):
    for policy in ("forbid", "replace"):
        reconcile.submit(app.store, parse_job({"id": policy, "type": "batch",
                                               "periodic": {"cron": "@every 1s", "overlap": policy}}))
    _launch_rounds(app, 2.6, threads=2)  # no worker places them: each launch stays pending, so running
    forbid = [c for c, _ in app.store.children("forbid")]
    assert len(forbid) == 1  # the later ticks were skipped while the first still ran
    skipped = [e for e in app.store.read_history(job="forbid") if e["action"] == "missed"]
    assert skipped and "overlap: forbid" in skipped[0]["details"]["reason"]
    replace = [c for c, _ in app.store.children("replace")]
    assert len(replace) >= 2
    states = {c: [t.state for t in app.store.tasks(app.store.job_task_ids(c))] for c in replace}
    assert all(states[c] == ["stopped"] for c in replace[:-1]) and states[replace[-1]] == ["pending"]


class _ReadEarlier:
    """The store as a launcher sees it that read job ``job_id`` before others launched it
    (its hash as it was then; everything else current)."""

    def __init__(self, store, job_id):
        self.store, self.job_id, self.fields = store, job_id, store.job_fields(job_id)

    def job_fields(self, job_id):
        return self.fields if job_id == self.job_id else self.store.job_fields(job_id)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_late_replace_launcher_whose_tick_was_taken_stops_nothing(app):
    reconcile.submit(app.store, parse_job({"id": "r", "type": "batch",
                                           "periodic": {"cron": "@every 1s", "overlap": "replace"}}))
    late = _ReadEarlier(app.store, "r")  # read before either launch below
    first = int(app.store.job_fields("r")["next_launch"])
    assert periodic.launch_tick(app.store, Outcomes(), "r", first).created
    assert periodic.launch_tick(app.store, Outcomes(), "r", first + 1000).created
    (older, _), (newest, _) = app.store.children("r")
    # The late launcher sees both running, and its tick already launched: it stops neither.
    assert not periodic.launch_tick(late, Outcomes(), "r", first + 1000).created
    states = {c: [t.state for t in app.store.tasks(app.store.job_task_ids(c))] for c in (older, newest)}
    assert states == {older: ["stopped"], newest: ["pending"]}


def test_history_limits_remove_older_ended_launches_with_their_keys(app):
    """With history {completed: 2, failed: 1}, launches beyond the newest two complete and
    the newest failed one are removed, with every key of theirs; running ones stay."""
    client = Client(app=app)
    client.add_node("n1", cpu=4, memory="4GiB")
    client.submit({"id": "h", "type": "batch", "max_retries": 0,
                   "periodic": {"cron": "@daily", "history": {"completed": 2, "failed": 1}}})
    from scheduler.control import reconcile as rc
    from worker_harness import run_worker_until_idle

    made = []
    for ok in (True, False, True, False, True, None):  # None: still running
        child = client.launch("h")["launched"]
        made.append(child)
        run_worker_until_idle(app)
        if ok is not None:
            [task] = client.tasks(job=child)
            rc.task_ended(app.store, task, ok, "done")
    kept = [child for child, _ in app.store.children("h")]
    # made: c0 ok, c1 fail, c2 ok, c3 fail, c4 ok, c5 running: c0 (third newest complete) and c1 go.
    assert kept == made[2:], (made, kept)
    for gone in made[:2]:
        assert app.client.exists(app.keys.job(gone), app.keys.job_tasks(gone), app.keys.task(f"{gone}.0")) == 0
        assert gone not in app.store.job_ids()
    assert audit_ok(app)


def audit_ok(app) -> bool:
    from scheduler.control.audit import audit

    report = audit(app.store)
    assert report.ok, report.problems
    return True

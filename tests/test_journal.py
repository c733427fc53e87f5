"""The node's journal (SQLite) and the process groups it names, on their own: no Redis,
real files and real processes."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from scheduler.control import process_groups
from scheduler.control.execution import Watchdog, _launch
from scheduler.control.journal import Journal
from scheduler.control.process_groups import ProcessId
from scheduler.model.disconnect import DEFAULT, Disconnect


def test_an_execution_goes_queued_started_ended_delivered(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.queued("web.0", "rq-web-0")
    first = journal.get("web.0")
    assert (first.rq_job, first.started, first.ended) == ("rq-web-0", False, False)
    horse = ProcessId(1234, 99, process_groups.boot_id())
    journal.started("web.0", "rq-web-0", horse, Disconnect("run", math.inf))
    journal.command_started("web.0", ProcessId(1240, 100, process_groups.boot_id()))
    started = journal.get("web.0")
    assert (started.horse, started.command.pid, started.disconnect) == (horse, 1240, Disconnect("run", math.inf))
    assert journal.ended("web.0", True, "exited with code 0")
    assert not journal.ended("web.0", False, "stopped")  # the first end recorded stands
    ended = Journal(tmp_path / "j.sqlite3").get("web.0")  # another connection sees it
    assert (ended.succeeded, ended.message, ended.delivered) == (True, "exited with code 0", False)
    journal.delivered("web.0")
    assert journal.get("web.0").delivered


def test_executions_with_include_leaves_out_delivered_ends_of_other_tasks(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    for task in ("a.0", "a.1", "a.2"):
        journal.queued(task, f"rq-{task}")
    journal.ended("a.1", True, "done")
    journal.delivered("a.1")
    journal.ended("a.2", True, "done")
    assert sorted(journal.executions(include=[])) == ["a.0", "a.2"]
    assert sorted(journal.executions(include=["a.1"])) == ["a.0", "a.1", "a.2"]
    journal.prune(keep_s=0)
    assert sorted(journal.executions()) == ["a.0", "a.2"]
    journal.forget("a.0")
    assert sorted(journal.executions()) == ["a.2"]


def test_the_heartbeat_age_is_on_the_machines_monotonic_clock(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    assert journal.since_beat() == (None, None)
    journal.beat(time.monotonic() - 5, 3.0)
    since, ttl = Journal(tmp_path / "j.sqlite3").since_beat()
    assert ttl == 3.0 and 5 <= since < 60
    journal.db.execute("UPDATE meta SET value = 'another-boot|1.0' WHERE key = 'beat'")
    assert journal.since_beat()[0] == math.inf  # a beat from another boot is as old as can be


def test_a_group_is_running_until_stopped_and_a_reused_pid_is_not_taken_for_it():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        leader = process_groups.identify(process.pid)
        assert process_groups.running(leader) and process_groups.group_running(leader)
        stranger = ProcessId(process.pid, leader.start + 1, leader.boot)  # the same pid, started later
        assert not process_groups.running(stranger) and not process_groups.group_running(stranger)
        assert process_groups.stop_group(stranger)  # nothing of it to stop: the process is left alone
        assert process.poll() is None
        assert not process_groups.stop_group(leader)  # signalled
        process.wait(timeout=10)
        assert not process_groups.running(leader) and not process_groups.group_running(leader)
        assert process_groups.stop_group(leader)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_group_whose_leader_died_still_runs_until_its_members_are_gone():
    script = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        identity = process_groups.identify(leader.pid)
        deadline = time.monotonic() + 10
        while len(list(process_groups._members(leader.pid))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        leader.kill()
        leader.wait()
        assert not process_groups.running(identity)
        assert process_groups.group_running(identity)  # its child lives on in the group
        assert not process_groups.stop_group(identity)
        deadline = time.monotonic() + 10
        while process_groups.group_running(identity) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not process_groups.group_running(identity)
    finally:
        try:
            os.killpg(leader.pid, 9)
        except ProcessLookupError:
            pass


def test_a_command_starts_only_once_its_group_is_recorded(tmp_path):
    """A work horse starts a command behind a gate it opens after recording the command's
    group: when the horse fails (or dies) before that, the command never runs."""
    journal = Journal(tmp_path / "j.sqlite3")
    journal.started("t.0", "rq", process_groups.identify(os.getpid()), DEFAULT)

    class DiesBeforeRecording(Watchdog):
        def command_started(self, pid: int) -> None:
            self.child = process_groups.identify(pid)
            raise RuntimeError("the horse died here")

    marker = tmp_path / "ran"
    watchdog = DiesBeforeRecording(journal, "t.0", DEFAULT, in_process=False)
    with pytest.raises(RuntimeError):
        _launch(["sh", "-c", f"touch {marker}"], dict(os.environ), watchdog)
    deadline = time.monotonic() + 10
    while process_groups.running(watchdog.child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not process_groups.running(watchdog.child)
    assert not marker.exists()

    recorded = Watchdog(journal, "t.0", DEFAULT, in_process=False)
    process = _launch(["sh", "-c", f"touch {marker}"], dict(os.environ), recorded)
    assert process.wait(timeout=10) == 0 and marker.exists()
    assert journal.get("t.0").command == recorded.command


def test_a_journal_written_before_freezing_gets_its_columns_and_reads_as_it_meant(tmp_path):
    """A journal of an earlier agent (no on_loss, no freeze, no lost): opened now, it gains
    the columns, and its runs read as they were then: stopped after a TTL, or never."""
    import sqlite3

    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(str(path))
    old.executescript("""
        CREATE TABLE executions (task TEXT PRIMARY KEY, rq_job TEXT, queued_at REAL, pgid INTEGER, start INTEGER,
            cmd_pgid INTEGER, cmd_start INTEGER, boot TEXT, started_at REAL, stop_after REAL, ended_at REAL,
            succeeded INTEGER, message TEXT, delivered INTEGER NOT NULL DEFAULT 0);
        INSERT INTO executions (task, pgid, stop_after) VALUES ('a.0', 10, NULL), ('a.1', 11, -1), ('a.2', 12, 30);
    """)
    old.commit()
    old.close()
    journal = Journal(path)
    runs = journal.executions()
    assert [runs[t].disconnect for t in ("a.0", "a.1", "a.2")] == [
        Disconnect("stop"), Disconnect("stop", math.inf), Disconnect("stop", 30.0)]
    assert runs["a.1"].disconnect.action(1e6, 3.0) == "run" and runs["a.0"].disconnect.action(3.1, 3.0) == "stop"
    assert not runs["a.0"].frozen and not runs["a.0"].lost
    assert journal.frozen("a.0") and not journal.frozen("a.0")  # marked once
    time.sleep(0.05)
    assert journal.thawed("a.0") >= 0.05 and journal.thawed("a.0") is None
    assert journal.get("a.0").frozen_s >= 0.05
    assert journal.ended("a.0", False, "stopped", lost=True) and journal.get("a.0").lost


def test_a_frozen_command_is_paused_and_its_timeout_does_not_count_the_freeze(tmp_path):
    """The watchdog freezes a running command (SIGSTOP of its group) once the heartbeat in
    the journal is a TTL old, and freezes it again if something resumes it while the
    heartbeat stays old; only a fresh heartbeat and a thaw (the agent's) let it go on. A
    command of 1.2 s (twelve sleeps of 0.1 s: a freeze pauses it between two) with a
    timeout of 1.5 s, frozen for 1.5 s, completes: the time frozen is not counted."""
    import threading

    from scheduler.control.execution import execute

    journal = Journal(tmp_path / "j.sqlite3")
    journal.beat(time.monotonic() - 10, 0.5)  # an agent that beat long ago, TTL 0.5 s
    journal.started("t.0", "rq", process_groups.identify(os.getpid()), DEFAULT)
    watchdog = Watchdog(journal, "t.0", DEFAULT, in_process=False)
    watchdog.start()
    seen = {}

    def agent():
        deadline = time.monotonic() + 10
        while (watchdog.command is None or not process_groups.stopped(watchdog.command)) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["frozen"] = Journal(tmp_path / "j.sqlite3").get("t.0").frozen
        process_groups.thaw_group(watchdog.command)  # something resumes it: frozen again
        time.sleep(0.75)
        seen["again"] = process_groups.stopped(watchdog.command)
        time.sleep(0.75)
        own = Journal(tmp_path / "j.sqlite3")
        # The agent is back and beats on, as an agent does (a single beat of a 0.5 s TTL
        # could be a TTL old again before the thaw on a loaded machine); the task is still
        # its node's, so it thaws the run.
        while not done.is_set():
            own.beat(time.monotonic(), 0.5)
            if process_groups.stopped(watchdog.command):
                process_groups.thaw_group(watchdog.command)
                seen.setdefault("thawed", own.thawed("t.0"))
            time.sleep(0.05)

    done = threading.Event()
    helper = threading.Thread(target=agent)
    helper.start()
    began = time.monotonic()
    try:
        succeeded, message = execute({"command": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 0.1; done"],
                                      "timeout": 1.5}, task_id="t.0", watchdog=watchdog)
    finally:
        done.set()
    took = time.monotonic() - began
    helper.join()
    watchdog.stop()
    assert (succeeded, message) == (True, "exited with code 0")
    assert seen["frozen"] and seen["again"] and seen["thawed"] >= 1.4
    assert took > 1.5 + 0.5  # well past its timeout, in wall time
    assert journal.get("t.0").frozen_s >= 1.4

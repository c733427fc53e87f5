"""`--wait-replicas N` with a master that has fewer than N replicas in sync: said once,
then writes go on without the WAIT (`--on-missing-replicas write`) or are refused
(`refuse`), instead of paying WAIT's timeout on every write.

A real master and a real replica (redis-server --replicaof, tests/redis_topologies.py);
the replica is SIGKILLed and started again. What is counted is what the master was sent:
its `INFO commandstats` (WAIT and EVALSHA calls), never a duration.
"""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner

from scheduler.state.app import App
from scheduler.state.replication import ReplicasMissing, ReplicaWatch, connected_replicas, missing_count
from scheduler.tools.cli import main

from redis_topologies import HOST, PASSWORD, Server, free_ports, plain_client, wait_until

WAIT_S = 30  # deadlines only


class MasterAndReplica:
    def __init__(self, directory):
        self.directory = directory
        self.master_port, self.replica_port = free_ports(2)
        self.master = Server(directory / "master", self.master_port, ["--requirepass", PASSWORD], PASSWORD)
        self.master.wait_ping()
        self.replica = None
        self.start_replica()

    @property
    def url(self) -> str:
        return f"redis://:{PASSWORD}@{HOST}:{self.master_port}/0"

    def start_replica(self) -> None:
        self.replica = Server(self.directory / "replica", self.replica_port,
                              ["--replicaof", HOST, str(self.master_port), "--requirepass", PASSWORD,
                               "--masterauth", PASSWORD], PASSWORD)
        self.replica.wait_ping()
        wait_until(lambda: self.in_sync() == 1, WAIT_S, "the replica to be in sync")

    def kill_replica(self) -> None:
        """SIGKILL the replica, and wait until the master has seen it go (until then the
        master still counts it, and WAIT with it)."""
        self.replica.kill()
        wait_until(lambda: self.in_sync() == 0, WAIT_S, "the master to see its replica gone")

    def in_sync(self) -> int:
        return connected_replicas(plain_client(self.master_port).info("replication"))

    def calls(self, command: str) -> int:
        return plain_client(self.master_port).info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)

    def stop(self) -> None:
        for server in (self.replica, self.master):
            if server is not None:
                server.stop()


@pytest.fixture
def pair(tmp_path):
    servers = MasterAndReplica(tmp_path)
    yield servers
    servers.stop()


def write(app: App) -> None:
    """One durable script call that changes nothing (start.lua on a task that does not exist)."""
    assert app.scripts.start(keys=[app.keys.task("nothing.0")], args=["n1", app.keys.events, ""]) == 0


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sched.replication"]


def test_a_master_without_its_replica_is_said_once_and_written_to_without_waiting(pair, caplog):
    caplog.set_level(logging.INFO, logger="sched.replication")
    app = App(redis_url=pair.url, namespace="w", wait_replicas=1, on_missing_replicas="write")
    write(app)  # loads the script
    waits = pair.calls("wait")
    for _ in range(3):
        write(app)
    assert pair.calls("wait") == waits + 3  # replica in sync: every write waits for it
    assert not app.scripts.watch.missing and messages(caplog) == []

    pair.kill_replica()
    write(app)  # WAIT gives up after its timeout, and the master's count says why
    assert app.scripts.watch.missing and missing_count() >= 1
    waits, evals = pair.calls("wait"), pair.calls("evalsha")
    for _ in range(20):
        write(app)
    assert pair.calls("wait") == waits  # no WAIT while the replica is missing...
    assert pair.calls("evalsha") == evals + 20  # ...and every write was made
    said = messages(caplog)
    assert len(said) == 1 and "has 0 replica(s) in sync, fewer than the 1 that --wait-replicas asks for" in said[0]
    assert "writes go on without waiting" in said[0] and "namespace w" in said[0]
    assert caplog.records[-1].levelno == logging.WARNING

    pair.start_replica()
    wait_until(lambda: write(app) or not app.scripts.watch.missing, WAIT_S, "the watch to see the replica back")
    said = messages(caplog)
    assert len(said) == 2 and "has 1 replica(s) in sync again" in said[1]
    waits = pair.calls("wait")
    write(app)
    assert pair.calls("wait") == waits + 1  # waited for again


def test_refuse_mode_refuses_writes_unsent_until_the_replica_is_back(pair):
    app = App(redis_url=pair.url, namespace="r", wait_replicas=1, on_missing_replicas="refuse")
    write(app)
    pair.kill_replica()
    write(app)  # this one was sent (WAIT cannot undo it): it is what shows the replica gone
    evals = pair.calls("evalsha")
    with pytest.raises(ReplicasMissing) as refused:
        write(app)
    message = str(refused.value)
    assert message == ("write refused: namespace r's master has 0 replica(s) in sync, fewer than the 1 that "
                       "--wait-replicas asks for (--on-missing-replicas refuse); nothing was written.")
    assert PASSWORD not in message
    assert pair.calls("evalsha") == evals  # nothing was sent
    pair.start_replica()
    wait_until(lambda: _written(app), WAIT_S, "writes to be taken again")
    assert not app.scripts.watch.missing


def _written(app: App) -> bool:
    try:
        write(app)
    except ReplicasMissing:
        return False
    return True


def test_a_new_process_learns_of_missing_replicas_before_its_first_write(pair):
    """An RQ work horse is a new process for every task: it reads the master's count once
    rather than paying WAIT's timeout to learn it."""
    pair.kill_replica()
    waits = pair.calls("wait")
    app = App(redis_url=pair.url, namespace="n", wait_replicas=1)
    write(app)
    assert app.scripts.watch.missing and pair.calls("wait") == waits


def test_audit_says_the_master_is_short_of_replicas(pair, monkeypatch):
    def unset():  # the CLI hands its options to child processes through the environment:
        for name in ("SCHED_WAIT_REPLICAS", "SCHED_ON_MISSING_REPLICAS"):  # empty is unset,
            monkeypatch.setenv(name, "")  # and the first call has the environment restored after

    unset()
    runner = CliRunner()
    audit = ["--redis-url", pair.url, "--namespace", "a", "--wait-replicas", "1", "audit"]
    done = runner.invoke(main, audit)
    assert done.exit_code == 0 and "note:" not in done.output, done.output
    pair.kill_replica()
    done = runner.invoke(main, audit)
    assert done.exit_code == 0, done.output  # a note, not a broken invariant
    assert ("note: the namespace's master has 0 replica(s) in sync, fewer than the 1 that --wait-replicas asks "
            "for: writes go on without waiting for replicas (--on-missing-replicas write)") in done.output
    done = runner.invoke(main, [*audit[:-1], "--on-missing-replicas", "refuse", "audit", "--json"])
    assert "writes are refused (--on-missing-replicas refuse)" in done.output
    unset()
    assert runner.invoke(main, ["--redis-url", pair.url, "--namespace", "a", "audit"]).output.count("note:") == 0


def test_the_watch_says_each_change_once(caplog):
    caplog.set_level(logging.INFO, logger="sched.replication")
    now = [100.0]
    watch = ReplicaWatch(2, "write", "ns", clock=lambda: now[0])
    assert watch.check_due() and not watch.missing
    watch.saw(2)
    assert not watch.missing and not watch.check_due()
    now[0] += 1.0
    assert watch.check_due()
    for count in (1, 0, 1):
        watch.saw(count)
        assert watch.missing
    assert len(messages(caplog)) == 1 and caplog.records[0].levelno == logging.WARNING
    now[0] += 5.0
    watch.saw(2)
    assert not watch.missing
    said = messages(caplog)
    assert len(said) == 2 and said[1] == ("namespace ns: its master has 2 replica(s) in sync again (--wait-replicas 2): "
                                          "writes wait for them again, after 5.0 s without")
    quiet = ReplicaWatch(1, "write", "ns")
    quiet.saw(0)  # a process's first look: said, but quietly
    assert quiet.missing and caplog.records[-1].levelno == logging.INFO
    with pytest.raises(Exception) as bad:
        ReplicaWatch(1, "maybe")
    assert str(bad.value) == "--on-missing-replicas (SCHED_ON_MISSING_REPLICAS) is 'maybe': use write or refuse."


def test_a_user_that_may_not_read_info_still_writes_waiting_for_wait(pair, caplog):
    caplog.set_level(logging.INFO, logger="sched.replication")
    plain_client(pair.master_port).execute_command("ACL", "SETUSER", "limited", "on", ">limited-pw", "~*", "&*",
                                                   "+@all", "-info")
    app = App(redis_url=f"redis://limited:limited-pw@{HOST}:{pair.master_port}/0", namespace="b", wait_replicas=1)
    write(app)
    waits = pair.calls("wait")
    write(app)
    assert app.scripts.watch.blind and pair.calls("wait") == waits + 1  # as without a watch
    said = messages(caplog)
    assert len(said) == 1 and said[0].startswith("the master's INFO replication cannot be read"), said

"""The node's own record of what it runs: a SQLite file in the agent's state folder.

The node agent and the RQ work horses it starts share it (the standard library's sqlite3,
WAL, every write a transaction synced to disk before it returns), so it outlives any of
those processes and any outage of Redis. It holds:

- **executions**, one row per task: its RQ job and when it was queued; once a work horse
  started it, the horse's and the command's process groups (each named by its leader,
  a ``process_groups.ProcessId``), when, and what it does without a heartbeat (its job's
  ``disconnect``); while it is frozen, since when, and how long it was frozen before;
  once it ended, how (succeeded, message, and whether the end was the infrastructure's
  doing: lost), and whether Redis has that yet. A result is written here before Redis is
  told, so a run that ends while Redis is away is recorded as it ended when Redis answers.
- **the last renewed heartbeat**, on the machine's monotonic clock (the same in every
  process), with the heartbeat TTL: each work horse watches it and freezes or stops its
  command as its job's ``disconnect`` says when its agent has not renewed it in time (no
  split brain, even when the agent is dead or paused).
- **the RQ worker processes** the agent started, so that the next agent of the node stops
  those a dead one left behind.
"""

from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from scheduler.control.process_groups import ProcessId, boot_id
from scheduler.model.disconnect import STOP, Disconnect

SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    task TEXT PRIMARY KEY,
    rq_job TEXT,
    queued_at REAL,           -- wall clock of the last time the agent queued it in RQ
    pgid INTEGER,             -- the work horse's group (set once the task started)
    start INTEGER,
    cmd_pgid INTEGER,         -- the command's group (commands only)
    cmd_start INTEGER,
    boot TEXT,
    started_at REAL,
    stop_after REAL,          -- seconds without a heartbeat before it stops; NULL: on_loss's default; -1: never
    ended_at REAL,
    succeeded INTEGER,
    message TEXT,
    delivered INTEGER NOT NULL DEFAULT 0,
    assigned INTEGER,         -- the task's assigned_ms: which placement of the task id this run is
    on_loss TEXT,             -- freeze, stop or run (NULL: written before on_loss existed, stop)
    frozen_at REAL,           -- monotonic clock when it was frozen; NULL while it is not
    frozen_s REAL NOT NULL DEFAULT 0,  -- seconds it was frozen before, in all
    lost INTEGER NOT NULL DEFAULT 0    -- its end was the infrastructure's doing (recorded lost, not failed)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS rq_workers (name TEXT PRIMARY KEY, pid INTEGER, start INTEGER, boot TEXT);
"""
NEVER = -1.0  # stop_after as stored for "never"
# Columns added since the first journals, in the order of SCHEMA (a journal written before
# them gets them, in that order, when it is opened).
ADDED = (("assigned", "INTEGER"), ("on_loss", "TEXT"), ("frozen_at", "REAL"),
         ("frozen_s", "REAL NOT NULL DEFAULT 0"), ("lost", "INTEGER NOT NULL DEFAULT 0"))


@dataclass(frozen=True, slots=True)
class Execution:
    task: str
    rq_job: str | None = None
    queued_at: float | None = None
    horse: ProcessId | None = None
    command: ProcessId | None = None
    started_at: float | None = None
    disconnect: Disconnect = Disconnect(STOP)  # what it does without a heartbeat
    ended_at: float | None = None
    succeeded: bool | None = None
    message: str = ""
    delivered: bool = False
    assigned: int | None = None  # the placement (task.assigned_ms) the run belongs to
    frozen_at: float | None = None  # monotonic clock when it was frozen; None while it is not
    frozen_s: float = 0.0  # seconds it was frozen before
    lost: bool = False  # its end was the infrastructure's doing

    @property
    def started(self) -> bool:
        return self.horse is not None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def frozen(self) -> bool:
        return self.frozen_at is not None

    def frozen_for(self) -> float:
        """Seconds it has been frozen in all, this freeze included."""
        return self.frozen_s + (time.monotonic() - self.frozen_at if self.frozen_at is not None else 0.0)


def _execution(row) -> Execution:
    (task, rq_job, queued_at, pgid, start, cmd_pgid, cmd_start, boot, started_at, stop_after, ended_at, succeeded,
     message, delivered, assigned, on_loss, frozen_at, frozen_s, lost) = row
    return Execution(
        task=task, rq_job=rq_job, queued_at=queued_at,
        horse=ProcessId(pgid, start or 0, boot or "") if pgid else None,
        command=ProcessId(cmd_pgid, cmd_start or 0, boot or "") if cmd_pgid else None,
        started_at=started_at, disconnect=Disconnect(on_loss or STOP, math.inf if stop_after == NEVER else stop_after),
        ended_at=ended_at, succeeded=None if succeeded is None else bool(succeeded), message=message or "",
        delivered=bool(delivered), assigned=assigned, frozen_at=frozen_at, frozen_s=frozen_s or 0.0, lost=bool(lost))


class Journal:
    """One connection to the node's journal (make one per process and thread)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        for column, kind in ADDED:  # a journal written before the column existed
            try:
                self.db.execute(f"ALTER TABLE executions ADD COLUMN {column} {kind}")
            except sqlite3.OperationalError:
                pass  # it has the column

    def close(self) -> None:
        self.db.close()

    # Executions.
    def executions(self, include: list[str] | None = None) -> dict[str, Execution]:
        """Every execution, or with ``include``, those Redis may not have the end of yet
        (not ended, or not delivered) and those of the tasks in ``include``."""
        if include is None:
            rows = self.db.execute("SELECT * FROM executions")
        else:
            marks = ",".join("?" * len(include))
            rows = self.db.execute(f"SELECT * FROM executions WHERE delivered = 0 OR task IN ({marks})", include)
        return {row[0]: _execution(row) for row in rows}

    def get(self, task: str) -> Execution | None:
        row = self.db.execute("SELECT * FROM executions WHERE task = ?", (task,)).fetchone()
        return _execution(row) if row else None

    def queued(self, task: str, rq_job: str, assigned: int | None = None) -> None:
        """The agent queued the task in RQ (again): forget any earlier try that never started."""
        self.db.execute("INSERT INTO executions (task, rq_job, queued_at, assigned) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT(task) DO UPDATE SET rq_job = excluded.rq_job, queued_at = excluded.queued_at, "
                        "assigned = excluded.assigned", (task, rq_job, time.time(), assigned))

    def started(self, task: str, rq_job: str, horse: ProcessId, disconnect: Disconnect,
                assigned: int | None = None) -> None:
        """A work horse started the task (start.lua said so)."""
        after = disconnect.stop_after
        stored = NEVER if after == math.inf else after
        self.db.execute(
            "INSERT INTO executions (task, rq_job, pgid, start, boot, started_at, stop_after, on_loss, assigned) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(task) DO UPDATE SET rq_job = excluded.rq_job, "
            "pgid = excluded.pgid, start = excluded.start, boot = excluded.boot, started_at = excluded.started_at, "
            "stop_after = excluded.stop_after, on_loss = excluded.on_loss, assigned = excluded.assigned",
            (task, rq_job, horse.pid, horse.start, horse.boot, time.time(), stored, disconnect.on_loss, assigned))

    def command_started(self, task: str, command: ProcessId) -> None:
        self.db.execute("UPDATE executions SET cmd_pgid = ?, cmd_start = ? WHERE task = ?",
                        (command.pid, command.start, task))

    def ended(self, task: str, succeeded: bool, message: str, lost: bool = False) -> bool:
        """Record how the run ended (``lost``: by the infrastructure's doing, not its own);
        the first end recorded stands. Returns whether this one did."""
        cursor = self.db.execute("UPDATE executions SET ended_at = ?, succeeded = ?, message = ?, lost = ? "
                                 "WHERE task = ? AND ended_at IS NULL",
                                 (time.time(), int(succeeded), message, int(lost), task))
        return cursor.rowcount == 1

    def frozen(self, task: str) -> bool:
        """The run's processes are being frozen (SIGSTOP); returns whether it was not already."""
        cursor = self.db.execute("UPDATE executions SET frozen_at = ? WHERE task = ? AND frozen_at IS NULL "
                                 "AND ended_at IS NULL", (time.monotonic(), task))
        return cursor.rowcount == 1

    def thawed(self, task: str) -> float | None:
        """The run's processes were resumed (SIGCONT): the freeze's length, or None if it
        was not marked frozen."""
        now = time.monotonic()
        row = self.db.execute("SELECT frozen_at FROM executions WHERE task = ?", (task,)).fetchone()
        if row is None or row[0] is None:
            return None
        self.db.execute("UPDATE executions SET frozen_s = frozen_s + (? - frozen_at), frozen_at = NULL "
                        "WHERE task = ? AND frozen_at IS NOT NULL", (now, task))
        return now - row[0]

    def frozen_for(self, task: str) -> float:
        """Seconds the run has been frozen in all (0 for a task it does not know)."""
        execution = self.get(task)
        return execution.frozen_for() if execution is not None else 0.0

    def delivered(self, task: str) -> None:
        """Redis has the end."""
        self.db.execute("UPDATE executions SET delivered = 1 WHERE task = ?", (task,))

    def forget(self, task: str) -> None:
        self.db.execute("DELETE FROM executions WHERE task = ?", (task,))

    def prune(self, keep_s: float) -> None:
        """Drop ends Redis has had for longer than ``keep_s`` (kept meanwhile in case a
        failover loses them from Redis)."""
        self.db.execute("DELETE FROM executions WHERE delivered = 1 AND ended_at < ?", (time.time() - keep_s,))

    # The heartbeat, as the work horses see it.
    def beat(self, monotonic_s: float, ttl_s: float) -> None:
        """The agent renewed its heartbeat (sent at ``monotonic_s``); its TTL is ``ttl_s``."""
        self.db.executemany("INSERT INTO meta (key, value) VALUES (?, ?) "
                            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            [("beat", f"{boot_id()}|{monotonic_s!r}"), ("ttl", repr(ttl_s))])

    def since_beat(self) -> tuple[float | None, float | None]:
        """(seconds since the agent last renewed its heartbeat, its TTL); None for either
        when unknown. A beat from before this boot is as old as can be."""
        rows = dict(self.db.execute("SELECT key, value FROM meta WHERE key IN ('beat', 'ttl')"))
        ttl = float(rows["ttl"]) if "ttl" in rows else None
        if "beat" not in rows:
            return None, ttl
        boot, _, sent = rows["beat"].rpartition("|")
        return (time.monotonic() - float(sent) if boot == boot_id() else math.inf), ttl

    # RQ worker processes.
    def rq_workers(self) -> dict[str, ProcessId]:
        return {name: ProcessId(pid, start or 0, boot or "")
                for name, pid, start, boot in self.db.execute("SELECT * FROM rq_workers")}

    def rq_worker_started(self, name: str, process: ProcessId) -> None:
        self.db.execute("INSERT OR REPLACE INTO rq_workers VALUES (?, ?, ?, ?)",
                        (name, process.pid, process.start, process.boot))

    def rq_worker_gone(self, name: str) -> None:
        self.db.execute("DELETE FROM rq_workers WHERE name = ?", (name,))

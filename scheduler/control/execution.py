"""Running a placed task on its node: the function RQ executes for every task.

The node's agent enqueues ``run_task`` on the node's own RQ queue when a task is assigned
there. It first moves the task ``assigned -> running`` (refusing to run a task that was
stopped, lost or replaced while it waited), runs the job's ``run`` (a Python function
``module:function`` or a command, where exit code 0 is success), keeping what it prints
(``scheduler/control/output.py``), and reports the end,
which releases the task's resources and lets the job's type decide what comes next.

Run by an agent, it keeps the node's journal (``journal.py``) as it goes: that it started
(its work horse's and its command's process groups), then how the run ended, *before* it
tells Redis, so an end is never lost to a Redis that is away (the agent delivers it when
Redis answers). A task it could not start (Redis did not answer) is left assigned, for
the agent to queue again: it is never failed for a start that did not happen. While the
run lasts, a watchdog thread acts on the agent's heartbeat as the job's ``disconnect``
says (``scheduler/model/disconnect.py``): by default it freezes the run (SIGSTOP) once the
agent has gone a heartbeat TTL without renewing it, so that a node cut off from Redis, or
whose agent died or was paused, does nothing beside the replacements the scheduler may
start elsewhere, and loses nothing if it was only Redis that was away: the agent resumes
the run when it reaches Redis again and the task is still this node's. A command's
``timeout`` does not count the time it was frozen.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import redis

from scheduler.control import process_groups, reconcile
from scheduler.control.journal import Journal
from scheduler.control.output import Output, StreamWriter
from scheduler.model import ASSIGNED
from scheduler.model.disconnect import FREEZE, RUN, STOP, Disconnect
from scheduler.model.errors import NotFound, SchedError
from scheduler.state.app import App
from scheduler.state.connection import REDIS_ERRORS, scrub

log = logging.getLogger("sched.execution")

WATCH_EVERY_S = 0.25  # how often a run looks at its agent's last heartbeat


def rq_job_id(namespace: str, task_id: str) -> str:
    """RQ accepts letters, digits, '_' and '-' in job ids; task ids also have a '.', and
    those of a periodic or dispatched launch a '/'. Such an id gets a digest of the task id
    after it, so that ``a/periodic-1.0`` and a job named ``a_periodic-1`` never share one
    (an id without '/' keeps the form it always had: ``..._<index>``, never ``-<digest>``)."""
    plain = re.sub(r"[^A-Za-z0-9_-]", "_", f"sched-{namespace}-{task_id}")
    if "/" not in task_id:
        return plain
    return f"{plain}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"


def task_environment(task, spec, payload_path: str | None = None) -> dict[str, str]:
    """What a task's command (or function) finds in its environment beside the agent's
    own: ``run.env``, then ``SCHED_TASK_ID``, ``SCHED_JOB_ID``, ``SCHED_TASK_INDEX`` (its
    slot: the same for a task and its retries), ``SCHED_META_<KEY>`` for each key of the
    job's meta (a dispatch's included) and ``SCHED_PAYLOAD`` (the file holding a
    dispatch's payload), which the spec cannot override."""
    env = dict((spec.run or {}).get("env") or {})
    for key, value in (spec.meta or {}).items():
        env[f"SCHED_META_{key.upper()}"] = value
    env.update(SCHED_TASK_ID=task.id, SCHED_JOB_ID=task.job, SCHED_TASK_INDEX=str(task.slot))
    if payload_path is not None:
        env["SCHED_PAYLOAD"] = payload_path
    return env


def execute(run: dict | None, output: Output | None = None, task_id: str | None = None,
            watchdog: Watchdog | None = None, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Run a task's ``run`` spec; returns (succeeded, message). What it prints (and a
    function's return value or traceback) goes to ``output`` as it comes. A command gets
    ``env`` (:func:`task_environment`; by default the task's id as ``SCHED_TASK_ID``) in
    its environment, and runs in a session (so a process group) of its own: a timeout
    stops the whole group, and whatever the command leaves running in it is stopped when
    it exits. A function runs with ``env`` set in this process's environment meanwhile.
    With a ``watchdog``, nothing starts once it has stopped the run, and a command starts
    only after its group is in the journal (``_launch``)."""
    output = output or Output(lambda fields: None)
    if env is None:
        env = {"SCHED_TASK_ID": task_id} if task_id else {}
    try:
        with output.flushing():
            succeeded, message = _execute(run, output, env, watchdog)
        if watchdog is not None:  # in the journal before anything waits for Redis
            succeeded, message = watchdog.finished(succeeded, message)
        return succeeded, message
    finally:
        output.flush()


@contextmanager
def _environment(extra: dict[str, str]):
    """``extra`` in this process's environment while a function task runs (its RQ work
    horse is a process of its own), as it was afterwards."""
    before = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _execute(run: dict | None, output: Output, extra: dict[str, str], watchdog: Watchdog | None) -> tuple[bool, str]:
    if run is None:
        return True, "nothing to run"
    if watchdog is not None and watchdog.check():
        return False, watchdog.stopped
    if "func" in run:
        module_name, _, func_name = run["func"].partition(":")
        try:
            func = getattr(importlib.import_module(module_name), func_name)
            with redirect_stdout(StreamWriter(output, "stdout")), redirect_stderr(StreamWriter(output, "stderr")), \
                    _environment(extra):
                value = func(*run.get("args", []), **run.get("kwargs", {}))
        except Exception as exc:  # the task's own failure, reported as such
            output.note(traceback=traceback.format_exc())
            return False, f"{run['func']} raised {type(exc).__name__}: {exc}"
        output.note(result=repr(value))
        return True, f"{run['func']} returned {value!r}"[:500]
    env = {**os.environ, **extra}
    if shutil.which(run["command"][0], path=env.get("PATH")) is None:
        return False, f"command not found: {run['command'][0]}"
    try:
        process = _launch(run["command"], env, watchdog)
    except FileNotFoundError:
        return False, f"command not found: {run['command'][0]}"
    if process is None:
        return False, watchdog.stopped
    readers = [threading.Thread(target=_pump, args=(pipe, output, name), daemon=True)
               for pipe, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
    for reader in readers:
        reader.start()
    try:
        code = _wait(process, run.get("timeout"), watchdog)
        if watchdog is not None:
            watchdog.exited()
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.wait()
        return False, f"command timed out after {run.get('timeout')} s"
    finally:
        _kill_group(process.pid)  # anything it left running (which would also hold its pipes open)
        for reader in readers:
            reader.join()
    output.note(exit_code=code)
    if code == 0:
        return True, "exited with code 0"
    tail = (output.text("stderr") or output.text("stdout")).strip().splitlines()[-1:] or [""]
    return False, f"exited with code {code}" + (f": {tail[0][:300]}" if tail[0] else "")


# A command's first process waits for a line on its stdin from its work horse, which
# writes it once the command's group is in the journal: a horse killed before that closes
# the pipe, and the command never starts, so no command ever runs that its agent cannot
# find. (The command itself gets /dev/null as stdin, as a work horse has.)
GATE = 'read -r _ && exec "$@" </dev/null'


def _launch(command: list[str], env: dict, watchdog: Watchdog | None) -> subprocess.Popen | None:
    """Start ``command`` in a session of its own; with a ``watchdog``, behind the gate and
    under its lock, and not at all (None) if it has stopped the run."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "env": env, "start_new_session": True}
    if watchdog is None:
        return subprocess.Popen(command, **pipes)
    with watchdog.lock:
        if watchdog.stopped:
            return None
        gate, opened = os.pipe()
        try:
            process = subprocess.Popen(["/bin/sh", "-c", GATE, "sh", *command], stdin=gate, **pipes)
        finally:
            os.close(gate)
        try:
            watchdog.command_started(process.pid)
            os.write(opened, b"go\n")
        finally:
            os.close(opened)
    return process


def _wait(process: subprocess.Popen, timeout: float | None, watchdog: Watchdog | None) -> int:
    """The command's exit code; TimeoutExpired once it has run for ``timeout`` seconds, not
    counting the time it was frozen."""
    if timeout is None:
        return process.wait()
    began = time.monotonic()
    while True:
        left = timeout + (watchdog.frozen_for() if watchdog is not None else 0.0) - (time.monotonic() - began)
        if left <= 0:
            raise subprocess.TimeoutExpired(process.args, timeout)
        try:
            return process.wait(timeout=min(left, 1.0))  # then look again: a freeze moves the deadline
        except subprocess.TimeoutExpired:
            continue


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(pipe, output: Output, stream: str) -> None:
    """Copy a child's pipe into ``output`` as it arrives."""
    with pipe:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            output.write(stream, chunk)


def run_task(url: str, namespace: str, node: str, task_id: str, rq_url: str | None = None,
             journal: str | None = None) -> dict:
    """The RQ job: start the task if it is still ours, run it, report how it ended.

    ``url`` is the scheduling state's Redis (any topology, a cluster included), which RQ's
    own connection (``rq_url``, the execution Redis this job came from) is not: on a
    cluster the two always differ (RQ cannot run on a cluster). ``journal`` is the node's
    journal (the agent names it): without one, an end Redis does not take raises.

    Until the task has started nothing is recorded against it. A Redis that does not
    answer (a failover) is waited for, each call within the failover bound
    (``scheduler/state/failover.py``); if it stays away the job ends without having
    started the task, returning ``{"ran": False, "started": False, "reason": ...}``: the
    task is still assigned to this node, and the agent's next sync queues it again."""
    app = App(redis_url=url, namespace=namespace, rq_url=rq_url)
    record = Journal(journal) if journal else None
    try:
        begun = _begin(app, node, task_id, record)
    except (*REDIS_ERRORS, SchedError) as exc:
        reason = f"Redis did not answer before the task started: {scrub(str(exc), url)}"
        log.warning("task %s not started: %s", task_id, reason, extra={"fields": {"task": task_id, "node": node}})
        return {"task": task_id, "ran": False, "started": False, "reason": reason}
    if not isinstance(begun, tuple):  # not this node's to run now (and why, if it says)
        return {"task": task_id, "ran": False, **({"message": begun} if begun else {})}
    task, spec = begun
    watchdog = None
    if record is not None:
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)  # lead a group of our own (an RQ work horse already does)
        record.started(task_id, rq_job_id(namespace, task_id), process_groups.identify(os.getpid()),
                       spec.disconnect, task.assigned_ms)
        in_process = spec.run is not None and "func" in spec.run
        if in_process:
            # Frozen with its function, this process dies of SIGHUP if its RQ worker dies
            # meanwhile (POSIX sends SIGHUP, then SIGCONT, to a process group orphaned while
            # stopped); instead it goes on, and its watchdog freezes it again at its next
            # look if the heartbeat is still overdue.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        watchdog = Watchdog(record, task_id, spec.disconnect, in_process)
        watchdog.start()
    output = Output(lambda fields: _quietly(app.store.save_output, task_id, fields))
    payload = _payload_file(app, task, journal)
    try:
        env = task_environment(task, spec, payload)
        succeeded, message = execute(spec.run, output, task_id, watchdog, env)  # (journalled by the watchdog)
    finally:
        if watchdog is not None:
            watchdog.stop()
        if payload is not None:
            shutil.rmtree(os.path.dirname(payload), ignore_errors=True)
    lost = watchdog is not None and watchdog.lost
    try:
        ended = reconcile.task_ended(app.store, app.store.get_task(task_id), succeeded, message, lost=lost)
    except (redis.RedisError, SchedError):
        if record is None:
            raise
        return {"task": task_id, "ran": True, "succeeded": succeeded, "message": message, "recorded": False,
                **({"lost": True} if lost else {})}
    if record is not None:
        record.delivered(task_id)
    return {"task": task_id, "ran": True, "succeeded": succeeded, "message": message, **ended}


def _begin(app: App, node: str, task_id: str, record: Journal | None):
    """Connect, read what to run, then start the task (``start.lua``): (task, its job's
    spec), or else why it is not this node's to run now (None: it is not this node's at
    all). Everything before the start only reads, and the start carries a token of this
    run, so a start resent after a lost reply is recognised as this run's own (see
    ``Store.start_task``)."""
    store = app.store
    try:
        task = store.get_task(task_id)
        spec = store.job_spec(task.job, task.version)
    except NotFound:  # removed meanwhile: nothing to run
        return None
    if task.state != ASSIGNED or task.node != node:
        return None
    since, ttl = record.since_beat() if record is not None else (None, None)
    if spec.disconnect.action(since, ttl) != RUN:  # it would be frozen or stopped at once: start nothing
        return f"not started: its agent has not renewed its heartbeat for {since:.1f} s"
    if not store.start_task(task_id, node, token=secrets.token_hex(8)):
        return None
    return task, spec


def _payload_file(app: App, task, journal: str | None) -> str | None:
    """The dispatch payload of the task's job written to a file of its own (in the agent's
    state folder, beside its journal), for ``SCHED_PAYLOAD``; None when there is none."""
    try:
        payload = app.store.job_payload(task.job)
    except (redis.RedisError, SchedError):
        payload = None
    if payload is None:
        return None
    folder = tempfile.mkdtemp(prefix="payload-", dir=os.path.dirname(journal) if journal else None)
    path = os.path.join(folder, "payload")
    with open(path, "wb") as handle:
        handle.write(payload)
    return path


def _quietly(save, task_id: str, fields: dict) -> None:
    """Output is kept best-effort: a Redis that is away must not stop the run."""
    try:
        save(task_id, fields)
    except (redis.RedisError, SchedError):
        pass


class Watchdog(threading.Thread):
    """Acts on the agent's heartbeat for one run, as the job's ``disconnect`` says: once the
    agent has gone a TTL without renewing it (as the agent wrote both in the journal), it
    freezes the run (SIGSTOP: the command's process group, or the work horse's own when the
    task is a function running in it), again at each look while the heartbeat stays overdue
    (something may have resumed it); past ``stop_after`` it records the end in the journal
    (lost: the infrastructure's doing) and kills the run. Only the agent resumes a frozen
    run, once it has reached Redis and seen the task is still its node's. ``lock`` is held
    while a command is being started, so a command starts with its group known, or not at
    all once the run is stopped."""

    def __init__(self, record: Journal, task_id: str, disconnect: Disconnect, in_process: bool):
        super().__init__(name=f"watchdog-{task_id}", daemon=True)
        self.record, self.task_id, self.disconnect, self.in_process = record, task_id, disconnect, in_process
        self.lock = threading.RLock()
        self.command: process_groups.ProcessId | None = None
        self.stopped: str | None = None  # why, once the watchdog stopped the run
        self.over = False  # the command exited, or the run's end is recorded: nothing left to stop
        self.lost = False  # the end that stands was the infrastructure's doing (a stop for want of a heartbeat)
        self._done = threading.Event()

    def command_started(self, pid: int) -> None:
        """Called in the run's thread, under ``lock`` (``record`` is that thread's connection)."""
        self.command = process_groups.identify(pid)
        self.record.command_started(self.task_id, self.command)

    def exited(self) -> None:
        """The command exited by itself: however late its end is recorded, it was not stopped."""
        with self.lock:
            self.over = True

    def finished(self, succeeded: bool, message: str) -> tuple[bool, str]:
        """Record the run's end in the journal, unless it was stopped first (by the watchdog
        or the agent's fence); the end that stands (``lost`` says whether it was a stop).
        (Called in the run's thread.)"""
        with self.lock:
            self.over = True
            if not self.record.ended(self.task_id, succeeded, message):
                first = self.record.get(self.task_id)
                if first is not None and first.ended:
                    self.lost = first.lost
                    return bool(first.succeeded), first.message
            return succeeded, message

    def frozen_for(self) -> float:
        """Seconds the run has been frozen so far. (Called in the run's thread.)"""
        return self.record.frozen_for(self.task_id)

    def check(self, journal: Journal | None = None) -> bool:
        """Freeze or stop the run if its agent's heartbeat is overdue; returns whether it is
        stopped. ``journal``: the watchdog thread's own connection, which alone freezes and
        stops a function running in this process; without it (the run's thread), the
        run's thread's."""
        with self.lock:
            if self.stopped:
                return True
            if self.over:
                return False
            own = journal or self.record
            since, ttl = own.since_beat()
            action = self.disconnect.action(since, ttl)
            if action == FREEZE and journal is not None:
                self._freeze(journal)
            if action != STOP:
                return False
            why = (f"stopped after {since:.1f} s without a heartbeat from its agent (limit "
                   f"{self.disconnect.stop_limit(ttl):g} s): its node may be declared down and the task replaced")
            own.ended(self.task_id, False, why, lost=True)
            self.stopped = why
            if self.command is not None:
                process_groups.stop_group(self.command)
            elif self.in_process and journal is not None:
                os.killpg(os.getpgrp(), signal.SIGKILL)  # a function runs in this process: stop it with us
            return True

    def _freeze(self, journal: Journal) -> None:
        if self.command is not None:
            journal.frozen(self.task_id)
            process_groups.freeze_group(self.command)
        elif self.in_process:
            journal.frozen(self.task_id)  # (written before we stop: nothing held while frozen)
            os.killpg(os.getpgrp(), signal.SIGSTOP)  # a function runs in this process: freeze it with us

    def stop(self) -> None:
        self._done.set()

    def run(self) -> None:
        journal = Journal(self.record.path)  # a connection of this thread's own
        while not self._done.wait(WATCH_EVERY_S):
            try:
                if self.check(journal):
                    return
            except sqlite3.Error:
                continue

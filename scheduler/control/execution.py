"""Running a placed task on its node: the function RQ executes for every task.

The node's agent enqueues ``run_task`` on the node's own RQ queue when a task is assigned
there. It first moves the task ``assigned -> running`` (refusing to run a task that was
stopped, lost or replaced while it waited), runs the job's ``run`` (a Python function
``module:function`` or a command, where exit code 0 is success), keeping what it prints
(``scheduler/control/output.py``), and reports the end,
which releases the task's resources and lets the job's type decide what comes next.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import secrets
import subprocess
import threading
import traceback
from contextlib import redirect_stderr, redirect_stdout

from scheduler.control import reconcile
from scheduler.control.output import Output, StreamWriter
from scheduler.model.errors import NotFound
from scheduler.state.app import App
from scheduler.state.connection import REDIS_ERRORS, scrub

log = logging.getLogger("sched.execution")


def rq_job_id(namespace: str, task_id: str) -> str:
    """RQ accepts letters, digits, '_' and '-' in job ids; task ids also have a '.'."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"sched-{namespace}-{task_id}")


def execute(run: dict | None, output: Output | None = None, task_id: str | None = None) -> tuple[bool, str]:
    """Run a task's ``run`` spec; returns (succeeded, message). What it prints (and a
    function's return value or traceback) goes to ``output`` as it comes. A command gets
    the task's id in its environment as ``SCHED_TASK_ID``."""
    output = output or Output(lambda fields: None)
    try:
        return _execute(run, output, task_id)
    finally:
        output.flush()


def _execute(run: dict | None, output: Output, task_id: str | None) -> tuple[bool, str]:
    if run is None:
        return True, "nothing to run"
    if "func" in run:
        module_name, _, func_name = run["func"].partition(":")
        try:
            func = getattr(importlib.import_module(module_name), func_name)
            with redirect_stdout(StreamWriter(output, "stdout")), redirect_stderr(StreamWriter(output, "stderr")):
                value = func(*run.get("args", []), **run.get("kwargs", {}))
        except Exception as exc:  # the task's own failure, reported as such
            output.note(traceback=traceback.format_exc())
            return False, f"{run['func']} raised {type(exc).__name__}: {exc}"
        output.note(result=repr(value))
        return True, f"{run['func']} returned {value!r}"[:500]
    try:
        env = dict(os.environ, SCHED_TASK_ID=task_id) if task_id else None
        process = subprocess.Popen(run["command"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except FileNotFoundError:
        return False, f"command not found: {run['command'][0]}"
    readers = [threading.Thread(target=_pump, args=(pipe, output, name), daemon=True)
               for pipe, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
    for reader in readers:
        reader.start()
    try:
        code = process.wait(timeout=run.get("timeout"))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False, f"command timed out after {run.get('timeout')} s"
    finally:
        for reader in readers:
            reader.join()
    output.note(exit_code=code)
    if code == 0:
        return True, "exited with code 0"
    tail = (output.text("stderr") or output.text("stdout")).strip().splitlines()[-1:] or [""]
    return False, f"exited with code {code}" + (f": {tail[0][:300]}" if tail[0] else "")


def _pump(pipe, output: Output, stream: str) -> None:
    """Copy a child's pipe into ``output`` as it arrives."""
    with pipe:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            output.write(stream, chunk)


def run_task(url: str, namespace: str, node: str, task_id: str, rq_url: str | None = None) -> dict:
    """The RQ job: start the task if it is still ours, run it, report how it ended.

    ``url`` is the scheduling state's Redis (any topology, a cluster included), which RQ's
    own connection (``rq_url``, the execution Redis this job came from) is not: on a
    cluster the two always differ (RQ cannot run on a cluster).

    Until the task has started nothing is recorded against it. A Redis that does not
    answer (a failover) is waited for, each call within the failover bound
    (``scheduler/state/failover.py``); if it stays away the job ends without having
    started the task, returning ``{"ran": False, "started": False, "reason": ...}``: the
    task is still assigned to this node, and a later run may start it."""
    app = App(redis_url=url, namespace=namespace, rq_url=rq_url)
    try:
        begun = _begin(app, node, task_id)
    except REDIS_ERRORS as exc:
        reason = f"Redis did not answer before the task started: {scrub(str(exc), url)}"
        log.warning("task %s not started: %s", task_id, reason, extra={"fields": {"task": task_id, "node": node}})
        return {"task": task_id, "ran": False, "started": False, "reason": reason}
    if begun is None:
        return {"task": task_id, "ran": False}
    task, spec = begun
    succeeded, message = execute(spec.run, Output(lambda fields: app.store.save_output(task_id, fields)), task_id)
    ended = reconcile.task_ended(app.store, app.store.get_task(task_id), succeeded, message)
    return {"task": task_id, "ran": True, "succeeded": succeeded, "message": message, **ended}


def _begin(app: App, node: str, task_id: str):
    """Connect, read what to run, then start the task (``start.lua``): (task, its job's
    spec), or None if it is no longer this node's to run. Everything before the start
    only reads, and the start carries a token of this run, so a start resent after a
    lost reply is recognised as this run's own (see ``Store.start_task``)."""
    store = app.store
    try:
        task = store.get_task(task_id)
        spec = store.job_spec(task.job, task.version)
    except NotFound:  # removed meanwhile: nothing to run
        return None
    if not store.start_task(task_id, node, token=secrets.token_hex(8)):
        return None
    return task, spec

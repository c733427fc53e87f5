"""Carrying out moves, make before break (``sched rebalance``; the states are in
``scheduler/model/moves.py``).

Any scheduler worker calls :func:`advance_all` from its upkeep; one at a time advances
the moves in progress, under a short lock, and every change of a move's state is a
compare-and-set script (``move_set.lua``), so a worker killed part way loses nothing: the
next one reads the tasks as they are and carries on. Each step is level-triggered: it
looks at the move's tasks now and does what they call for.

A move's new task is a task of the job pinned to the target, queued like any other and
placed by a worker through ``commit.lua``, which holds every rule: nothing goes where the
commit would refuse it. Once it runs, and is healthy where the job has a check, the old
task is stopped through the disruption budget's gate (``scheduler/control/budgets.py``):
a move waits while its job's budget allows no disruption. A move whose new task is not
running and healthy within ``rebalance_deadline``, fails, or whose job or old task
changed meanwhile, is abandoned: its new task stopped, the old one kept.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import orjson

from scheduler.control import budgets, reconcile
from scheduler.model import ACTIVE, FAILED, PENDING, READY, RUNNING, STOPPED, Node, SchedError, Task
from scheduler.model.errors import NotFound
from scheduler.model.moves import ABANDONED, DONE, PLACING, QUEUED, STARTING, STOPPING
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

log = logging.getLogger("sched.worker")

LOCK = "moves"
LOCK_MS = 5_000  # a worker that dies holding the moves holds them this long at most
IN_FLIGHT = 8  # moves begun and not ended at once, every job together
RECOUNT_MS = 1_000  # a budget counted longer ago than this is counted again before a move's stop asks it
CHAIN = 10  # replacements of a new task followed at most (a new task that failed and was replaced)


@dataclass
class Advanced:
    """What one call did: moves started, done and abandoned (for the worker's metrics and log)."""

    started: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)


def budget_status(store: Store, job: str) -> dict | None:
    """The job's disruption budget as counted (None when it has none)."""
    try:
        return budgets.status(store, job)
    except NotFound:
        return None


def advance_all(store: Store) -> Advanced:
    """Advance every move in progress, if no other worker is doing so now."""
    done = Advanced()
    ids = store.active_move_ids()
    if not ids or not store.take_lock(LOCK, LOCK_MS):
        return done
    try:
        deadline_ms = int(store.rebalance_settings().rebalance_deadline * 1000)
        moves = store.moves_list(ids)
        begun = Counter(m["job"] for m in moves if m["state"] != QUEUED)
        allowed: dict[str, int] = {}
        for move in moves:
            try:
                if move["state"] == QUEUED:
                    if sum(begun.values()) >= IN_FLIGHT or begun[move["job"]] >= _parallel(store, move["job"], allowed):
                        continue
                    begun[move["job"]] += 1
                    done.started.append(move["id"])
                state = advance(store, move, deadline_ms)
                if state == DONE:
                    done.done.append(move["id"])
                elif state == ABANDONED:
                    done.abandoned.append(move["id"])
            except SchedError as exc:  # a job removed, a spec that no longer parses: the others go on
                log.warning("move %s: %s", move["id"], exc)
        return done
    finally:
        store.release_lock(LOCK)


def _parallel(store: Store, job: str, known: dict[str, int]) -> int:
    """How many moves of ``job`` may be under way at once: as many as its budget allows
    disruptions now (at least one: a move adds its task before it takes one away), and
    any number (up to ``IN_FLIGHT``) for a job without a budget."""
    if job not in known:
        record = budget_status(store, job)
        known[job] = IN_FLIGHT if record is None else max(1, record["allowed"])
    return known[job]


def advance(store: Store, move: dict, deadline_ms: int) -> str:
    """One step of one move; returns the state it is left in."""
    state = move["state"]
    job = store.job_fields(move["job"])
    if not job or job.get("status", reconcile.RUNNING_JOB) != reconcile.RUNNING_JOB:
        return abandon(store, move, f"job {move['job']} was stopped")
    if int(job["version"]) != move.get("version"):
        return abandon(store, move, f"job {move['job']} changed (version {job['version']})")
    old = _task(store, move["task"])
    if state in (QUEUED, STARTING) and (old is None or old.state != RUNNING or old.node != move["from"]):
        return abandon(store, move, f"task {move['task']} no longer runs on {move['from']}")
    if state == QUEUED:
        now = store.clock_ms()
        done, state = store.set_move(move["id"], (QUEUED,), STARTING, {
            "from_index": job["next_index"], "started": now, "deadline": now + deadline_ms})
        if not done:
            return state
        move = store.get_move(move["id"])
    if state == STARTING:
        return _queue_new(store, move)
    new = _open_end(store, move["new_task"])
    checked = parse_stored(job["spec"]).health is not None
    if state == PLACING:
        return _placing(store, move, old, new, checked)
    if state == STOPPING:
        return _stopping(store, move, old, new, checked)
    return state


def _queue_new(store: Store, move: dict) -> str:
    """Queue the move's new task, pinned to the target; or take the one a worker killed
    between queueing it and recording it had queued."""
    taken = store.moving_tasks()
    for task_id, _ in store.job_task_ids_after(move["job"], int(move["from_index"]) - 1):
        task = _task(store, task_id)
        if task is not None and task.pin == move["to"] and not task.terminal and task_id not in taken:
            new_id = task_id
            break
    else:
        added = reconcile.add_tasks(store, move["job"], 1, pins=[move["to"]])
        if not added:
            return abandon(store, move, f"job {move['job']} was stopped")
        new_id = added[0]
    return store.set_move(move["id"], (STARTING,), PLACING, {"new_task": new_id, "message": ""})[1]


def _ready(task: Task, checked: bool) -> bool:
    """Running, and healthy where the job has a check: what a budget counts healthy."""
    return budgets.counted_healthy(task.state, task.health, checked)


def _placing(store: Store, move: dict, old: Task | None, new: Task | None, checked: bool) -> str:
    if new is None or new.terminal or (new.live and new.node != move["to"]) or new.id != move["new_task"]:
        return abandon(store, move, _failed(move, new))  # nothing healthy is lost: it never was
    if _ready(new, checked):
        done, state = store.set_move(move["id"], (PLACING,), STOPPING, {"message": ""})
        return _stopping(store, {**move, "state": state}, old, new, checked) if done else state
    if old is None or not old.live:
        return abandon(store, move, f"task {move['task']} ended before its new task was healthy")
    if not new.live:
        target = _node(store, move["to"])
        if target is None or target.status != READY or target.availability != ACTIVE:
            state = "removed" if target is None else target.status if target.status != READY else \
                {"pause": "paused", "drain": "drained"}.get(target.availability, target.availability)
            return abandon(store, move, f"node {move['to']} is {state}: its new task cannot be placed there")
    if store.clock_ms() > int(move["deadline"]):
        return abandon(store, move, _late(move, new, checked))
    return PLACING


def _stopping(store: Store, move: dict, old: Task | None, new: Task | None, checked: bool) -> str:
    if new is None or new.terminal or new.id != move["new_task"]:
        return abandon(store, move, _failed(move, new))
    if old is None or not old.live:
        return _surplus(store, move, old, new, checked)
    # The budget's count must see the new task healthy: count it again if the count is older than that.
    budgets.count_if_old(store, move["job"], RECOUNT_MS)
    eviction = budgets.evict_task(store, old.id, f"moved to {move['to']} (move {move['id']})", node=move["from"],
                                  replace=False, task=old)
    if eviction.evicted:
        return store.set_move(move["id"], (STOPPING,), DONE, {"message": ""})[1]
    return _waiting(store, move, eviction)


def _surplus(store: Store, move: dict, old: Task | None, new: Task, checked: bool) -> str:
    """The old task ended by other means (a drain, its node lost) once the new one was
    healthy: the new task takes its place, and the task its job queued to replace it is
    stopped (as a disruption, through the budget's gate, if it already runs healthy)."""
    extra = _open_end(store, old.replaced_by) if old is not None and old.replaced_by else None
    said = f"task {move['task']} ended meanwhile; its new task {new.id} takes its place"
    if extra is None or extra.terminal or extra.id == new.id:
        return store.set_move(move["id"], (STOPPING,), DONE, {"message": said})[1]
    reason = f"move {move['id']}'s new task {new.id} took {move['task']}'s place"
    if not _ready(extra, checked):
        store.finish_ids([extra.id], STOPPED, reason)
    else:
        budgets.count_if_old(store, move["job"], RECOUNT_MS)
        eviction = budgets.evict_task(store, extra.id, reason, replace=False, task=extra)
        if not eviction.evicted:
            return _waiting(store, move, eviction)
    return store.set_move(move["id"], (STOPPING,), DONE, {"message": f"{said}; its replacement {extra.id} was "
                                                                     f"stopped"})[1]


def _waiting(store: Store, move: dict, eviction) -> str:
    waiting = f"waiting on {eviction.waiting}" if eviction.waiting else ""
    if waiting and waiting != move.get("message"):
        store.set_move(move["id"], (STOPPING,), "", {"message": waiting})
    return STOPPING


def abandon(store: Store, move: dict, why: str) -> str:
    """Give the move up: its new task (or what replaced it) is stopped, the old task kept.
    Called only while the new task is not healthy (or its job changed: a new version
    replaces its tasks anyway), so that abandoning takes nothing healthy away."""
    new = _open_end(store, move.get("new_task", ""))
    if new is not None and not new.terminal:
        store.finish_ids([new.id], STOPPED, f"move {move['id']} abandoned: {why}")
    done, state = store.set_move(move["id"], (QUEUED, STARTING, PLACING, STOPPING), ABANDONED, {"message": why})
    if done:
        log.info("move %s abandoned: %s", move["id"], why, extra={"fields": {"job": move["job"]}})
    return state


def _task(store: Store, task_id: str) -> Task | None:
    if not task_id:
        return None
    try:
        return store.get_task(task_id)
    except NotFound:
        return None


def _node(store: Store, name: str) -> Node | None:
    try:
        return store.get_node(name)
    except NotFound:
        return None


def _open_end(store: Store, task_id: str) -> Task | None:
    """The task, or the open task that replaced it (a new task that failed and was
    replaced by its job): the end of its chain of replacements."""
    task = _task(store, task_id)
    for _ in range(CHAIN):
        if task is None or not task.terminal or not task.replaced_by:
            return task
        task = _task(store, task.replaced_by)
    return task


def _failed(move: dict, new: Task | None) -> str:
    if new is None:
        return f"its new task {move['new_task']} is gone"
    if new.id != move["new_task"]:
        return f"its new task {move['new_task']} ended and was replaced by {new.id}"
    if new.state == FAILED:
        return f"its new task {new.id} failed: {new.message}" if new.message else f"its new task {new.id} failed"
    if new.terminal:
        return f"its new task {new.id} ended ({new.state}{': ' + new.message if new.message else ''})"
    return f"its new task {new.id} went to {new.node}, not {move['to']}"


def _late(move: dict, new: Task, checked: bool) -> str:
    seconds = (int(move["deadline"]) - int(move["started"])) / 1000
    what = "running and healthy" if checked else "running"
    where = ""
    if new.state == PENDING and new.explanation:
        try:
            where = f": {orjson.loads(new.explanation).get('message', '')}"
        except ValueError:
            where = ""
    return f"its new task {new.id} was not {what} on {move['to']} within rebalance_deadline ({seconds:g} s){where}"

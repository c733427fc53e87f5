"""Draining a node as its tasks' disruption budgets allow (Nomad's drain, kube's ``kubectl
drain`` through the eviction API).

Starting a drain makes the node's availability ``drain`` (it takes no new task) and
records the drain in ``drain:<node>`` (``drain_set.lua``, one step). Then each step, taken
by the drain's caller at once and by any worker's upkeep after (:func:`advance_all`,
under a short lock per node, as the deployer does), reads the node's live tasks as they
are and:

- after the drain's deadline, or with ``force``, ends every one of them (each replaced
  elsewhere), whatever the budgets: the disruptions are counted against them;
- else ends, at once, the tasks of jobs without a budget (kube: nothing protects them),
  and evicts the others through their jobs' budgets (``control/budgets.py``): as many as
  each budget allows now, the ones not counted healthy first. The next of a job waits for
  a later step, once its replacements run (and are healthy, where the job has a check);
- a global or sysbatch job's task goes once no other task is left on the node (Nomad
  drains system jobs last); it gets no replacement (its task belongs to the node);
- records what it did and what it waits for (``waiting on job web's budget, 1 of 1
  unavailable``), announced as a node event when it changes;
- once the node runs nothing, the drain is complete (the node stays drained).

Nothing is kept in a process between steps: a worker killed midway loses its lock, which
lapses, and the next step reads the tasks again. A node made active or paused meanwhile
cancels its drain.
"""

from __future__ import annotations

import logging

from scheduler.control import budgets, reconcile
from scheduler.model import DRAIN, LIVE_STATES, STOPPED, JobSpec, SchedError, Task
from scheduler.model.errors import NotFound
from scheduler.state.store import Store

log = logging.getLogger("sched.worker")

DRAINING, COMPLETE, CANCELLED = "draining", "complete", "cancelled"
DEFAULT_DEADLINE_S = 3600.0  # Nomad's default drain deadline
LOCK_MS = 5_000


def start(store: Store, name: str, *, deadline_s: float | None = DEFAULT_DEADLINE_S, force: bool = False) -> dict:
    """Drain ``name``: its availability becomes drain and the drain's first step is taken
    now (so tasks of jobs without a budget are moved at once, worker or not). A node
    already draining takes the new deadline and ``force``. Returns the drain's record
    (:func:`record`) with ``before`` (the node's availability before) and this step's
    ``stopped`` and ``replacements`` task ids."""
    now = store.clock_ms()
    fields = {"force": int(force), "deadline_at": 0 if deadline_s is None else now + int(deadline_s * 1000)}
    done, state, before = store.set_drain(name, (DRAINING,), "", fields)
    if not done:  # none in progress: a new one
        fields.update(started_at=now, stopped=0, left=0, message="starting", ended_at=0, moved=0)
        done, state, before = store.set_drain(name, ("-", COMPLETE, CANCELLED), DRAINING, fields)
        if not done:  # another caller started one meanwhile: take its place
            done, state, before = store.set_drain(name, (DRAINING,), "", {k: fields[k] for k in ("force", "deadline_at")})
    report = step(store, name)
    return {**report, "before": before}


def advance_all(store: Store) -> list[dict]:
    """One step of every drain in progress that no other worker is taking now (the
    upkeep's call). Returns each step's report (:func:`step`)."""
    reports = []
    for name in store.draining_nodes():
        try:
            reports.append(step(store, name))
        except SchedError as exc:
            log.warning("drain of %s: %s", name, exc)
    return reports


def step(store: Store, name: str) -> dict:
    """One step of ``name``'s drain under its lock (skipped, reporting the record as it is,
    while another process takes one). Returns the record with this step's ``stopped`` and
    ``replacements`` task ids."""
    lock = f"drain:{name}"
    if not store.take_lock(lock, LOCK_MS):
        return {**record(store, name), "stopped": [], "replacements": []}
    try:
        return _step(store, name)
    finally:
        store.release_lock(lock)


def _step(store: Store, name: str) -> dict:
    d = store.drain_record(name)
    if d.get("state") != DRAINING:
        return {**_shown(name, d), "stopped": [], "replacements": []}
    try:
        node = store.get_node(name)
    except NotFound:
        return _end(store, name, CANCELLED, "the node was removed", [], {})
    if node.availability != DRAIN:
        return _end(store, name, CANCELLED, f"the node was made {node.availability}", [], {})
    now = store.clock_ms()
    tasks = [t for t in store.tasks(store.node_task_ids(name)) if t.live and t.node == name]
    deadline = int(d.get("deadline_at", 0))
    if int(d.get("force", 0)) or (deadline and now >= deadline):
        why = "forced" if int(d.get("force", 0)) else "deadline reached"
        stopped, replaced = reconcile.replace_tasks(store, tasks, STOPPED, f"node {name} drained ({why})")
        store.note_disruptions([t for t in tasks if t.id in set(stopped)])
        message = f"{why}: {len(stopped)} task(s) stopped whatever their budgets"
        return _progress(store, name, d, stopped, _ids(replaced), _left(store, name), message)
    specs = _specs(store, tasks)
    stopped: list[str] = []
    moved: dict[str, list[str]] = {}
    waits: list[budgets.Eviction] = []
    system = [t for t in tasks if specs.get(t.job) is not None and specs[t.job].per_node]
    for group in (_without(tasks, system), system):
        if group is system and len(stopped) < len(tasks) - len(system):
            break  # Nomad: a node's system tasks go once nothing else is left on it
        _drain_group(store, name, group, specs, stopped, moved, waits)
    left = _left(store, name)
    if not left:
        return _progress(store, name, d, stopped, moved, 0, "")
    if waits:
        more = len({w.job for w in waits}) - 1
        message = f"waiting on {waits[0].waiting}" + (f" (and {more} more job(s))" if more > 0 else "")
    elif system and len(system) == len(tasks):
        message = "waiting for its global tasks to end"
    else:
        message = "waiting for its tasks to end"
    return _progress(store, name, d, stopped, moved, left, message)


def _drain_group(store: Store, name: str, tasks: list[Task], specs: dict[str, JobSpec | None], stopped: list[str],
                 moved: dict[str, list[str]], waits: list[budgets.Eviction]) -> None:
    """End ``tasks`` of jobs without a budget at once; evict the others as their budgets allow."""
    free = [t for t in tasks if specs.get(t.job) is None or specs[t.job].disruption_budget is None]
    if free:
        ended, replaced = reconcile.replace_tasks(store, free, STOPPED, f"node {name} drained")
        stopped += ended
        for job, ids in replaced.items():
            moved.setdefault(job, []).extend(ids)
    by_job: dict[str, list[Task]] = {}
    for task in _without(tasks, free):
        by_job.setdefault(task.job, []).append(task)
    for job, group in sorted(by_job.items()):
        checked = specs[job].health is not None  # type: ignore[union-attr]
        budgets.count_if_old(store, job)
        # Those not counted healthy first: they take nothing from the budget.
        for task in sorted(group, key=lambda t: (budgets.counted_healthy(t.state, t.health, checked), t.index)):
            eviction = budgets.evict_task(store, task.id, f"node {name} drained", node=name, task=task)
            if eviction.evicted:
                stopped.append(task.id)
                if eviction.replacement:
                    moved.setdefault(job, []).append(eviction.replacement)
            elif eviction.verdict not in ("gone", "elsewhere"):
                waits.append(eviction)
                break


def _specs(store: Store, tasks: list[Task]) -> dict[str, JobSpec | None]:
    specs: dict[str, JobSpec | None] = {}
    for task in tasks:
        if task.job not in specs:
            try:
                specs[task.job] = store.job_spec(task.job)
            except NotFound:
                specs[task.job] = None
    return specs


def _without(tasks: list[Task], some: list[Task]) -> list[Task]:
    ids = {t.id for t in some}
    return [t for t in tasks if t.id not in ids]


def _ids(replaced: dict[str, list[str]]) -> dict[str, list[str]]:
    return {job: list(ids) for job, ids in replaced.items()}


def _left(store: Store, name: str) -> int:
    return sum(1 for t in store.tasks(store.node_task_ids(name)) if t.state in LIVE_STATES and t.node == name)


def _progress(store: Store, name: str, d: dict, stopped: list[str], moved: dict[str, list[str]], left: int,
              message: str) -> dict:
    if not left:
        total = int(d.get("stopped", 0)) + len(stopped)
        return _end(store, name, COMPLETE, message or f"{total} task(s) moved", stopped, moved)
    fields = {"stopped": int(d.get("stopped", 0)) + len(stopped), "left": left, "message": message,
              "moved": int(d.get("moved", 0)) + sum(len(ids) for ids in moved.values())}
    store.set_drain(name, (DRAINING,), "", fields)
    return {**record(store, name), "stopped": stopped, "replacements": [i for ids in moved.values() for i in ids]}


def _end(store: Store, name: str, state: str, message: str, stopped: list[str], moved: dict[str, list[str]]) -> dict:
    d = store.drain_record(name)
    fields = {"stopped": int(d.get("stopped", 0)) + len(stopped), "left": 0 if state == COMPLETE else d.get("left", 0),
              "message": message, "ended_at": store.clock_ms(),
              "moved": int(d.get("moved", 0)) + sum(len(ids) for ids in moved.values())}
    store.set_drain(name, (DRAINING,), state, fields)
    return {**record(store, name), "stopped": stopped, "replacements": [i for ids in moved.values() for i in ids]}


def cancel(store: Store, name: str, why: str) -> bool:
    """End ``name``'s drain in progress as cancelled (the node was made active or paused)."""
    return store.set_drain(name, (DRAINING,), CANCELLED, {"message": why, "ended_at": store.clock_ms()})[0]


def record(store: Store, name: str) -> dict:
    """The node's last drain: ``{node, state, message, started_at, deadline_at, force,
    stopped, moved, left, ended_at}`` (``state`` "" when it was never drained this way)."""
    return _shown(name, store.drain_record(name))


def _shown(name: str, d: dict) -> dict:
    return {"node": name, "state": d.get("state", ""), "message": d.get("message", ""),
            "started_at": int(d.get("started_at", 0)), "deadline_at": int(d.get("deadline_at", 0)),
            "force": bool(int(d.get("force", 0))), "stopped_count": int(d.get("stopped", 0)),
            "moved": int(d.get("moved", 0)), "left": int(d.get("left", 0)), "ended_at": int(d.get("ended_at", 0))}

"""Jobs to tasks: make the tasks of each job match what the job asks for.

Desired state is the job (Nomad's evaluation, SwarmKit's orchestrator): ``replicas``
live-or-pending tasks for a service or batch job, one task pinned to every eligible node
for a global job. Submitting a changed spec gives the job a new version and replaces its
tasks (at once, or through a deployment); scaling adds tasks or stops the newest;
stopping ends every task.
"""

from __future__ import annotations

import dataclasses
import math

import orjson

from scheduler.model.errors import NotFound, RedisUnavailable, SpecError
from scheduler.model.names import parent_of
from scheduler.model.periodic import check_fires
from scheduler.model.taints import untolerated
from scheduler.model import (ACTIVE, ASSIGNED, BATCH, COMPLETED, DRAIN, FAILED, LIVE_STATES, LOST, PENDING,
                             PER_NODE_TYPES, PREEMPTED, READY, RUN_TO_COMPLETION, RUNNING, STOPPED, SYSBATCH, JobSpec,
                             Node, Task, parse_job)
from scheduler.control import changes, deadlines, dependencies
from scheduler.state.deployments import deployment_id
from scheduler.state.history import Submitted
from scheduler.state.jobs import ENQUEUE_CHUNK, job_state, parse_stored, shares_value
from scheduler.state.replacement import Successor, end_and_replace
from scheduler.state.store import Store

RUNNING_JOB = "running"


def global_targets(spec: JobSpec, nodes, taints: bool = True, draining: bool = False) -> set[str]:
    """The nodes a global job wants a task on: ready, active (or, with ``draining``,
    drained: its drain ends the task there as the job's disruption budget allows,
    ``control/drains.py``), meeting its constraints and plugins, and (unless ``taints``
    is False) without a NoSchedule or NoExecute taint it does not tolerate. (Whether the
    task fits is the scheduler's business, as for any task.)"""
    return {n.name for n in nodes
            if n.status == READY and (n.availability == ACTIVE or (draining and n.availability == DRAIN))
            and all(c.matches(n) for c in spec.constraints) and all(p in n.plugins for p in spec.plugins)
            and not (taints and n.taints and untolerated(n.taints, spec.tolerations))}


def same_but_replicas(stored: str | None, spec: JobSpec) -> bool:
    if stored is None:
        return False
    old = orjson.loads(stored)
    return {**old, "replicas": spec.replicas} == orjson.loads(orjson.dumps(spec.raw))


def submit(store: Store, spec: JobSpec, recorded: Submitted | None = None) -> dict:
    """:func:`submit_one`, then the job listed among those whose disruption budget the
    workers' upkeep counts (or taken out, its budget gone)."""
    result = submit_one(store, spec, recorded)
    store.track_budget(spec.id, spec.disruption_budget is not None and not spec.launcher)
    return result


def submit_one(store: Store, spec: JobSpec, recorded: Submitted | None = None) -> dict:
    """Create or update a job and queue its tasks, recorded in the job's history as
    ``recorded`` says (None: not recorded). Returns {id, version, tasks, created,
    deployment, changes} (``changes``: :func:`changes.describe`, against the version that
    was running). A running job whose spec changes only in ``replicas`` is scaled, keeping
    its tasks (as a change of count is in Nomad and kube). Any other change is a new
    version: with an ``update`` block it is rolled out by a deployment (the workers replace
    the tasks group by group, ``scheduler/control/deployer.py``); without, every open task
    stops at once and the new version's tasks are queued, except that a batch job keeps its
    running tasks (and gets only the tasks that make up its replicas).
    A new job takes one round trip: ``enqueue.lua`` creates it unless it exists, and
    records it in the same call."""
    check_submittable(store, spec)
    raw = orjson.dumps(spec.raw).decode()
    if spec.labels or any(t.required for t in spec.job_anti_affinity):
        store.index_job_rules(spec)  # before any task of it can be placed (scheduler/state/rules.py)
    pins = None
    if spec.per_node and not spec.launcher:
        pins = sorted(global_targets(spec, store.nodes()))
    count = 0 if spec.launcher else len(pins) if pins is not None else spec.replicas
    shares = shares_value(spec)  # tenant and gang size, for claim.lua: written with the job
    current: dict = {}
    tasks: list[Task] = []
    while True:
        change = changes.describe(current, spec, tasks, len(pins) if pins is not None else None)
        if change["action"] == changes.NONE:
            store.mark_job(spec)
            return _recorded(store, recorded, {"id": spec.id, "version": int(current["version"]), "tasks": [],
                                               "created": False, "deployment": None, "changes": change})
        if change["action"] == changes.SCALE:
            store.mark_job(spec)  # the gang size may follow the replicas
            scaled = scale(store, spec.id, spec.replicas)
            return _recorded(store, recorded, {"id": spec.id, "version": int(current["version"]),
                                               "tasks": scaled["added"], "created": False, "deployment": None,
                                               "changes": change})
        version = int(current.get("version", 0)) + 1
        first = int(current.get("next_index", 0))
        fields = {"id": spec.id, "spec": raw, f"spec:{version}": raw, "version": version, "status": RUNNING_JOB}
        if change["action"] == changes.DEPLOYMENT:
            deployment = deployment_id(spec.id, version)
            opened = {"id": deployment, "from": int(current["version"]), "to": version,
                      "canary": spec.update.canary, "promoted": 0 if spec.update.canary else 1,
                      "to_desired": count}
            if store.open_deployment(spec.id, job_state(current), current.get("deployment", ""), fields, shares,
                                     opened) is not None:
                return _recorded(store, recorded, {"id": spec.id, "version": version, "tasks": [], "created": False,
                                                   "deployment": deployment, "changes": change})
        else:
            if current and pins is None:
                count = change["start"]
                fields["stable"] = ""  # not known healthy: a later deployment's revert goes back to this one
            fields["next_index"] = first + count
            starts = not current or current.get("status") != RUNNING_JOB
            fields.update(_timing_fields(store, spec, current, starts))
            record = None if recorded is None else recorded.record(spec.id, store.who(recorded.by), version,
                                                                   change["action"], count)
            if store.enqueue(spec.id, job_state(current), fields, version, spec.priority, first, count, pins=pins,
                             is_global=spec.per_node, shares=shares, event="updated" if current else "submitted",
                             replicas=None if spec.per_node else spec.replicas, record=record) is not None:
                _started(store, spec, fields)
                break
        current = store.job_fields(spec.id)  # it exists, or changed: read it, decide again
        tasks = open_tasks(store, spec.id) if current else []
    new_ids = [f"{spec.id}.{first + i}" for i in range(count)]
    if current and _indexed(current.get("spec")) and not (spec.labels or spec.job_anti_affinity):
        store.index_job_rules(spec)  # its labels or anti-affinity went away
    if current:  # read again: a replacement may have been queued at the old version meanwhile
        old = [t.id for t in open_tasks(store, spec.id)
               if t.version < version and not (spec.type == BATCH and t.live)]
        store.finish_ids(old, STOPPED, f"replaced by version {version}")
    return {"id": spec.id, "version": version, "tasks": new_ids, "created": not current, "deployment": None,
            "changes": change}


def check_submittable(store: Store, spec: JobSpec) -> None:
    """Refuse, in one sentence, what a person may not submit: an id that names a launch of
    a periodic or parameterized job, ``after`` dependencies on jobs that do not exist or
    that would close a cycle, or a schedule that would never launch."""
    parent = parent_of(spec.id)
    if parent is not None:
        raise SpecError(f"job id {spec.id!r} names a launch of job {parent}; launches are made by sched (submit "
                        f"{parent} itself, or `sched job launch|dispatch {parent}`).")
    if spec.after:
        dependencies.check(store, spec)
    if spec.periodic is not None and not spec.periodic.every_s:
        check_fires(spec.periodic, store.now_ms(), f"job {spec.id}: periodic.cron")


def _timing_fields(store: Store, spec: JobSpec, current: dict, starts: bool) -> dict:
    """The job hash's fields for its dependencies and schedule, written with a new version:
    ``held`` when a submit that starts it has ``after`` dependencies (its tasks wait),
    ``next_launch`` and ``anchor`` of a periodic job (its schedule starts over), and an
    empty ``failure`` (a job failed before runs again)."""
    fields: dict = {}
    if spec.after and starts:
        store.hold(spec.id)  # listed first: the upkeep drops an entry whose job is not held
        store.need([a.job for a in spec.after], spec.id)  # retention keeps what it waits for
        fields["held"] = "1"
    if current.get("failure"):
        fields["failure"] = ""
    if spec.periodic is not None:
        now = store.now_ms()
        first = spec.periodic.first_launch(now)
        fields.update(anchor=now, next_launch="+inf" if first == math.inf else first,
                      suspended="1" if spec.periodic.suspend else "0")
    return fields


def _started(store: Store, spec: JobSpec, fields: dict) -> None:
    """After a new version is written: a periodic job enters the launcher's heap; a batch
    job that is not held starts counting its deadline."""
    if spec.periodic is not None:
        store.set_launcher(spec.id, float(fields["next_launch"]))
    elif "held" not in fields and not spec.launcher:
        deadlines.start(store, spec.id, spec)


def submit_many(store: Store, jobs: list[tuple[str, JobSpec]], recorded: Submitted | None = None) -> list[dict]:
    """Submit many jobs (already validated), given as (job id, spec) pairs: the spec may be
    one that jobs differing only in their id share (see :meth:`Store.enqueue_many`), each
    recorded as ``recorded`` says (None: not recorded). Returns :func:`submit`'s result
    for each, in order. New jobs of at most ``ENQUEUE_CHUNK`` tasks that are not global
    are created in bulk, many per round trip (``Store.enqueue_many``, which records them
    in the same calls); a job that turns out to exist, a global job and a bigger one are
    then submitted one by one, in their order (so a job id given twice ends as its last
    spec)."""
    for job_id, spec in jobs:
        if parent_of(job_id) is not None:
            check_submittable(store, spec.with_id(job_id))
    order = dependencies.check_together(store, jobs) if any(spec.after for _, spec in jobs) else range(len(jobs))
    # In bulk: plain new jobs only (not those placed per node, held, launched on a schedule
    # or by dispatch, or with a deadline to start: submitted one by one below).
    bulk = [i for i, (_, spec) in enumerate(jobs) if not spec.per_node and spec.replicas <= ENQUEUE_CHUNK
            and not spec.after and not spec.launcher and not spec.deadline]
    indexed = [jobs[i] for i in bulk if jobs[i][1].labels or any(t.required for t in jobs[i][1].job_anti_affinity)]
    if indexed:
        store.index_many_job_rules([spec.with_id(job_id) for job_id, spec in indexed])
    by = None if recorded is None or not bulk else store.who(recorded.by)
    created = store.enqueue_many([jobs[i] for i in bulk], by=by)
    results: list[dict | None] = [None] * len(jobs)
    described: dict[int, dict] = {}  # a new job's change, described once per shared spec
    for i, made in zip(bulk, created):
        if made:
            job_id, spec = jobs[i]
            change = described.get(id(spec))
            if change is None:
                change = described[id(spec)] = changes.describe({}, spec, [])
            results[i] = {"id": job_id, "version": 1, "tasks": [f"{job_id}.{n}" for n in range(spec.replicas)],
                          "created": True, "deployment": None,
                          "changes": {**change, "fields": [], "stop": [], "kept": []}}
    for i, made in zip(bulk, created):
        if made and jobs[i][1].disruption_budget is not None:
            store.track_budget(jobs[i][0], True)
    for i in order:  # each after the jobs of this batch that it names
        if results[i] is None:
            job_id, spec = jobs[i]
            results[i] = submit(store, spec.with_id(job_id), recorded)
    return results


def _indexed(stored: str | None) -> bool:
    """Whether a stored spec had what ``jobs:labels`` or ``jobs:anti`` record."""
    return stored is not None and ('"labels"' in stored or '"job_anti_affinity"' in stored)


def _recorded(store: Store, recorded: Submitted | None, result: dict) -> dict:
    """``result`` of a submit that queued no task itself (it changed nothing, scaled or
    opened a deployment), recorded after it as ``recorded`` says (history.lua)."""
    if recorded is not None and (recorded.unchanged or result["changes"]["action"] != changes.NONE):
        store.record_history([recorded.record(result["id"], recorded.by, result["version"],
                                              result["changes"]["action"], len(result["tasks"]),
                                              result["deployment"])])
    return result


FILL_GRACE_MS = 30_000  # a submit still queueing its tasks after this long is helped (fill calls are idempotent)


def complete_fills(store: Store, grace_ms: int = FILL_GRACE_MS) -> list[str]:
    """Create the missing tasks of submits that stopped part way and began more than
    ``grace_ms`` ago (:meth:`Store.complete_fills`). Returns the jobs it completed."""
    return store.complete_fills(store.now_ms() - grace_ms)


def open_tasks(store: Store, job_id: str) -> list[Task]:
    """Tasks of the job that are pending or live, oldest first."""
    tasks = store.tasks(store.job_task_ids(job_id))
    return sorted((t for t in tasks if not t.terminal), key=lambda t: t.index)


def add_tasks(store: Store, job_id: str, count: int, spec: JobSpec | None = None, *,
              pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0) -> list[str]:
    """Queue ``count`` more tasks of the job's current version (optionally saving ``spec``
    as that version's spec first, as scaling does: then the job is announced as scaled to
    its replicas). See :meth:`Store.enqueue`."""
    while True:
        fields = store.job_fields(job_id)
        if fields.get("status", RUNNING_JOB) != RUNNING_JOB:  # stopped since the caller looked
            return []
        first = int(fields.get("next_index", 0))
        version = int(fields["version"])
        current = spec or parse_stored(fields["spec"])
        mapping = {"next_index": first + count}
        if spec is not None:
            text = orjson.dumps(spec.raw).decode()
            mapping.update({"spec": text, f"spec:{version}": text})
        if store.enqueue(job_id, job_state(fields), mapping, version, current.priority, first, count, pins=pins,
                         delay_ms=delay_ms, retries=retries, event="scaled" if spec is not None else "",
                         replicas=spec.replicas if spec is not None else None) is not None:
            return [f"{job_id}.{first + i}" for i in range(count)]


def job_snapshot(store: Store, job_id: str, attempts: int = 5) -> tuple[dict[str, str], list[Task]]:
    """The job's hash and its tasks, read so that they agree: the job's ``next_index`` and
    spec are the same before and after its tasks are read, so no task was created (a
    replacement is created as another ends) and no scale happened in between."""
    before = store.job_fields(job_id)
    for _ in range(attempts):
        tasks = store.tasks(store.job_task_ids(job_id))
        after = store.job_fields(job_id)
        if (before.get("next_index"), before.get("spec")) == (after.get("next_index"), after.get("spec")):
            break
        before = after
    return after, tasks


SCALE_ROUNDS = 5  # a scale down stops what it counts too many, then counts again


def scale(store: Store, job_id: str, replicas: int) -> dict:
    """Add tasks, or stop the newest (pending ones before live ones), to reach ``replicas``.

    Scaling down stops the surplus first and writes the new count afterwards, so the
    job's open tasks never exceed the count it is written with (a replacement is queued
    in the same step as the end of the task it replaces, so it never adds to the count).
    A task moving and its move's new task (``sched rebalance``, make before break) are
    one replica: the move stops one of them; stopping the task moving stops both."""
    job = store.get_job(job_id)
    if job["spec"]["type"] in PER_NODE_TYPES:
        raise SpecError(f"job {job_id} is {job['spec']['type']}: it runs one task per eligible node and cannot be "
                        f"scaled.")
    if "periodic" in job["spec"] or "parameterized" in job["spec"]:
        raise SpecError(f"job {job_id} runs no task itself (its launches do): submit it with the replicas its "
                        f"launches should have.")
    if job["status"] != RUNNING_JOB:
        raise SpecError(f"job {job_id} is stopped; submit its spec again to start it before scaling.")
    new_spec = parse_job(dict(job["spec"], replicas=replicas))
    store.check_enqueue(job_id)  # a user that may not write the count is refused before anything stops
    stopped: list[str] = []
    for _ in range(SCALE_ROUNDS):
        _fields, tasks = job_snapshot(store, job_id)
        pairs = _moving(store, job_id, {t.id for t in tasks if not t.terminal})
        current = sorted((t for t in tasks if not t.terminal and t.id not in pairs.values()), key=lambda t: t.index)
        if len(current) <= replicas:
            break
        surplus = sorted(current, key=lambda t: (t.state != PENDING, -t.index))[: len(current) - replicas]
        ids = [t.id for t in surplus] + [pairs[t.id] for t in surplus if t.id in pairs]
        ended = store.finish_ids(ids, STOPPED, f"scaled down to {replicas}")
        stopped += [task_id for task_id, was in ended.items() if was in (PENDING, *LIVE_STATES)]
    added = add_tasks(store, job_id, max(0, replicas - len(current)), new_spec)
    return {"id": job_id, "replicas": replicas, "added": added, "stopped": stopped}


def _moving(store: Store, job_id: str, open_ids: set[str]) -> dict[str, str]:
    """Open task of ``job_id`` in a move in progress -> the move's open new task."""
    moving = store.moving_tasks()
    ids = sorted({move_id for task_id, move_id in moving.items() if task_id in open_ids})
    return {move["task"]: move["new_task"] for move in store.moves_list(ids) if move.get("job") == job_id
            and move["task"] in open_ids and move.get("new_task") in open_ids}


def replace(store: Store, tasks: list[Task], state: str, message: str) -> dict:
    """End live tasks in ``state`` (lost, stopped by a drain...) and queue a replacement for
    each task of a service or batch job that is still running. Global jobs get none: their
    task belongs to that node."""
    return replace_tasks(store, tasks, state, message)[1]


def replace_tasks(store: Store, tasks: list[Task], state: str, message: str,
                  put_back: bool = False) -> tuple[list[str], dict]:
    """(ids of the tasks this ended, job -> ids of their replacements). Each job's tasks
    end together with their replacements' queueing (one step: ``end_and_replace``).
    A global or sysbatch job's task gets none (its node is drained, lost...), unless
    ``put_back`` (an eviction by hand) and its node still wants it: then it gets its task
    back there, as kube's DaemonSet puts back an evicted pod."""
    by_job: dict[str, list[Task]] = {}
    for task in tasks:
        by_job.setdefault(task.job, []).append(task)
    nodes = _nodes(store, {t.pin for t in tasks if t.pin}) if put_back else []

    def successor(spec: JobSpec, task: Task) -> Successor | None:
        if not spec.per_node:
            return Successor(retries=retries_after(task, state))
        if task.pin and task.pin in global_targets(spec, nodes):
            return Successor(retries=retries_after(task, state), pin=task.pin)
        return None

    stopped: list[str] = []
    replaced: dict[str, list[str]] = {}
    for job_id, group in by_job.items():
        ended = _end_with_successors(store, job_id, group, state, message, successor)
        stopped += [task_id for task_id, (result, _) in ended.items() if result in LIVE_STATES]
        successors = [successor for _, successor in ended.values() if successor]
        if successors:
            replaced[job_id] = successors
    return stopped, replaced


def _nodes(store: Store, names: set[str]) -> list[Node]:
    out = []
    for name in sorted(names):
        try:
            out.append(store.get_node(name))
        except NotFound:  # removed: it wants nothing
            pass
    return out


def _end_with_successors(store: Store, job_id: str, tasks: list[Task], state: str, message: str, successor,
                         restart_delay: bool = False, attempts: int = 10,
                         fields: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """End ``tasks`` (of one job) in ``state`` and, while the job runs, queue
    ``successor(spec, task)`` (a :class:`Successor`, or None for no replacement) for each
    live one, in one step, after the spec's ``restart_delay`` if asked. Returns task id ->
    (what its end reported, its replacement's id or ""). Read again and sent again if the
    job changes meanwhile; ``fields``: the job's hash, read already."""
    for _ in range(attempts):
        fields = store.job_fields(job_id) if fields is None else fields
        spec = parse_stored(fields["spec"]) if fields.get("spec") else None
        ends = [(task, successor(spec, task)) for task in tasks] if spec is not None else []
        if _just_ends(fields, ends):
            return {task.id: (result, "") for task, result in zip(tasks, store.finish(tasks, state, message))}
        delays = [s.delay_ms for _, s in ends if s and s.delay_ms is not None]
        delay_ms = max(delays) if delays else int(spec.restart_delay * 1000) if restart_delay else 0
        done = end_and_replace(store, job_id, job_state(fields), int(fields.get("next_index", 0)),
                               version=int(fields["version"]), priority=spec.priority, delay_ms=delay_ms,
                               ends=ends, state=state, message=message)
        if done is not None:
            return {task.id: pair for task, pair in zip(tasks, zip(done.results, done.successors))}
        tasks, fields = store.tasks([t.id for t in tasks]), None  # the job changed: read both again
    raise RedisUnavailable(f"job {job_id} kept changing while {len(tasks)} of its tasks were being ended; "
                           f"try again.")


def _just_ends(fields: dict[str, str], ends: list[tuple[Task, object]]) -> bool:
    """Whether the tasks only end: their job no longer runs, or none of them is replaced."""
    return fields.get("status", RUNNING_JOB) != RUNNING_JOB or not any(s for _, s in ends)


def drain_node(store: Store, name: str) -> list[str]:
    """Move every task off a drained node: each ends as stopped and is replaced elsewhere."""
    return drain_tasks(store, name)["replacements"]


def drain_tasks(store: Store, name: str) -> dict:
    """A forced drain's work, whatever the budgets (counted against them), reported:
    ``{stopped: [task ids], replacements: [task ids]}``. The replacements are pending: a
    scheduler worker places them elsewhere. (A drain that honours budgets is
    ``control/drains.py``'s.)"""
    tasks = store.tasks(store.node_task_ids(name))
    stopped, replaced = replace_tasks(store, tasks, STOPPED, f"node {name} drained")
    _count_against_budgets(store, tasks, stopped)
    return {"stopped": stopped, "replacements": [task_id for ids in replaced.values() for task_id in ids]}


def _count_against_budgets(store: Store, tasks: list[Task], ended: list[str]) -> None:
    """Disruptions that passed no budget's gate (a node lost, a forced drain) still count
    against the budgets of their jobs (``budget_note.lua``), at once."""
    ids = set(ended)
    if ids:
        store.note_disruptions([t for t in tasks if t.id in ids])


def stop(store: Store, job_id: str) -> dict:
    """Stop every task of the job and release what they hold."""
    store.stop_job(job_id)
    ids = [t.id for t in open_tasks(store, job_id)]
    store.finish_ids(ids, STOPPED, "job stopped")
    return {"id": job_id, "stopped": ids}


# Lifecycle: what happens after a task ends or a node is lost.
OWN_ENDS = (COMPLETED, FAILED)  # ends of the task's own doing; any other is the infrastructure's


def retries_after(ended: Task, state: str) -> int:
    """The ``retries`` of the task that replaces ``ended``, which ended in ``state``: the one
    place ends are counted. Only an end of the task's own doing (it completed or failed)
    counts, as a restart of its slot (and a batch job's ``max_retries`` limits its
    failures); an end of the infrastructure's doing (its run lost with its agent or node,
    stopped for want of a heartbeat, its node drained, preempted) passes the count on
    unchanged. (Only a failure is a fault of the node, too: ``end_task`` in ``_lib.lua``
    counts state ``failed`` alone.)"""
    return ended.retries + 1 if state in OWN_ENDS else ended.retries


def task_ended(store: Store, task: Task, succeeded: bool, message: str, lost: bool = False) -> dict:
    """Record the end of a task that ran on its node, and queue what the job needs next,
    in the same step (``end_and_replace``).

    A service keeps its replicas: a task that completed is replaced after
    ``restart_delay``, one that failed as its reschedule policy says (by default the same).
    A batch or sysbatch task that completed is done; one that failed is retried as the
    policy says (``reschedule``, or ``max_retries`` retries after ``restart_delay``). A
    global task is restarted on the same node, a sysbatch one retried there. A failure also
    counts towards faulty-node detection for the job's version on that node, in the same
    step (``faults:<job>``). A run that the infrastructure ended (``lost``: stopped for want
    of its agent's heartbeat, its work horse gone, nothing of it left) ends ``lost``
    instead: its task is replaced whatever its type, and the end counts neither as a retry,
    an attempt of its reschedule policy, nor a fault.
    """
    state = LOST if lost else COMPLETED if succeeded else FAILED
    clock: list[int] = []  # Redis time, read once and only for a policy with an interval

    def now_ms() -> int:
        if not clock:
            clock.append(store.now_ms())
        return clock[0]

    def successor(spec: JobSpec, ended: Task) -> Successor | None:
        retries = retries_after(ended, state)
        pin = ended.pin if spec.per_node else ""
        if spec.per_node and not pin:
            return None
        if state == LOST:
            return Successor(retries=retries, pin=pin)
        if succeeded:
            return None if spec.type in RUN_TO_COMPLETION else Successor(retries=retries, pin=pin)
        return next_attempt(spec.policy, ended, pin, now_ms)

    result, replacement = _end_with_successors(store, task.job, [task], state, message, successor,
                                               restart_delay=True).get(task.id, ("absent", ""))
    if result not in LIVE_STATES:
        return {"state": result, "replacement": []}  # stopped, lost or replaced meanwhile
    return {"state": state, "replacement": [replacement] if replacement else []}


def tasks_ended(store: Store, tasks: list[Task], succeeded: bool, message: str) -> dict[str, dict]:
    """:func:`task_ended` for many tasks that ended alike (their runs completed, or
    failed), each as that call would end it, in a few round trips rather than two per
    task: the jobs' hashes are read together, and the tasks that only end (nothing
    replaces them) end in one ``finish`` call, in the order given. Returns task id -> what
    :func:`task_ended` returns."""
    by_job: dict[str, list[Task]] = {}
    for task in tasks:
        by_job.setdefault(task.job, []).append(task)
    out: dict[str, dict] = {}
    plain: set[str] = set()
    for (job_id, group), fields in zip(by_job.items(), store.job_hashes(list(by_job))):
        spec = parse_stored(fields["spec"]) if fields.get("spec") else None
        if spec is None or _just_ends(fields, [(t, _replaces(spec, t, succeeded)) for t in group]):
            plain.update(t.id for t in group)
            continue
        for task in group:  # replaced: as task_ended does it, a task at a time
            out[task.id] = task_ended(store, task, succeeded, message)
    ending = [task for task in tasks if task.id in plain]
    state = COMPLETED if succeeded else FAILED
    for task, result in zip(ending, store.finish(ending, state, message) if ending else []):
        out[task.id] = {"state": state if result in LIVE_STATES else result, "replacement": []}
    return out


def _replaces(spec: JobSpec, ended: Task, succeeded: bool) -> bool:
    """Whether :func:`task_ended` would queue a task to replace ``ended``: a global task
    off its node never; else a completed one unless its job runs to completion, and a
    failed one (its reschedule policy decides how often: that call asks it)."""
    if spec.per_node and not ended.pin:
        return False
    return not succeeded or spec.type not in RUN_TO_COMPLETION


def next_attempt(policy, ended: Task, pin: str, now_ms) -> Successor | None:
    """The replacement of a task that failed, as its job's reschedule policy says: None
    once the slot has failed more than ``attempts`` times (inside ``interval``, or over the
    job's life without one) and the policy is not ``unlimited``; else a successor that
    waits the policy's delay for that many failures."""
    if policy.interval:
        since = now_ms() - int(policy.interval * 1000)
        recent = tuple(t for t in ended.failures if t > since) + (now_ms(),)
        count = len(recent)
        kept = recent[-min(policy.attempts + 1, 1000):]
    else:
        count, kept = ended.retries + 1, ()
    if not policy.allows(count):
        return None
    return Successor(retries=ended.retries + 1, pin=pin, failures=kept, delay_ms=int(policy.delay_s(count) * 1000))


def node_lost(store: Store, name: str) -> dict:
    """A node went down: its live tasks are lost, and services and batch jobs get
    replacements elsewhere. Global tasks wait for the node to come back."""
    tasks = store.tasks(store.node_task_ids(name))
    stopped, replaced = replace_tasks(store, tasks, LOST, f"node {name} is down")
    _count_against_budgets(store, tasks, stopped)
    return replaced


def reconcile_global(store: Store, only: list[str] | None = None) -> dict:
    """Give every running global and sysbatch job (or those of ``only``) one task on each
    node it wants, and stop its open tasks on nodes that no longer qualify (constraints
    changed, drained, down, removed). A sysbatch job runs once per node: a node whose task
    completed or failed for good gets none again; one whose task was lost or stopped (the
    node went down, was drained) gets another when it qualifies again. Runs under a short
    lock, since any worker may call it after a node change."""
    global_jobs = store.global_job_ids() if only is None else only
    if not global_jobs:
        return {}  # nothing to do, and no need to read every node
    if not store.take_lock("reconcile-global", 10_000):
        return {}
    try:
        nodes = {n.name: n for n in store.nodes()}
        added: dict[str, list[str]] = {}
        for job_id in global_jobs:
            job = store.get_job(job_id)
            kind = job["spec"]["type"]
            if job["status"] != RUNNING_JOB or kind not in PER_NODE_TYPES:
                continue
            spec = store.job_spec(job_id)
            if spec.launcher:  # a periodic or parameterized sysbatch job: its launches run, it does not
                continue
            wanted = global_targets(spec, nodes.values())
            # A taint keeps new tasks off a node, but only a NoExecute taint ends a task that
            # runs there, after its toleration_seconds (scheduler/control/evictions.py), as
            # kube's taint manager does: a running task is kept while its node otherwise
            # qualifies; a pending one, which the taint would keep waiting, is stopped.
            kept = global_targets(spec, nodes.values(), taints=False, draining=True)
            tasks = store.tasks(store.job_task_ids(job_id))
            current = [t for t in tasks if not t.terminal]
            unwanted = [t.id for t in current if t.pin not in (wanted if t.state == PENDING else kept)]
            if unwanted:
                store.finish_ids(unwanted, STOPPED, f"node no longer eligible for this {kind} job")
            covered = {t.pin for t in current}
            if kind == SYSBATCH:  # once per node: what ran to its end there is not run again
                covered |= {t.pin for t in tasks if t.version == job["version"] and t.state in (COMPLETED, FAILED)}
            missing = sorted(wanted - covered)
            if missing:
                added[job_id] = add_tasks(store, job_id, len(missing), pins=missing)
        return added
    finally:
        store.release_lock("reconcile-global")


def preempted(store: Store, victims: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """Replace tasks evicted by preemption, given as (task id, job id, node): a running
    service or batch job gets a new pending task for each; a global job gets its task back
    on the same node, where it waits for room. Each keeps its victim's ``retries``
    (``retries_after``: an eviction is not the task's doing)."""
    ended = store.tasks([v[0] for v in victims])
    retries = {task.id: retries_after(task, PREEMPTED) for task in ended}
    # Preemption may go beyond a budget (as in kube), but counts against it: each victim as
    # it was before it ended (running once it had started).
    store.note_disruptions([dataclasses.replace(t, state=RUNNING if t.started_ms else ASSIGNED) for t in ended])
    by_job: dict[tuple[str, int], list[str]] = {}
    for task_id, job_id, node in victims:
        by_job.setdefault((job_id, retries.get(task_id, 0)), []).append(node)
    added: dict[str, list[str]] = {}
    for (job_id, count), nodes in by_job.items():
        job = store.get_job(job_id)
        if job["status"] != RUNNING_JOB:
            continue
        pins = nodes if job["spec"]["type"] in PER_NODE_TYPES else None
        added.setdefault(job_id, []).extend(add_tasks(store, job_id, len(nodes), pins=pins, retries=count))
    return added

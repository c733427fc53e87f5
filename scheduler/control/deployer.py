"""Advancing deployments: replace a job's old tasks with its new version's, group by group,
as its ``update`` block says (docs/deployments.md).

Any scheduler worker calls :func:`advance_all` from its upkeep; each deployment in
progress is advanced by one worker at a time under a short lock, and every change of its
state is a compare-and-set script, so a worker killed part way loses nothing: the next
one reads the tasks as they are and carries on. Each step is level-triggered: it counts
the old and new tasks now, stops and queues what the policy allows, and records the
counts; nothing depends on having seen an earlier step.
"""

from __future__ import annotations

import logging

from scheduler.control import reconcile
from scheduler.model import FAILED, GLOBAL, PENDING, RUNNING, STOPPED, SchedError, SpecError, Task
from scheduler.model.update import HEALTHY, START_FIRST, UNHEALTHY
from scheduler.state.deployments import (AWAITING_PROMOTION, CANCELLED, IN_PROGRESS, PAUSED, REVERTED,
                                         RUNNING as DEPLOYING, SUCCESSFUL, FAILED as DEPLOYMENT_FAILED)
from scheduler.state.history import Submitted
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

log = logging.getLogger("sched.worker")

LOCK_MS = 5_000  # a worker that dies holding a deployment holds it this long at most


def advance_all(store: Store) -> list[str]:
    """Advance every deployment in progress that no other worker is advancing now.
    Returns the ids of those this call looked at."""
    seen = []
    for deployment in store.active_deployment_ids():
        lock = f"deployment:{deployment}"
        if not store.take_lock(lock, LOCK_MS):
            continue
        try:
            advance(store, deployment)
            seen.append(deployment)
        except SchedError as exc:  # removed, or a stored spec that no longer parses: the others go on
            log.warning("deployment %s: %s", deployment, exc)
        finally:
            store.release_lock(lock)
    return seen


def _counted_healthy(task: Task, now: int, min_ms: int) -> bool:
    return task.state == RUNNING and task.health == HEALTHY and now - task.health_ms >= min_ms


def _stop_order(task: Task):
    """Which old tasks go first: pending ones, then unhealthy, then the newest."""
    return (task.state != PENDING, task.health == HEALTHY, -task.index)


def advance(store: Store, deployment: str) -> str:
    """One step of one deployment; returns the state it is left in."""
    d = store.get_deployment(deployment)
    job_id, to = d["job"], d["to"]
    fields = store.job_fields(job_id)
    if d.get("revert") == "pending":
        return _revert(store, d, fields)
    if d["state"] not in IN_PROGRESS:
        store.set_deployment(deployment, job_id, (d["state"],), fields={"revert": "none"})  # leaves the active set
        return d["state"]
    if not fields or fields.get("status") != reconcile.RUNNING_JOB:
        return _end(store, d, CANCELLED, "the job was stopped")
    if int(fields["version"]) != to:
        return _end(store, d, CANCELLED, f"superseded by version {fields['version']}")
    spec = parse_stored(fields["spec"])
    policy = spec.update
    if policy is None:
        return _end(store, d, CANCELLED, "the job's spec no longer has an update block")
    now = store.now_ms()
    tasks = store.tasks(store.job_task_ids(job_id))
    new = [t for t in tasks if t.version == to and not t.terminal]
    old = [t for t in tasks if t.version != to and not t.terminal]
    min_ms = int(policy.min_healthy_time * 1000)
    healthy = [t for t in new if _counted_healthy(t, now, min_ms)]
    broken = [t for t in tasks if t.version == to and (t.state == FAILED or (t.health == UNHEALTHY and t.live))]
    targets = sorted(reconcile.global_targets(spec, store.nodes())) if spec.type == GLOBAL else None
    desired = len(targets) if targets is not None else spec.replicas
    counts = {"to_desired": desired, "to_placed": sum(t.live for t in new), "to_healthy": len(healthy),
              "to_unhealthy": len(broken), "from_desired": max(0, desired - len(new)),
              "from_placed": sum(t.live for t in old),
              "from_healthy": sum(t.state == RUNNING and t.health == HEALTHY for t in old)}
    if len(healthy) > d["to_counts"]["healthy"]:
        counts["progress_at"] = now
        counts["next_at"] = now + int(policy.delay * 1000)
    if d["state"] == PAUSED:
        store.set_deployment(deployment, job_id, (PAUSED,), fields=counts)
        return PAUSED
    if broken and (not desired or len(broken) / desired > policy.max_failure_ratio):  # SwarmKit's rule
        return fail(store, deployment, _failures(broken, to, policy.max_failure_ratio, desired), counts)
    since = d["resumed_at"]
    if d["state"] == DEPLOYING:
        late = [t for t in new if not _counted_healthy(t, now, min_ms)
                and now - max(t.created_ms, since) > policy.healthy_deadline * 1000]
        if late:
            return fail(store, deployment, f"task {late[0].id} was not healthy within healthy_deadline "
                                           f"({policy.healthy_deadline:g} s)", counts)
        progress = max(counts.get("progress_at", d["progress_at"]), since)
        if policy.progress_deadline and now - progress > policy.progress_deadline * 1000:
            return fail(store, deployment, f"no new task turned healthy within progress_deadline "
                                           f"({policy.progress_deadline:g} s)", counts)
    if not d["promoted"]:
        if len(new) < d["canary"]:
            reconcile.add_tasks(store, job_id, d["canary"] - len(new))
        if len(healthy) < d["canary"]:
            store.set_deployment(deployment, job_id, (d["state"],), fields=counts)
            return d["state"]
        if not policy.auto_promote:
            counts["message"] = f"{len(healthy)} canary task(s) healthy: waiting for `sched deployment promote`"
            store.set_deployment(deployment, job_id, (DEPLOYING, AWAITING_PROMOTION), AWAITING_PROMOTION, counts)
            return AWAITING_PROMOTION
        counts.update(promoted=1, message="canary task(s) healthy: promoted automatically")
    if d["state"] == AWAITING_PROMOTION:  # promoted meanwhile: promote() moves it to running
        store.set_deployment(deployment, job_id, (AWAITING_PROMOTION,), fields=counts)
        return AWAITING_PROMOTION
    if not old and len(healthy) >= desired and len(new) == desired:
        counts["message"] = f"{desired} task(s) of version {to} healthy"
        return store.set_deployment(deployment, job_id, (DEPLOYING,), SUCCESSFUL, counts, stable=True)[1]
    room = max(0, policy.max_parallel - (len(new) - len(healthy)))
    if now < d.get("next_at", 0):
        room = 0
    if targets is not None:
        _roll_global(store, job_id, policy, room, old, new, healthy, targets)
    else:
        _roll(store, job_id, to, policy, room, old, new, healthy, desired)
    store.set_deployment(deployment, job_id, (DEPLOYING,), fields=counts)
    return DEPLOYING


def _failures(broken: list[Task], to: int, ratio: float, desired: int) -> str:
    last = broken[-1]
    said = f"task {last.id} of version {to} failed: {last.message or last.health}"
    if not ratio:
        return said
    return (f"{len(broken)} of {desired} task(s) of version {to} failed, more than max_failure_ratio {ratio:g} "
            f"allows; the last: {said}")


def _roll(store: Store, job_id: str, to: int, policy, room: int, old: list[Task], new: list[Task],
          healthy: list[Task], desired: int) -> None:
    """Stop old tasks and queue new ones, within ``room`` (max_parallel less the new tasks
    not yet healthy): stop-first keeps at most ``desired`` tasks, start-first keeps at
    least ``desired`` healthy ones."""
    old = sorted(old, key=_stop_order)
    if policy.order == START_FIRST:
        stop = old[:max(0, len(old) - max(0, desired - len(healthy)))]
        add = min(room, desired - len(new))
    else:
        stop = old[:min(room, len(old))]
        add = min(room, desired - len(new), desired - (len(old) - len(stop)) - len(new))
    if stop:
        store.finish_ids([t.id for t in stop], STOPPED, f"replaced by version {to}")
    if add > 0:
        reconcile.add_tasks(store, job_id, add)
    elif len(new) > desired and not old:  # scaled down, or replacements beyond the count
        surplus = sorted(new, key=lambda t: (t in healthy, t.state != PENDING, -t.index))[:len(new) - desired]
        store.finish_ids([t.id for t in surplus], STOPPED, f"scaled down to {desired}")


def _roll_global(store: Store, job_id: str, policy, room: int, old: list[Task], new: list[Task],
                 healthy: list[Task], targets: list[str]) -> None:
    """A global job rolls node by node: up to ``room`` nodes at a time get their new task."""
    new_on = {t.pin for t in new}
    healthy_on = {t.pin for t in healthy}
    todo = sorted({t.pin for t in old if t.pin in targets and t.pin not in new_on})[:room]
    if policy.order == START_FIRST:
        stop = [t.id for t in old if t.pin in healthy_on]
    else:
        stop = [t.id for t in old if t.pin in todo]
    if stop:
        store.finish_ids(stop, STOPPED, f"replaced by version {new[0].version if new else 'new'}")
    if todo:
        reconcile.add_tasks(store, job_id, len(todo), pins=todo)


def _end(store: Store, d: dict, state: str, message: str) -> str:
    store.set_deployment(d["id"], d["job"], IN_PROGRESS, state, {"message": message})
    return state


def fail(store: Store, deployment: str, message: str, counts: dict | None = None) -> str:
    """End a deployment as failed (a deadline passed, a new task failed, or a person said
    so). With ``auto_revert``, the last version that was healthy is deployed again."""
    d = store.get_deployment(deployment)
    fields = store.job_fields(d["job"])
    spec = parse_stored(fields[f"spec:{d['to']}"]) if fields.get(f"spec:{d['to']}") else None
    revert = spec is not None and spec.update is not None and spec.update.auto_revert \
        and d.get("stable") and d["stable"] != d["to"] and f"spec:{d['stable']}" in fields
    extra = {**(counts or {}), "message": message}
    if revert:
        extra.update(revert="pending", revert_to=d["stable"])
    done, state = store.set_deployment(deployment, d["job"], IN_PROGRESS, DEPLOYMENT_FAILED, extra)
    if done and revert:
        return _revert(store, store.get_deployment(deployment), fields)
    return state


def _revert(store: Store, d: dict, fields: dict) -> str:
    """Deploy again the version a failed deployment reverts to (its spec submitted as a new
    version). Safe to repeat: a job already running that spec is left as it is."""
    target = int(d["revert_to"])
    spec_text = fields.get(f"spec:{target}")
    current = fields.get("spec")
    if spec_text is None or (int(fields.get("version", 0)) != d["to"] and current != spec_text):
        store.set_deployment(d["id"], d["job"], (DEPLOYMENT_FAILED,), fields={
            "revert": "skipped", "message": d["message"] + "; not reverted: the job changed since"})
        return DEPLOYMENT_FAILED
    # Recorded with the worker's Redis user; a repeat after a crash changes nothing and is not recorded again.
    result = reconcile.submit(store, parse_stored(spec_text), Submitted(
        "revert", None, {"to": target, "deployment": d["id"], "auto": True}, unchanged=False))
    note = f"; reverted to version {target}, as version {result['version']}"
    store.set_deployment(d["id"], d["job"], (DEPLOYMENT_FAILED,), REVERTED, {
        "revert": "done", "message": d["message"] + note, "reverted_as": result["version"]})
    return REVERTED


# What a person does to a deployment (sched deployment promote|pause|resume|fail).
def promote(store: Store, deployment: str) -> dict:
    d = store.get_deployment(deployment)
    if d["promoted"] and d["state"] != AWAITING_PROMOTION:
        return _refuse(d, "has no canary tasks waiting for promotion")
    done, state = store.set_deployment(deployment, d["job"], (AWAITING_PROMOTION, DEPLOYING, PAUSED),
                                       DEPLOYING if d["state"] == AWAITING_PROMOTION else "",
                                       {"promoted": 1, "progress_at": store.now_ms(), "resumed_at": store.now_ms(),
                                        "message": "promoted"})
    return _result(store, deployment, done, state, "be promoted")


def pause(store: Store, deployment: str) -> dict:
    job_id = store.get_deployment(deployment)["job"]
    done, state = store.set_deployment(deployment, job_id, (DEPLOYING, PAUSED), PAUSED, {"message": "paused"})
    return _result(store, deployment, done, state, "be paused")


def resume(store: Store, deployment: str) -> dict:
    now = store.now_ms()
    done, state = store.set_deployment(deployment, store.get_deployment(deployment)["job"], (PAUSED, DEPLOYING),
                                       DEPLOYING, {"message": "resumed", "resumed_at": now, "progress_at": now})
    return _result(store, deployment, done, state, "be resumed")


def fail_now(store: Store, deployment: str) -> dict:
    d = store.get_deployment(deployment)
    if d["state"] not in IN_PROGRESS:
        return _refuse(d, "is not in progress")
    fail(store, deployment, "failed by request")
    return store.get_deployment(deployment)


def _refuse(d: dict, why: str) -> dict:
    raise SpecError(f"deployment {d['id']} is {d['state']} and {why}.")


def _result(store: Store, deployment: str, done: bool, state: str, what: str) -> dict:
    if not done:
        raise SpecError(f"deployment {deployment} is {state} and cannot {what}.")
    return store.get_deployment(deployment)


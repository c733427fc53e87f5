"""The periodic launcher (Nomad's periodic dispatcher, kube's CronJob controller).

Every worker's upkeep calls :func:`launch_due` (about every 100 ms): one round trip reads
Redis time and the earliest next launch in ``jobs:periodic``; when some are due, each due
job's tick is launched by :func:`launch_tick`. A tick is claimed by its time in
``launch.lua`` (the parent's ``next_launch`` must still be that tick), so of any number
of workers one launches it, once; the same step moves ``next_launch`` to the following
tick. Ticks that came due while no worker ran are not run late: only the latest due tick
is launched, if it is less than ``starting_deadline`` late, and the others are recorded
as missed (the parent's history and a ``missed`` event). Overlap: ``allow`` launches
beside running launches, ``forbid`` skips the tick (recorded) while one runs, ``replace``
launches and then stops the ones that ran.
"""

from __future__ import annotations

import math

from scheduler.control import launching, reconcile
from scheduler.control.outcomes import FAILED, RUNNING, Outcomes, COMPLETE
from scheduler.model import JobSpec, SpecError
from scheduler.state.jobs import parse_stored
from scheduler.state.launches import Launched
from scheduler.state.store import Store

DISPATCHES_KEPT = 1000  # the newest launches a parameterized job keeps, whatever they came to
MAX_COUNTED = 10_000  # due ticks handled per round (a schedule of seconds down for a day catches up in rounds)
LATE = "not launched within starting_deadline (no worker was running, or it was overdue)"
OVERLAP = "the previous launch still runs (overlap: forbid)"


def launch_due(store: Store, outcomes: Outcomes, limit: int = 100) -> list[str]:
    """Launch every periodic job's due tick; returns the children made."""
    now, first = store.first_launch()
    if first is None or first > now:
        return []
    made = []
    for job_id in store.due_launchers(now, limit):
        result = launch_tick(store, outcomes, job_id, now)
        if result is not None and result.created:
            made.append(result.child)
    return made


def launch_tick(store: Store, outcomes: Outcomes, job_id: str, now: int) -> Launched | None:
    """Launch ``job_id``'s due tick as its overlap policy says, or record it missed."""
    fields = store.job_fields(job_id)
    spec = parse_stored(fields["spec"]) if fields.get("spec") else None
    if spec is None or spec.periodic is None or fields.get("status") != "running":
        store.forget_launcher(job_id)  # stopped, removed or no longer periodic: a new submit puts it back
        return None
    periodic = spec.periodic
    nxt = fields.get("next_launch", "+inf")
    if nxt == "+inf" or fields.get("suspended") == "1":
        store.set_launcher(job_id, math.inf)
        return None
    tick = int(nxt)
    if tick > now:
        store.set_launcher(job_id, tick)  # the heap was behind the job's hash (a resubmit)
        return None
    anchor = int(fields.get("anchor", 0))
    due = [tick, *periodic.ticks(tick, now, anchor, limit=MAX_COUNTED)]
    latest = due[-1]
    following = periodic.next_after(latest, anchor)
    following = math.inf if following is None else following
    late = now - latest > periodic.starting_deadline * 1000
    running = [] if late else _running_children(store, outcomes, job_id)
    if late or (running and periodic.overlap == "forbid"):
        skipped = (LATE if late else OVERLAP, due[0], latest, len(due))
        return store.launch(job_id, f"{job_id}/periodic-{latest // 1000}", how="tick", tick=tick,
                            next_launch=following, skipped=skipped, create=False)
    skipped = (LATE, due[0], due[-2], len(due) - 1) if len(due) > 1 else None
    launches = int(fields.get("launches", 0)) if periodic.overlap != "allow" else None
    child = launching.child_spec(spec, f"{job_id}/periodic-{latest // 1000}")
    result = launching.launch(store, spec, child, how="tick", tick=tick, at=latest, launches=launches,
                              next_launch=following, skipped=skipped)
    if result.refused == "exists":  # never a tick's name (a forced launch avoids them): recorded, not stuck on it
        return store.launch(job_id, child.id, how="tick", tick=tick, next_launch=following, create=False,
                            skipped=(f"a job named {child.id} exists", due[0], latest, len(due)))
    if result.created:
        if periodic.overlap == "replace":
            # Only the launcher whose launch was taken stops the older ones: one that read
            # the job before another launched the tick would otherwise stop the newest.
            for older in running:
                reconcile.stop(store, older)
        trim_history(store, outcomes, spec)
    _tend_last(store, spec, fields)
    return result


def _running_children(store: Store, outcomes: Outcomes, job_id: str) -> list[str]:
    return [child for child, _ in store.children(job_id) if outcomes.of(store, child) == RUNNING]


def _tend_last(store: Store, spec: JobSpec, fields: dict) -> None:
    """A sysbatch launch whose launcher died before it queued the tasks gets them now."""
    last = fields.get("last_child")
    if spec.per_node and last and not store.job_task_ids(last) and store.job_fields(last).get("status") == "running":
        reconcile.reconcile_global(store, only=[last])


def force(store: Store, outcomes: Outcomes, job_id: str, by: str) -> dict:
    """``sched job launch ID``: launch the periodic job now, outside its schedule (Nomad's
    ``periodic force``), as its overlap policy says; its schedule is unchanged."""
    fields = store.job_fields(job_id)
    if not fields:
        raise SpecError(f"job {job_id!r} does not exist.")
    spec = parse_stored(fields["spec"])
    if spec.periodic is None:
        hint = f" (a parameterized job is launched with `sched job dispatch {job_id}`)" if spec.parameterized else ""
        raise SpecError(f"job {job_id} is not periodic; only a periodic job is launched{hint}.")
    if fields.get("status") != "running":
        raise SpecError(f"job {job_id} is stopped; submit it again to launch it.")
    running = _running_children(store, outcomes, job_id)
    if running and spec.periodic.overlap == "forbid":
        raise SpecError(f"job {job_id} has a launch still running ({running[-1]}) and its overlap is forbid.")
    for child in running if spec.periodic.overlap == "replace" else []:
        reconcile.stop(store, child)
    launches = int(fields.get("launches", 0)) if spec.periodic.overlap != "allow" else None
    now = store.now_ms()
    last = fields.get("last_child", "")
    second = max(now // 1000, int(last.rsplit("-", 1)[1]) + 1 if "/periodic-" in last else 0)  # never an old name
    anchor = int(fields.get("anchor", 0))
    ticks = {t // 1000 for t in spec.periodic.ticks(now - 1000, now + 60_000, anchor, limit=100)}
    for _ in range(60):
        if second not in ticks and not store.job_fields(f"{job_id}/periodic-{second}"):
            break
        second += 1  # a tick's name: a forced launch never takes it
    child = launching.child_spec(spec, f"{job_id}/periodic-{second}")
    result = launching.launch(store, spec, child, how="force", launches=launches, by=by)
    if not result.created:
        raise SpecError(f"job {job_id} was not launched: {_refusals.get(result.refused, result.refused)}.")
    trim_history(store, outcomes, spec)
    return {"id": job_id, "launched": result.child}


_refusals = {"stopped": "it was stopped meanwhile", "launched": "another launch was made meanwhile; try again",
             "exists": "a launch of that second exists; try again", "gone": "it was removed meanwhile"}


def suspend(store: Store, job_id: str, suspended: bool) -> dict:
    """``sched job suspend|resume ID``: no tick is launched while a periodic job is
    suspended (kube's ``suspend``); resumed, it launches from the next tick on (the ticks
    in between are not run). ``changed`` is False when it already was as asked."""
    fields = store.job_fields(job_id)
    if not fields:
        raise SpecError(f"job {job_id!r} does not exist.")
    spec = parse_stored(fields["spec"])
    if spec.periodic is None:
        raise SpecError(f"job {job_id} is not periodic; only a periodic job is suspended or resumed.")
    now = store.now_ms()
    if (fields.get("suspended") == "1") == suspended:  # already so: nothing changes, nothing is recorded
        nxt = float(fields.get("next_launch", "+inf"))
        return {"id": job_id, "suspended": suspended, "changed": False,
                "next_launch": None if nxt == math.inf else int(nxt)}
    if suspended:
        nxt = math.inf
    else:
        tick = spec.periodic.next_after(now, int(fields.get("anchor", now)))
        nxt = math.inf if tick is None else tick
    store.set_schedule(job_id, suspended, nxt)
    return {"id": job_id, "suspended": suspended, "changed": True, "next_launch": None if nxt == math.inf else nxt}


def trim_history(store: Store, outcomes: Outcomes, spec: JobSpec) -> list[str]:
    """Remove the ended launches of a periodic job beyond its history limits (the newest
    ``history.completed`` complete ones and ``history.failed`` failed or stopped ones
    stay), or of a parameterized job beyond the newest ``DISPATCHES_KEPT``. Returns them."""
    children = store.children(spec.id)
    if spec.periodic is None:
        old = [child for child, _ in children[:max(0, len(children) - DISPATCHES_KEPT)]]
        removed = [child for child in old if outcomes.of(store, child) != RUNNING]
    else:
        keep = {COMPLETE: spec.periodic.history.completed, FAILED: spec.periodic.history.failed}
        if len(children) <= sum(keep.values()):
            return []
        removed = []
        for child, _ in reversed(children):
            outcome = outcomes.of(store, child)
            if outcome == RUNNING:
                continue
            kind = COMPLETE if outcome == COMPLETE else FAILED
            if keep[kind] > 0:
                keep[kind] -= 1
            else:
                removed.append(child)
    for child in removed:
        store.remove_launch(child)
    store.forget_children(spec.id, removed)
    return removed

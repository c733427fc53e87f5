"""Dependencies between jobs: ``after: [{job: extract, state: complete}]``.

At submit (:func:`check`), every job named must exist and the dependencies must not close
a cycle; a submit that starts such a job holds it (``held``, ``jobs:held``): its tasks
are created in ``q:waiting``. The workers' upkeep (:func:`release`, under a short lock)
then looks at each held job: once every dependency holds, its tasks go to ``q:active``
(``unhold.lua``); once one can no longer hold (the job it waits for failed, was stopped or
removed, or completed when it waited for a failure), the job ends as failed with that
reason; a cycle that concurrent submits closed after all fails every job in it.
"""

from __future__ import annotations

from scheduler.control import deadlines
from scheduler.control.failing import fail_job
from scheduler.control.outcomes import COMPLETE, ENDED, FAILED, MISSING, RUNNING, STOPPED, Outcomes
from scheduler.model import JobSpec, SpecError
from scheduler.model.dependencies import ENDED as WANT_ENDED, FAILED as WANT_FAILED, After, waiting_message
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

LOCK = "dependencies"
LOCK_MS = 10_000
MAX_DEPTH = 1000  # jobs walked looking for a cycle


def check(store: Store, spec: JobSpec) -> None:
    """Refuse, in one sentence, a spec whose ``after`` names a job that does not exist or
    closes a cycle (through the stored specs of the jobs it names)."""
    for after in spec.after:
        if not store.job_fields(after.job):
            raise SpecError(f"job {spec.id}: after names job {after.job}, which does not exist; submit it first.")
    path = _cycle(store, spec.id, [a.job for a in spec.after])
    if path:
        raise SpecError(f"job {spec.id}: after would close a cycle: {' -> '.join([spec.id, *path])}.")


def check_together(store: Store, jobs: list[tuple[str, JobSpec]]) -> list[int]:
    """For jobs submitted together (one file): refuse a cycle their ``after`` close among
    themselves or through stored jobs, and return the order to submit them in, each after
    the jobs of the batch it names (so that a job may name one written below it)."""
    afters = {job_id: [a.job for a in spec.after] for job_id, spec in jobs}
    for job_id, names in afters.items():
        path = _cycle(store, job_id, names, afters) if names else []
        if path:
            raise SpecError(f"job {job_id}: after would close a cycle: {' -> '.join([job_id, *path])}.")
    position = {job_id: i for i, (job_id, _) in enumerate(jobs)}  # the last of an id given twice
    order: list[int] = []
    seen: set[int] = set()
    for first in range(len(jobs)):  # depth first, without recursion (a chain may be long)
        stack = [(first, False)]
        while stack:
            i, ready = stack.pop()
            if ready:
                order.append(i)
                continue
            if i in seen:
                continue
            seen.add(i)
            stack.append((i, True))
            stack.extend((position[name], False) for name in reversed(afters[jobs[i][0]]) if name in position)
    return order


def _cycle(store: Store, start: str, names: list[str], specs: dict[str, list[str]] | None = None) -> list[str]:
    """A path of dependencies from ``names`` back to ``start`` (empty when there is none)."""
    stack = [(name, [name]) for name in names]
    seen: set[str] = set()
    while stack and len(seen) < MAX_DEPTH:
        name, path = stack.pop()
        if name == start:
            return path
        if name in seen:
            continue
        seen.add(name)
        for after in _after_of(store, name, specs):
            stack.append((after, [*path, after]))
    return []


def _after_of(store: Store, job_id: str, specs: dict[str, list[str]] | None) -> list[str]:
    if specs is not None and job_id in specs:
        return specs[job_id]
    raw = store.job_fields(job_id).get("spec")
    return [a.job for a in parse_stored(raw).after] if raw else []


def holds(outcome: str, after: After) -> bool | None:
    """Whether ``after`` holds for a job that came to ``outcome``: True, False (it never
    will: the waiting job fails), or None (not yet)."""
    if outcome == MISSING:
        return False
    if outcome == RUNNING:
        return None
    if after.state == WANT_ENDED:
        return outcome in ENDED
    if after.state == WANT_FAILED:
        return outcome == FAILED
    return outcome == COMPLETE


def why_not(after: After, outcome: str) -> str:
    what = {FAILED: "failed", STOPPED: "was stopped", MISSING: "no longer exists", COMPLETE: "completed"}[outcome]
    return f"job {after.job} {what}, so the dependency on it ({after.state}) can never hold"


def waiting_for(store: Store, spec: JobSpec, outcomes: Outcomes | None = None) -> list[str]:
    """What a held job still waits for, in words (``task explain``): one phrase per
    dependency that does not hold yet."""
    outcomes = outcomes or Outcomes()
    return [waiting_message(spec.id, after) for after in spec.after
            if holds(outcomes.of(store, after.job), after) is not True]


def release(store: Store, outcomes: Outcomes, limit: int = 1000) -> dict[str, list[str]]:
    """One round of the upkeep over the held jobs: ``{"released": [...], "failed": [...]}``."""
    held = store.held_jobs(limit)
    done: dict[str, list[str]] = {"released": [], "failed": []}
    if not held or not store.take_lock(LOCK, LOCK_MS):
        return done
    try:
        specs: dict[str, JobSpec] = {}
        for job_id in held:
            fields = store.job_fields(job_id)
            spec = parse_stored(fields["spec"]) if fields.get("spec") else None
            if spec is None or fields.get("status") == STOPPED or fields.get("held") != "1":
                # Stopped (its tasks end with it), gone, or released by a releaser that died
                # part way: finish its release, which only moves what still waits.
                if spec is not None and fields.get("status") != STOPPED:
                    store.unhold(job_id)
                else:
                    store.forget_hold(job_id)
                if spec is not None:
                    store.no_longer_need([a.job for a in spec.after], job_id)
                continue
            specs[job_id] = spec
            verdicts = [(after, holds(outcomes.of(store, after.job), after)) for after in spec.after]
            broken = [after for after, verdict in verdicts if verdict is False]
            if broken:
                reason = why_not(broken[0], outcomes.of(store, broken[0].job))
                fail_job(store, job_id, f"{reason}: job {job_id} did not run")
                store.forget_hold(job_id)
                store.no_longer_need([a.job for a in spec.after], job_id)
                done["failed"].append(job_id)
            elif all(verdict for _, verdict in verdicts):
                store.unhold(job_id)
                store.no_longer_need([a.job for a in spec.after], job_id)
                deadlines.start(store, job_id, spec)
                done["released"].append(job_id)
        done["failed"] += _fail_cycles(store, specs)
        return done
    finally:
        store.release_lock(LOCK)


def _fail_cycles(store: Store, specs: dict[str, JobSpec]) -> list[str]:
    """Held jobs that wait for each other in a cycle (two submits that each passed
    :func:`check` at once): each fails, naming the cycle."""
    graph = {job_id: [a.job for a in spec.after] for job_id, spec in specs.items()}
    failed: list[str] = []
    for job_id in graph:
        if job_id in failed:
            continue
        path = _cycle(store, job_id, graph[job_id], graph)
        if path and all(step in graph for step in path):
            for member in [job_id, *path[:-1]]:
                if member not in failed:
                    fail_job(store, member, f"jobs {' -> '.join([job_id, *path])} wait for each other in a "
                                                  f"cycle: job {member} did not run")
                    store.forget_hold(member)
                    store.no_longer_need(graph[member], member)
                    failed.append(member)
    return failed

"""``after``: jobs that must reach a state before this one's tasks may be placed.

``after: [{job: extract, state: complete}]``: the job's tasks wait (in ``q:waiting``)
until every dependency holds: ``complete`` (it ran to completion), ``failed`` (it ended
with a task failed for good) or ``ended`` (either, or stopped). Checked at submit: the
jobs named must exist and the dependencies must not close a cycle
(control/dependencies.py reads the graph); held by the workers' upkeep.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.names import is_job_id

COMPLETE, FAILED, ENDED = "complete", "failed", "ended"
WANTED_STATES = (COMPLETE, FAILED, ENDED)
MAX_AFTER = 100


@dataclass(frozen=True, slots=True)
class After:
    job: str
    state: str = COMPLETE


def parse_after(raw, job: str) -> tuple[After, ...]:
    if raw is None:
        return ()
    what = f"job {job}: after"
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"{what} must be a list such as [{{job: extract, state: complete}}].")
    if len(raw) > MAX_AFTER:
        raise SpecError(f"{what} lists {len(raw)} jobs; at most {MAX_AFTER}.")
    out: list[After] = []
    for item in raw:
        if isinstance(item, str):
            item = {"job": item}
        if not isinstance(item, dict) or "job" not in item or set(item) - {"job", "state"}:
            raise SpecError(f"{what} entry {item!r} must be {{job: <id>, state: complete|failed|ended}}.")
        name, state = item["job"], item.get("state", COMPLETE)
        if not isinstance(name, str) or not is_job_id(name):
            raise SpecError(f"{what} names {name!r}, which is not a job id.")
        if name == job:
            raise SpecError(f"{what} names the job itself; a job cannot wait for itself.")
        if state not in WANTED_STATES:
            raise SpecError(f"{what}: state {state!r} for job {name} is not one of {', '.join(WANTED_STATES)}.")
        if any(a.job == name for a in out):
            raise SpecError(f"{what} names job {name} twice.")
        out.append(After(job=name, state=state))
    return tuple(out)


def after_raw(after: tuple[After, ...]) -> list[dict]:
    return [{"job": a.job, "state": a.state} for a in after]


def waiting_message(job: str, after: After) -> str:
    verb = {COMPLETE: "complete", FAILED: "fail", ENDED: "end"}[after.state]
    return f"waiting for job {after.job} to {verb}"

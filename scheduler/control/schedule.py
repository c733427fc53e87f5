"""A job's place in time and order, as ``sched job show`` and the dashboard show it: a
periodic job's next launch and last launches, a launch's parent, what a held job still
waits for, and why a failed job failed."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone

from scheduler.control import dependencies
from scheduler.control.outcomes import Outcomes
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

LAUNCHES_SHOWN = 10


def iso(ms: float | int | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 in UTC (``2026-01-02T02:00:00Z``); None for none."""
    if ms is None or ms == math.inf:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def details_read(fields: dict) -> bool:
    """Whether :func:`details` reads Redis for the job of ``fields`` (its hash): a
    launcher's launches, a held job's dependencies (the removal time aside, which a caller
    may give)."""
    spec = parse_stored(fields["spec"]) if fields.get("spec") else None
    return spec is not None and (spec.launcher or (fields.get("held") == "1" and bool(spec.after)))


def details(store: Store, job_id: str, fields: dict, outcomes: Outcomes | None = None,
            remove_at: Callable[[], int | None] | None = None) -> dict:
    """The fields a job's record gains: ``next_launch``, ``suspended``, ``launches`` (the
    newest first: id, launched, status), ``missed`` (ticks recorded missed) for a periodic
    or parameterized job; ``parent`` for a launch; ``waiting_for`` for a held job;
    ``failure`` for a job failed with a reason; ``finished_at`` and ``remove_at`` (ms)
    for a finished job: when it finished, and when retention removes it (its
    ``ttl_after_finished``, or the namespace's ``job_retention`` as set now: read, unless
    ``remove_at`` gives it)."""
    out: dict = {}
    spec = parse_stored(fields["spec"]) if fields.get("spec") else None
    if spec is None:
        return out
    if fields.get("finished_at"):
        out["finished_at"] = int(fields["finished_at"])
        out["remove_at"] = store.remove_at(job_id) if remove_at is None else remove_at()
    outcomes = outcomes or Outcomes()
    if spec.periodic is not None:
        nxt = fields.get("next_launch", "+inf")
        out["next_launch"] = None if nxt == "+inf" or fields.get("status") != "running" else iso(int(nxt))
        out["suspended"] = fields.get("suspended") == "1"
        out["missed"] = int(fields.get("missed", 0))
    if spec.launcher:
        out["launches"] = [{"id": child, "launched": iso(ms), "status": outcomes.of(store, child)}
                           for child, ms in reversed(store.children(job_id)[-LAUNCHES_SHOWN:])]
    if fields.get("parent"):
        out["parent"] = fields["parent"]
    if fields.get("held") == "1" and spec.after:
        out["waiting_for"] = dependencies.waiting_for(store, spec, outcomes)
    if fields.get("failure"):
        out["failure"] = fields["failure"]
    return out

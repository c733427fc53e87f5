"""``sched job dispatch`` (Nomad's ``nomad job dispatch``): launch a parameterized job with
its input.

A dispatch checks the meta and payload against the job's ``parameterized`` block, then
makes a child job ``<id>/dispatch-<unix time>-<8 hex digits>`` whose commands see the meta
as ``SCHED_META_<KEY>`` and the payload in the file ``SCHED_PAYLOAD`` names. With an
idempotency token, a dispatch the job has seen (its child still kept) returns that child
instead of making another, whether it runs or ended; ``launch.lua`` checks the token and
records it in the step that makes the child, so two dispatches with one token make one
child.
"""

from __future__ import annotations

import re
import secrets

from scheduler.control import launching, periodic
from scheduler.control.outcomes import Outcomes
from scheduler.model import SpecError
from scheduler.model.parameterized import check_dispatch
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

_TOKEN_RE = re.compile(r"[\x21-\x7e]{1,128}")


def dispatch(store: Store, job_id: str, meta: dict | None = None, payload: bytes | None = None,
             token: str | None = None, by: str = "") -> dict:
    """Make a child of the parameterized job ``job_id``; ``{id, dispatched, created}``
    (``created`` False when the token named an earlier child)."""
    fields = store.job_fields(job_id)
    if not fields:
        raise SpecError(f"job {job_id!r} does not exist.")
    spec = parse_stored(fields["spec"])
    if spec.parameterized is None:
        raise SpecError(f"job {job_id} is not parameterized; only a job with a parameterized block is dispatched.")
    if token is not None and not _TOKEN_RE.fullmatch(token):
        raise SpecError("an idempotency token is 1 to 128 printable characters without spaces.")
    checked = check_dispatch(spec.parameterized, job_id, meta or {}, payload)
    if fields.get("status") != "running":
        if token:  # a stopped job still answers a token it has seen
            made = store.dispatched(job_id, token)
            if made is not None:
                return {"id": job_id, "dispatched": made, "created": False}
        raise SpecError(f"job {job_id} is stopped; submit it again to dispatch it.")
    now_s = store.now_ms() // 1000
    child = launching.child_spec(spec, f"{job_id}/dispatch-{now_s}-{secrets.token_hex(4)}", checked)
    result = launching.launch(store, spec, child, how="dispatch", payload=payload, token=token or "", by=by)
    if result.created:
        periodic.trim_history(store, Outcomes(), spec)
        return {"id": job_id, "dispatched": result.child, "created": True}
    if result.child:
        return {"id": job_id, "dispatched": result.child, "created": False}
    reasons = {"stopped": f"job {job_id} was stopped meanwhile", "gone": f"job {job_id} was removed meanwhile",
               "exists": "a dispatch of the same name exists; try again"}
    raise SpecError(f"{reasons.get(result.refused, result.refused)}.")

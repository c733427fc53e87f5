"""Making a child job of a periodic or parameterized job: its spec (the parent's, without
the block that launches it, with a dispatch's meta), its hash (``launch.lua``, exactly
once), then its tasks. Ticks (control/periodic.py), forced launches and dispatches
(control/dispatch.py) all come here."""

from __future__ import annotations

import base64

import orjson

from scheduler.control import deadlines, reconcile
from scheduler.model import JobSpec, parse_job
from scheduler.state.jobs import shares_value
from scheduler.state.launches import Launched
from scheduler.state.store import Store


def child_spec(parent: JobSpec, child_id: str, meta: dict[str, str] | None = None) -> JobSpec:
    """The spec a launch of ``parent`` runs: the parent's, as job ``child_id``, without its
    ``periodic`` or ``parameterized`` block, its meta with ``meta`` over it."""
    raw = {name: value for name, value in parent.raw.items() if name not in ("periodic", "parameterized")}
    raw["id"] = child_id
    if meta:
        raw["meta"] = {**(parent.meta or {}), **meta}
    return parse_job(raw)


def launch(store: Store, parent: JobSpec, child: JobSpec, *, how: str, payload: bytes | None = None,
           tick: int | None = None, at: int | None = None, launches: int | None = None,
           next_launch: float | None = None, token: str = "", skipped: tuple[str, int, int, int] | None = None,
           by: str = "sched", create: bool = True) -> Launched:
    """Create ``child`` (``launch.lua``: exactly once, see its header; ``tick`` the
    parent's next launch it claims, ``at`` the tick it runs for), then its tasks:
    its replicas through fill calls (a worker finishes them if this process dies first),
    or one per eligible node. A child that waits for dependencies is held; a batch child
    that does not starts counting its deadline."""
    text = orjson.dumps(child.raw).decode()
    count = 0 if child.per_node else child.replicas
    fields = {"id": child.id, "spec": text, "spec:1": text, "version": 1, "status": "running",
              "next_index": count, "parent": parent.id}
    if count:
        fields["filling:1:0"] = f"{count}|{child.priority}|0|0"
    if child.after:
        fields["held"] = "1"
        store.need([a.job for a in child.after], child.id)  # before it exists: retention keeps what it waits for
    if payload is not None:
        fields["payload"] = base64.b64encode(payload).decode()
    if at is not None:
        fields["tick"] = at
    # Its labels and anti-affinity before any task of it can be placed, as a submit's
    # (other jobs' selectors match a launch as any job).
    indexed = create and bool(child.labels or any(t.required for t in child.job_anti_affinity))
    if indexed:
        store.index_job_rules(child)
    result = store.launch(parent.id, child.id, how=how, tick=tick, launches=launches, next_launch=next_launch,
                          token=token, shares=shares_value(child), per_node=child.per_node, held=bool(child.after),
                          skipped=skipped, by=by, create=create, fields=fields)
    if result.created:
        begin(store, child)
    elif indexed and result.refused != "exists":  # no such job was made
        store.forget_job_rules(child.id)
    return result


def begin(store: Store, child: JobSpec) -> None:
    """Create the tasks of a child whose hash ``launch.lua`` made (and list it among the
    jobs whose disruption budget is counted, if it has one)."""
    if child.disruption_budget is not None:
        store.track_budget(child.id, True)
    if child.per_node:
        reconcile.reconcile_global(store, only=[child.id])
    elif child.replicas:
        store.fill_launched(child.id, child.priority, child.replicas)
    if not child.after:
        deadlines.start(store, child.id, child)

"""The activity page, ``/activity``: the namespace's latest events, newest first, filtered
by type, job and node (``?type=&job=&node=``), with times shown relative to now, and kept
live by its script (``static/activity.js``) from the page's event stream, which starts
right after the newest event the page was rendered with (``?after=``), so that nothing
falls between the two. ``/api/activity`` gives the same rows as JSON.

Its reads are of the namespace's stream only (``Store.stream``), here rather than in
:mod:`data`, which reads the scheduler's state.
"""

from __future__ import annotations

from scheduler.control.feed import EVENT_TYPES, EventFilter, job_of
from scheduler.state.app import App
from scheduler.tools.ui import api, data, inputs
from scheduler.tools.ui.inputs import BadInput

SHOWN = 200  # rows on the page
SCANNED = 20_000  # entries looked at, newest first, for the rows a filter keeps
_SUBJECT = {"task": "id", "job": "id", "node": "name"}
_CHANGE = ("state", "event", "availability", "status")


def row(entry_id: str, event: dict) -> dict:
    """One event as a row: id, time, type, subject (and the job of a task), change, and
    the other fields as ``name=value`` (static/activity.js builds the same from an event)."""
    kind = str(event.get("type", ""))
    subject_field = _SUBJECT.get(kind, "id")
    change_field = next((f for f in _CHANGE if f in event), None)
    change = "" if change_field is None else str(event[change_field])
    if change_field in ("availability", "status"):
        change = f"{change_field} {change}"
    shown = {"type", "ts", subject_field, change_field, "job" if kind == "task" else None}
    details = [f"{k}={'-' if v == '' else v}" for k, v in event.items() if k not in shown]
    return {"id": entry_id, "ts": event.get("ts") if isinstance(event.get("ts"), int) else 0, "type": kind,
            "subject": str(event.get(subject_field, "")), "job": job_of(event) if kind == "task" else None,
            "change": change, "details": details}


def filters(request) -> tuple[EventFilter, dict[str, str]]:
    """The page's filters, checked (one sentence when one is not valid)."""
    query = request.query_params
    kind = query.get("type") or ""
    if kind and kind not in EVENT_TYPES:
        raise BadInput(f"type must be one of {', '.join(EVENT_TYPES)}.")
    job = inputs.job_id(query["job"]) if query.get("job") else ""
    node = inputs.node_name(query["node"]) if query.get("node") else ""
    wanted = EventFilter.of(types=[kind] if kind else [], jobs=[job] if job else [], nodes=[node] if node else [])
    return wanted, {"type": kind, "job": job, "node": node}


def latest(app: App, wanted: EventFilter) -> tuple[list[dict], str]:
    """The newest :data:`SHOWN` events the filter keeps (of the newest :data:`SCANNED`), as
    rows, and the id of the newest entry looked at (the page's stream goes on after it)."""
    stream = app.store.stream
    rows: list[dict] = []
    newest, before, scanned = stream.last_id(), "+", 0
    while len(rows) < SHOWN and scanned < SCANNED:
        batch = stream.newest(500, before=before)
        scanned += len(batch)
        rows += [row(entry_id, event) for entry_id, event in batch if wanted.matches(event)]
        if len(batch) < 500:
            break
        before = "(" + batch[-1][0]  # exclusive: after the oldest one read
    return rows[:SHOWN], newest


def page(request):
    app = inputs.scoped_app(request)
    wanted, chosen = filters(request)
    rows, newest = latest(app, wanted)
    ns = app.keys.namespace
    names = data.namespaces(request.app.state.sched)
    return request.app.state.pages.render(
        "activity.html", namespace=ns, namespaces=names if ns in names else sorted([*names, ns]), page="activity",
        live_url="", rows=rows, newest=newest, filters=chosen, types=EVENT_TYPES, shown=SHOWN)


def api_rows(request):
    app = inputs.scoped_app(request)
    wanted, chosen = filters(request)
    rows, newest = latest(app, wanted)
    return api.JSON({"namespace": app.keys.namespace, "filters": chosen, "newest": newest, "events": rows})

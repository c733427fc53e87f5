"""The JSON API under ``/api/``: what each page shows, and the actions its forms take.

GET routes answer JSON objects (see docs/dashboard.md). POST routes take a form
(``application/x-www-form-urlencoded``) or a JSON object; every value is checked
(:mod:`inputs`) before anything is read or written. A POST from a plain HTML form (one
that accepts ``text/html``) is answered with a redirect to its ``next`` field, a path on
this site; any other with JSON.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, RedirectResponse

from scheduler.model import Node, Task
from scheduler.tools.ui import data, inputs, listing, node_words, why
from scheduler.tools.ui.auth import signed_in
from scheduler.tools.ui.templates import usage

MAX_BODY = 16_384  # bytes of a POST body
MAX_TASKS = 100_000  # the most tasks `?limit=` may ask for
DEPLOYMENTS_LISTED = 100  # the most deployments /api/deployments lists


class JSON(JSONResponse):
    def render(self, content) -> bytes:
        return orjson.dumps(content)


# ----------------------------------------------------------------------------- records
def node_record(node: Node, task_ids: list[str] | None = None) -> dict:
    record = {"name": node.name, "status": node.status, "availability": node.availability, "tasks": node.tasks,
              "labels": node.labels, "capacity": node.capacity,
              "allocated": {name: node.allocated.get(name, 0) for name in node.capacity},
              "usage": usage(node.capacity, node.allocated), "role": node.role, "os": node.os, "arch": node.arch,
              "plugins": sorted(node.plugins), "ports": {str(port): task for port, task in node.ports.items()},
              "meaning": node_words.meaning(node)}
    if task_ids is not None:
        record["task_ids"] = task_ids
    return record


def task_record(task: Task) -> dict:
    return {"id": task.id, "job": task.job, "version": task.version, "index": task.index, "state": task.state,
            "node": task.node or None, "priority": task.priority, "attempts": task.attempts,
            "retries": task.retries, "pin": task.pin or None, "nominated_node": task.nominated_node or None,
            "message": task.message, "allocated": task.allocated, "ports": list(task.ports),
            "created_ms": task.created_ms, "assigned_ms": task.assigned_ms, "started_ms": task.started_ms,
            "ended_ms": task.ended_ms, "health": task.current_health or None, "health_ms": task.health_ms,
            "health_check": task.health_check}


def job_record(job: data.JobView, spec: bool = False) -> dict:
    record = {"id": job.id, "type": job.type, "status": job.status, "priority": job.priority,
              "replicas": job.replicas, "version": job.version, "created_ms": job.created_ms,
              "tasks": job.counts, "total": job.total, "phase": job.phase}
    if spec:
        record["spec"] = job.spec
    return record


def rollouts_record(rollouts: data.Rollouts) -> dict:
    return {"deployment": rollouts.deployment, "versions": rollouts.versions, "older_versions": rollouts.older,
            "diff": rollouts.diff}


def places_record(places: why.TaskPlaces | None) -> dict | None:
    if places is None:
        return None
    return {"needs": places.needs, "ports": list(places.ports), "pinned": places.pinned or None,
            "quota": places.quota, "fits": places.fits,
            "nodes": [{"node": v.node, "fits": v.fits, "reason": v.reason, "free": v.free, "short": sorted(v.short),
                       "ports": {str(port): holder for port, holder in v.ports.items()}} for v in places.verdicts]}


def waits_record(waits: why.JobWaits | None) -> dict | None:
    if waits is None:
        return None
    return {"pending": waits.pending, "unattempted": waits.unattempted,
            "last": [{"message": message, "tasks": count, "example": example} for message, count, example in waits.last],
            "now": waits.now.to_dict() | {"available": waits.now.available}, "fits_on": waits.fits_on,
            "quota": waits.quota, "example": waits.example}


# ----------------------------------------------------------------------------- reads
def namespaces(request):
    base = request.app.state.sched
    return JSON({"default": base.keys.namespace, "namespaces": data.namespaces(base)})


def overview(request):
    app = inputs.scoped_app(request)
    view = data.overview(app)
    return JSON({"namespace": app.keys.namespace, "placed": view.placed, "now_ms": view.now_ms,
                 "queues": view.queues, "nodes": [node_record(n) for n in view.nodes],
                 "jobs": [job_record(j) for j in view.jobs], "deployments": view.deployments})


def nodes(request):
    app = inputs.scoped_app(request)
    choice = listing.choose(listing.NODES, request.query_params)
    every = data.nodes(app)
    rows = listing.apply(choice, every)
    return JSON({"namespace": app.keys.namespace, "total": len(every),
                 "nodes": [node_record(n, ids) for n, ids in rows]})


def node(request):
    app = inputs.scoped_app(request)
    choice = listing.choose(listing.TASKS, request.query_params)
    found, tasks = data.node(app, inputs.node_name(request.path_params["name"]))
    return JSON({"namespace": app.keys.namespace, "node": node_record(found, [t.id for t in tasks]),
                 "tasks": [task_record(t) for t in listing.apply(choice, tasks)],
                 "history": data.history(app, node=found.name)})


def jobs(request):
    app = inputs.scoped_app(request)
    choice = listing.choose(listing.JOBS, request.query_params)
    every = data.jobs(app)
    return JSON({"namespace": app.keys.namespace, "total": len(every),
                 "jobs": [job_record(j) for j in listing.apply(choice, every)]})


def job(request):
    app = inputs.scoped_app(request)
    limit = _limit(request.query_params.get("limit"))
    choice = listing.choose(listing.TASKS, request.query_params)
    compare = inputs.compare(request.query_params)
    view, tasks = data.job(app, inputs.job_id(request.path_params["job_id"]))
    shown = listing.window(choice, listing.apply(choice, tasks), limit)
    return JSON({"namespace": app.keys.namespace, "job": job_record(view, spec=True),
                 "tasks": [task_record(t) for t in shown], "pending": waits_record(data.job_waits(app, view, tasks)),
                 **rollouts_record(data.rollouts(app, view.id, compare)),
                 "history": data.history(app, job=view.id)})


def deployments(request):
    app = inputs.scoped_app(request)
    job_id = request.query_params.get("job")
    limit = _limit(request.query_params.get("limit", str(DEPLOYMENTS_LISTED)), DEPLOYMENTS_LISTED)
    return JSON({"namespace": app.keys.namespace,
                 "deployments": data.deployments(app, limit, inputs.job_id(job_id) if job_id else None)})


def task(request):
    app = inputs.scoped_app(request)
    view = data.task(app, inputs.task_id(request.path_params["task_id"]))
    return JSON({"namespace": app.keys.namespace, "task": task_record(view.task),
                 "explanation": {"message": view.message, "nodes_evaluated": view.nodes_evaluated,
                                 "reasons": view.reasons, "preemption": view.preemption or None},
                 "attempts": view.attempts, "places": places_record(view.places),
                 "output": view.output, "output_truncated": view.truncated})


def _limit(value: str | None, most: int = MAX_TASKS) -> int:
    if value is None:
        return most
    if not value.isdigit() or int(value) > most:
        raise inputs.BadInput(f"limit must be a whole number from 0 to {most}.")
    return int(value)


# ----------------------------------------------------------------------------- actions
async def set_availability(request):
    app = inputs.scoped_app(request)
    body = await _body(request)
    name = inputs.node_name(request.path_params["name"])
    availability = inputs.availability(body.get("availability"))
    result = await run_in_threadpool(data.set_availability, app, name, availability, _actor())
    moved = f" ({len(result['moved'])} task(s) moved elsewhere)" if availability == "drain" else ""
    if result.get("waiting"):
        moved += f"; the drain goes on, {result['waiting']}"
    return _done(request, body, result, f"node {name}: {result['before']} -> {availability}{moved}.")


async def scale(request):
    app = inputs.scoped_app(request)
    body = await _body(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    replicas = inputs.replicas(body.get("replicas"))
    result = await run_in_threadpool(data.scale, app, job_id, replicas, _actor())
    return _done(request, body, result,
                 f"job {job_id} scaled to {replicas}: {len(result['added'])} added, {len(result['stopped'])} stopped.")


async def stop(request):
    app = inputs.scoped_app(request)
    body = await _body(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    result = await run_in_threadpool(data.stop, app, job_id, _actor())
    return _done(request, body, result, f"job {job_id} stopped ({len(result['stopped'])} task(s)).")


async def deployment_action(request):
    app = inputs.scoped_app(request)
    body = await _body(request)
    deployment = inputs.deployment_id(request.path_params["deployment_id"])
    action = inputs.deployment_action(request.path_params["action"])
    record = await run_in_threadpool(data.act_on_deployment, app, deployment, action, _actor())
    said = {"promote": "promoted", "pause": "paused", "resume": "resumed", "fail": "failed"}[action]
    if record["state"] == "reverted":
        said += f"; version {record['revert_to']} comes back as version {record['reverted_as']}"
    return _done(request, body, record, f"deployment {deployment} {said}.")


async def revert(request):
    app = inputs.scoped_app(request)
    body = await _body(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    version = inputs.version(body.get("version"))
    result = await run_in_threadpool(data.revert, app, job_id, version, _actor())
    if result["changes"]["action"] == "none":
        message = f"job {job_id}: version {version} is the running spec; nothing changes."
    else:
        how = f"rolled out by deployment {result['deployment']}" if result["deployment"] else \
            "replacing every task at once"
        message = f"job {job_id}: version {version} submitted again as version {result['version']}, {how}."
    return _done(request, body, result, message)


def _actor() -> str | None:
    """Who an action is recorded as done by: the signed-in dashboard user, ``ui:<name>``
    (without sign-in, the dashboard's Redis user)."""
    user = signed_in()
    return f"ui:{user.name}" if user is not None else None


async def _body(request) -> dict:
    """The POST's fields: a form or a JSON object, at most MAX_BODY bytes."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise inputs.BadInput(f"the request body is larger than {MAX_BODY} bytes.", status=413)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            body = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError:
            raise inputs.BadInput("the request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise inputs.BadInput("the request body must be a JSON object.")
        return body
    if kind in ("application/x-www-form-urlencoded", ""):
        try:
            return dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=20))
        except (UnicodeDecodeError, ValueError):
            raise inputs.BadInput("the form could not be read.") from None
    raise inputs.BadInput("send a form (application/x-www-form-urlencoded) or JSON.", status=415)


def wants_html(request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _done(request, body: dict, result: dict, message: str):
    if wants_html(request):
        return RedirectResponse(inputs.local_path(body.get("next")), status_code=303)
    return JSON({**result, "message": message})

"""The HTML pages. Each reads what it shows through :mod:`data`, renders a template, and
names in ``data-live`` the JSON route its script refetches when events arrive (with the
list's search, filters and order, so that both show the same rows: :mod:`listing`)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import yaml

from scheduler.state.series import SAMPLE_EVERY_MS
from scheduler.tools.render import spec_for_people
from scheduler.tools.ui import data, inputs, listing

OVERVIEW_NODES = 200  # node cards on the overview; the nodes page has them all
NODES_SHOWN = 1000  # rows on the nodes page
TASKS_SHOWN = 1000  # rows on a job page (its newest tasks)
NODES_LISTED = 50  # rows of a pending task's node-by-node table (the nearest to fitting first)


def _render(request, app, template: str, page: str, live: str, live_params: dict | None = None, **values):
    ns = app.keys.namespace
    live_url = f"{live}?{urlencode({'ns': ns, **(live_params or {})})}"
    return request.app.state.pages.render(template, namespace=ns, namespaces=_namespaces(request, ns), page=page,
                                          live_url=live_url, **values)


def _namespaces(request, ns: str) -> list[str]:
    names = data.namespaces(request.app.state.sched)
    return names if ns in names else sorted([*names, ns])


def overview(request):
    app = inputs.scoped_app(request)
    return _render(request, app, "overview.html", "overview", "/api/overview", view=data.overview(app),
                   limit=OVERVIEW_NODES, series_every_ms=SAMPLE_EVERY_MS)


def nodes(request):
    app = inputs.scoped_app(request)
    choice = listing.choose(listing.NODES, request.query_params)
    every = data.nodes(app)
    return _render(request, app, "nodes.html", "nodes", "/api/nodes", live_params=choice.params(),
                   nodes=listing.apply(choice, every), total=len(every), choice=choice, limit=NODES_SHOWN)


def node(request):
    app = inputs.scoped_app(request)
    name = inputs.node_name(request.path_params["name"])
    choice = listing.choose(listing.TASKS, request.query_params)
    found, tasks = data.node(app, name)
    return _render(request, app, "node.html", "node", "/api/nodes/" + quote(name, safe=""),
                   live_params=choice.params(), node=found, tasks=listing.apply(choice, tasks), total=len(tasks),
                   choice=choice, history=data.history(app, node=name))


def jobs(request):
    app = inputs.scoped_app(request)
    choice = listing.choose(listing.JOBS, request.query_params)
    every = data.jobs(app)
    return _render(request, app, "jobs.html", "jobs", "/api/jobs", live_params=choice.params(),
                   jobs=listing.apply(choice, every), total=len(every), choice=choice)


def job(request):
    app = inputs.scoped_app(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    choice = listing.choose(listing.TASKS, request.query_params)
    compare = inputs.compare(request.query_params)
    view, tasks = data.job(app, job_id)
    chosen = listing.apply(choice, tasks)
    spec_text = yaml.safe_dump(spec_for_people(view.spec), sort_keys=False, default_flow_style=None).rstrip()
    return _render(request, app, "job.html", "job", "/api/jobs/" + quote(job_id, safe=""),
                   live_params={"limit": TASKS_SHOWN, **choice.params()}, job=view, tasks=chosen,
                   shown=listing.window(choice, chosen, TASKS_SHOWN), total=len(tasks), choice=choice,
                   waits=data.job_waits(app, view, tasks), spec_text=spec_text, limit=TASKS_SHOWN,
                   rollouts=data.rollouts(app, job_id, compare), timeline=data.timeline(app, view),
                   history=data.history(app, job=job_id))


def task(request):
    app = inputs.scoped_app(request)
    task_id = inputs.task_id(request.path_params["task_id"])
    view = data.task(app, task_id)
    return _render(request, app, "task.html", "task", "/api/tasks/" + quote(task_id, safe=""), view=view,
                   output_limit=data.OUTPUT_LIMIT, nodes_listed=NODES_LISTED)

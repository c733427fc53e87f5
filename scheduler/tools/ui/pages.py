"""The HTML pages. Each reads what it shows through :mod:`data`, renders a template, and
names in ``data-live`` the JSON route its script refetches when events arrive."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import yaml

from scheduler.tools.ui import data, inputs

OVERVIEW_NODES = 200  # node cards on the overview; the nodes page has them all
NODES_SHOWN = 1000  # rows on the nodes page
TASKS_SHOWN = 1000  # rows on a job page (its newest tasks)


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
                   limit=OVERVIEW_NODES)


def nodes(request):
    app = inputs.scoped_app(request)
    return _render(request, app, "nodes.html", "nodes", "/api/nodes", nodes=data.nodes(app), limit=NODES_SHOWN)


def node(request):
    app = inputs.scoped_app(request)
    name = inputs.node_name(request.path_params["name"])
    found, tasks = data.node(app, name)
    return _render(request, app, "node.html", "node", "/api/nodes/" + quote(name, safe=""), node=found, tasks=tasks)


def jobs(request):
    app = inputs.scoped_app(request)
    return _render(request, app, "jobs.html", "jobs", "/api/jobs", jobs=data.jobs(app))


def job(request):
    app = inputs.scoped_app(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    view, tasks = data.job(app, job_id)
    spec_text = yaml.safe_dump(view.spec, sort_keys=False, default_flow_style=None).rstrip()
    return _render(request, app, "job.html", "job", "/api/jobs/" + quote(job_id, safe=""),
                   live_params={"limit": TASKS_SHOWN}, job=view, tasks=tasks,
                   spec_text=spec_text, limit=TASKS_SHOWN)


def task(request):
    app = inputs.scoped_app(request)
    task_id = inputs.task_id(request.path_params["task_id"])
    view = data.task(app, task_id)
    return _render(request, app, "task.html", "task", "/api/tasks/" + quote(task_id, safe=""), view=view,
                   output_limit=data.OUTPUT_LIMIT)

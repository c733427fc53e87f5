"""The dashboard as an ASGI application: the route table, the error pages, the middleware.

``create_app(App)`` serves the namespace of the App by default and any other namespace
of the same Redis with ``?ns=NAME``. Pages, JSON routes and the event stream are in
:mod:`pages`, :mod:`api` and :mod:`events` (fed by :mod:`live`); every read and write in
:mod:`data`, except the activity page's reads of the event stream (:mod:`activity`).
"""

from __future__ import annotations

import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from scheduler.model.errors import NotFound, RedisUnavailable, SpecError
from scheduler.state.app import App
from scheduler.tools.ui import activity, api, capacity, charts, data, events, live, metrics, pages
from scheduler.tools.ui.auth import Auth, AuthSettings, Sessions, signed_in, signin, signout
from scheduler.tools.ui.inputs import BadInput
from scheduler.tools.ui.security import Security
from scheduler.tools.ui.templates import Pages

ROUTES = [
    Route("/", pages.overview, name="overview"),
    Route("/nodes", pages.nodes, name="nodes"),
    Route("/nodes/{name}", pages.node, name="node"),
    Route("/jobs", pages.jobs, name="jobs"),
    # Ids may hold a "/" (a launch of a periodic or parameterized job: nightly/periodic-1700000000).
    Route("/jobs/{job_id:job}", pages.job, name="job"),
    Route("/tasks/{task_id:task}", pages.task, name="task"),
    Route("/activity", activity.page, name="activity"),
    Route("/capacity", capacity.page, name="capacity"),
    Route("/api/namespaces", api.namespaces),
    Route("/api/overview", api.overview),
    Route("/api/nodes", api.nodes),
    Route("/api/nodes/{name}", api.node),
    Route("/api/nodes/{name}/availability", api.set_availability, methods=["POST"]),
    Route("/api/jobs", api.jobs),
    Route("/api/jobs/{job_id:job}", api.job),
    Route("/api/jobs/{job_id:job}/scale", api.scale, methods=["POST"]),
    Route("/api/jobs/{job_id:job}/stop", api.stop, methods=["POST"]),
    Route("/api/jobs/{job_id:job}/revert", api.revert, methods=["POST"]),
    Route("/api/deployments", api.deployments),
    Route("/api/deployments/{deployment_id}/{action}", api.deployment_action, methods=["POST"]),
    Route("/api/tasks/{task_id:task}", api.task),
    Route("/api/events", events.stream),
    Route("/api/activity", activity.api_rows),
    Route("/api/capacity", capacity.api),
    Route("/api/series", charts.api_series),
    Route("/metrics", metrics.endpoint),
    Mount("/static", StaticFiles(packages=[("scheduler.tools.ui", "static")]), name="static"),
]


def create_app(app: App, allowed_hosts: list[str] | None = None, auth: AuthSettings | None = None) -> Starlette:
    """The dashboard for ``app``'s Redis. ``allowed_hosts`` limits the Host header (give
    the loopback names when serving on 127.0.0.1, against DNS rebinding). ``auth``:
    sign-in and the metrics token (:mod:`auth`); None serves every route to anyone."""
    middleware = [Middleware(Security)]
    if allowed_hosts:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    routes, sessions = ROUTES, Sessions(app)
    if auth is not None:
        middleware.append(Middleware(Auth, settings=auth, sessions=sessions))
        if auth.sign_in:
            routes = [Route("/signin", signin, methods=["GET", "POST"]), Route("/signout", signout, methods=["POST"]),
                      *ROUTES]
    handlers = {BadInput: _error, NotFound: _error, SpecError: _error, RedisUnavailable: _error,
                redis.RedisError: _error, 404: _error, 405: _error}
    web = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    web.state.sched = app
    web.state.sessions = sessions
    web.state.pages = Pages()
    web.state.pages.env.globals["signed_in"] = signed_in  # base.html: who is signed in, the sign-out form
    web.state.metrics = metrics.registry(app)  # the cluster, read from Redis on each scrape
    web.state.streams = set()  # the open event streams' cancel scopes (events.end_streams)
    web.state.live = live.Hub()  # one reader of each namespace's events for every open page
    return web


def _status(exc) -> tuple[int, str]:
    """An error's HTTP status and its one sentence."""
    if isinstance(exc, BadInput):
        return exc.status, str(exc)
    if isinstance(exc, NotFound):
        return 404, str(exc)
    if isinstance(exc, SpecError):  # refused by the scheduler: a stopped or global job, a busy node...
        return 409, str(exc)
    if isinstance(exc, (RedisUnavailable, redis.RedisError)):
        return 503, f"Redis is not available: {str(exc).rstrip('.')}."
    status = getattr(exc, "status_code", 500)
    return status, "there is no such page." if status == 404 else f"{getattr(exc, 'detail', 'error')}."


TITLES = {400: "Bad request", 404: "Not found", 405: "Method not allowed", 409: "Refused", 413: "Too large",
          415: "Unsupported body", 503: "Redis unavailable"}


async def _error(request, exc):
    status, message = _status(exc)
    if request.url.path.startswith("/api/") and not api.wants_html(request):
        return api.JSON({"error": message}, status_code=status)
    base = request.app.state.sched
    names = [base.keys.namespace]
    if status != 503:
        try:
            names = data.namespaces(base)
        except redis.RedisError:
            pass
    return request.app.state.pages.render("error.html", namespace=base.keys.namespace, namespaces=names,
                                          status=status, page="error", live_url="", title=TITLES.get(status, "Error"),
                                          message=message)

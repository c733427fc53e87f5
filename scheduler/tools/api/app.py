"""The API as an ASGI application: the route table (one line per noun), the OpenAPI
document made from it, and the checks every request passes.

``create_api(App, auth=True)`` serves every namespace of the App's Redis (``?namespace=``,
by default the token's own); ``auth=False`` (``--no-auth``, on loopback only) takes
requests without a token. :class:`WithDashboard` puts it beside the dashboard on one
server (``sched ui``): paths under ``/v1/`` are the API's, the rest the dashboard's.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import orjson
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import Response
from starlette.routing import Match, Route as StarletteRoute

from scheduler.state.app import App
from scheduler.state.loop_redis import LoopRedis
from scheduler.tools.api import (budgets, capacity, config, deployments, events, gc, jobs, layout, meta, nodes,
                                 openapi, pools, problems, queues, quotas, rebalance, snapshots, tasks, tenants)
from scheduler.tools.api.access import Guard
from scheduler.tools.api.route import endpoint
from scheduler.tools.ui import inputs
from scheduler.tools.ui.security import SAFE_METHODS, same_origin

NOUNS = (meta, nodes, jobs, tasks, deployments, budgets, queues, quotas, tenants, events, config, gc, layout,
         snapshots, rebalance, pools, capacity)
ROUTES = [route for noun in NOUNS for route in noun.ROUTES]
DOCUMENT = orjson.dumps(openapi.document(ROUTES))
# Requests doing their work at once in one process (more wait their turn), and so its
# Redis connections besides the event streams'. More threads only contend for the one
# interpreter lock: 32 cost a page of jobs a third more CPU than 8 (benchmarks-history.md).
REQUEST_THREADS = 8
OPENAPI_PATH = "/v1/openapi.json"


def openapi_json(request) -> Response:
    return Response(DOCUMENT, media_type="application/json")


def create_api(app: App, auth: bool = True, allowed_hosts: list[str] | None = None,
               streams: set | None = None) -> Starlette:
    """The API for ``app``'s Redis. ``allowed_hosts`` limits the Host header (the
    loopback names when serving on loopback, against DNS rebinding); ``streams``: the set
    of open event streams' cancel scopes, shared with the dashboard on one server."""
    middleware = [Middleware(CrossSite)]
    if allowed_hosts:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    routes = [StarletteRoute(OPENAPI_PATH, openapi_json, methods=["GET"])]
    routes += [StarletteRoute(inputs.with_launch_ids(route.path), endpoint(route), methods=[route.method])
               for route in ROUTES]
    web = Starlette(routes=routes, middleware=middleware, exception_handlers={404: _not_found, 405: _not_allowed})
    web.state.sched = app
    web.state.guard = Guard(app.client, auth)
    web.state.streams = set() if streams is None else streams
    web.state.threads = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="sched-api")
    # Reads served on the event loop (route.py); SCHED_API_LOOP_READS=0 serves every request on a thread.
    on_loop = os.environ.get("SCHED_API_LOOP_READS", "1") != "0"
    web.state.loop_redis = LoopRedis.for_client(app.client) if on_loop else None
    return web


async def _not_found(request, exc):
    return problems.response(problems.Problem(404, f"there is no route {request.url.path[:80]}; "
                                                   f"GET {OPENAPI_PATH} lists them."), request.url.path)


async def _not_allowed(request, exc):
    """405 with ``Allow``: the methods of every route of the path (RFC 9110)."""
    routes = request.app.router.routes
    first = next(route for route in routes if route.matches({**request.scope, "method": "GET"})[0] != Match.NONE)
    methods = {method for route in routes if route.path == first.path for method in route.methods or ()}
    allow = ", ".join(sorted(methods))
    return problems.response(problems.Problem(405, f"{request.method} is not a method of {request.url.path[:80]}; "
                                                   f"it takes {allow}.", headers={"allow": allow}), request.url.path)


class CrossSite:
    """Refuse a request that changes something when a browser sends it from another
    site (its ``Origin`` names another host): programs send no ``Origin``, and a token is
    no cookie a browser would add by itself, but a server without tokens (``--no-auth``)
    must not be driven by any page its user visits."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = Headers(scope=scope)
            if "origin" in headers and not same_origin(headers):
                problem = problems.Problem(403, "cross-origin request refused: the Origin header names another "
                                                "host.")
                return await problems.response(problem, scope["path"])(scope, receive, send)
        await self.app(scope, receive, send)


class WithDashboard:
    """One server for the API and the dashboard: ``/v1/`` goes to ``api``, the rest (and
    the lifespan) to ``dashboard``. Its ``state`` is the dashboard's (whose event streams
    the API's share, so that a stopping server ends them all)."""

    def __init__(self, api: Starlette, dashboard: Starlette):
        self.api, self.dashboard = api, dashboard
        self.state = dashboard.state

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and (scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
            return await self.api(scope, receive, send)
        await self.dashboard(scope, receive, send)

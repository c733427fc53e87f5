"""The capacity page (``/capacity``): the last capacity answer recorded (``sched capacity
--record``, ``--exec``, ``--webhook`` or ``--watch``, ``POST /v1/capacity``): nodes to add
per pool, the tasks no pool takes, nodes that can go and what they save, and the
decision; and its JSON (``/api/capacity``), which the page refetches on capacity events."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.responses import JSONResponse

from scheduler.tools.ui import inputs
from scheduler.tools.ui.pages import _namespaces


def view(app) -> dict:
    """The last answer (None: none yet), when it was recorded, and the catalogue."""
    record = app.store.capacity_record()
    return {"namespace": app.keys.namespace, "answer": record.last, "recorded_at": record.at_ms or None,
            "up_at": record.up_at_ms or None, "down_at": record.down_at_ms or None,
            "pools": [pool.to_dict() for pool in app.store.pools()]}


def page(request):
    app = inputs.scoped_app(request)
    ns = app.keys.namespace
    return request.app.state.pages.render("capacity.html", namespace=ns, namespaces=_namespaces(request, ns),
                                          page="capacity", live_url=f"/api/capacity?{urlencode({'ns': ns})}",
                                          view=view(app))


def api(request):
    return JSONResponse(view(inputs.scoped_app(request)))

"""``/v1/token`` (who the request's token is) and ``/v1/openapi.json`` (this API's
OpenAPI document, which needs no token)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import Call, get


def token_self(call: Call):
    access = call.access
    return {"name": access.name, "namespace": access.namespace, "role": access.role}
    yield  # no read: a generator, served on the event loop for a kept token (route.py)


ROUTES = [
    get("/v1/token", token_self, "The token this request carries: its name, namespace and role", s.TOKEN_SELF,
        needs_namespace=False),
]

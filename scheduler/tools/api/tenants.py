"""``/v1/tenants``: tenants' weights and dominant shares of the namespace's nodes
(``sched tenant``)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import unprocessable
from scheduler.tools.api.route import OPERATOR, Call, delete, get, put


def list_tenants(call: Call):
    return call.sched.tenants()


def set_tenant(call: Call):
    with unprocessable():
        return call.sched.set_tenant(call.path["tenant"], call.body["weight"])


def remove_tenant(call: Call):
    return {"name": call.path["tenant"], "removed": call.sched.remove_tenant(call.path["tenant"])}


ROUTES = [
    get("/v1/tenants", list_tenants, "Each tenant's weight, usage and dominant share", s.array(s.TENANT)),
    put("/v1/tenants/{tenant}", set_tenant, "Set a tenant's weight", s.TENANT, role=OPERATOR,
        body=s.obj({"weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1_000_000}},
                   additionalProperties=False), refusals=(422,)),
    delete("/v1/tenants/{tenant}", remove_tenant, "Remove a tenant's weight", s.TENANT_REMOVED, role=OPERATOR),
]

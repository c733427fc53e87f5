"""``/v1/quota`` and ``/v1/quotas``: a namespace's quota, and every namespace's
(``sched quota``). A quota limits its namespace, so setting or removing one, and listing
every namespace's, takes a token of every namespace."""

from __future__ import annotations

from scheduler.model import job_schema
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import OPERATOR, Call, get, put, delete

QUOTA_LIMITS = s.named("QuotaLimits", {
    "type": "object", "additionalProperties": False,
    "description": "Limits to set; those not given are left as they are.",
    "properties": {"cpu": {"anyOf": [*job_schema.CPU["anyOf"], {"type": "null"}], "description": "cores: 100 or 500m"},
                   "memory": {"anyOf": [*job_schema.MEMORY["anyOf"], {"type": "null"}],
                              "description": "200GiB, or bytes"},
                   "tasks": {"type": ["integer", "null"], "minimum": 0, "maximum": 1_000_000_000,
                             "description": "live tasks"},
                   "resources": job_schema.nullable(job_schema.OTHER_RESOURCES)}})


def show_quota(call: Call):
    return call.sched.quota()


def set_quota(call: Call):
    body = call.body
    if isinstance(body.get("resources"), dict) and {"cpu", "memory"} & set(body["resources"]):
        raise Problem(422, "give cpu and memory as their own fields, not in resources.")
    with unprocessable():
        return call.sched.set_quota(cpu=body.get("cpu"), memory=body.get("memory"), tasks=body.get("tasks"),
                                     resources=body.get("resources"))


def remove_quota(call: Call):
    return {"namespace": call.sched.namespace, "removed": call.sched.remove_quota()}


def list_quotas(call: Call):
    return call.sched.quotas()


def quota_history(call: Call):
    return call.sched.audit_trail()


ROUTES = [
    get("/v1/quota", show_quota, "The namespace's quota and usage", s.QUOTA),
    put("/v1/quota", set_quota, "Set the namespace's quota", s.QUOTA, role=OPERATOR, every_namespace=True,
        body=QUOTA_LIMITS, refusals=(422,)),
    delete("/v1/quota", remove_quota, "Remove the namespace's quota", s.QUOTA_REMOVED, role=OPERATOR,
           every_namespace=True),
    get("/v1/quota/history", quota_history, "Who changed the namespace's quota and tenant weights",
        s.array(s.HISTORY_ENTRY)),
    get("/v1/quotas", list_quotas, "Every namespace with a quota, with its usage", s.array(s.QUOTA),
        every_namespace=True, needs_namespace=False),
]

"""``/v1/pools``: the catalogue of node shapes ``sched capacity`` scales by (``sched pool``)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import unprocessable
from scheduler.tools.api.route import OPERATOR, Call, Problem, delete, get, put

POOL_FIELDS = ("cpu", "memory", "gpu", "resources", "labels", "engine_labels", "taints", "os", "arch", "role",
               "plugins", "cost", "min_nodes", "max_nodes", "priority")


def list_pools(call: Call):
    return call.sched.pools()


def add_pool(call: Call):
    body = call.body
    with unprocessable():
        record = call.sched.add_pool(call.path["pool"], **{k: v for k, v in body.items() if k in POOL_FIELDS})
    return record


def remove_pool(call: Call):
    if not call.sched.remove_pool(call.path["pool"]):
        raise Problem(404, f"pool {call.path['pool']!r} does not exist.")
    return {"name": call.path["pool"], "removed": True}


POOL_BODY = s.obj({"cpu": {"type": ["number", "string"]}, "memory": {"type": ["integer", "string"]}}, {
    "gpu": {"type": ["integer", "string"]}, "resources": s.ANY_OBJECT, "labels": s.ANY_OBJECT,
    "engine_labels": s.ANY_OBJECT, "taints": s.array(s.STRING), "os": s.STRING, "arch": s.STRING, "role": s.STRING,
    "plugins": s.array(s.STRING), "cost": s.NUMBER, "min_nodes": s.INTEGER, "max_nodes": s.nullable(s.INTEGER),
    "priority": s.INTEGER}, additionalProperties=False)

ROUTES = [
    get("/v1/pools", list_pools, "Every pool, with how many nodes belong to it", s.array(s.POOL)),
    put("/v1/pools/{pool}", add_pool, "Add or replace a pool", s.POOL, role=OPERATOR, body=POOL_BODY,
        refusals=(422,)),
    delete("/v1/pools/{pool}", remove_pool, "Remove a pool (its nodes stay)", s.POOL_REMOVED, role=OPERATOR,
           refusals=(404,)),
]

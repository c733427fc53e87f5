"""``/v1/capacity``: which pools and how many nodes the pending tasks need, which nodes
could go (``sched capacity``), and the last answer recorded."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import unprocessable
from scheduler.tools.api.route import OPERATOR, Call, Param, get, post


def answer(call: Call):
    query = call.query
    with unprocessable():
        return call.sched.capacity(expander=query.get("expander"), threshold=query.get("threshold", 0.5),
                                   max_remove=query.get("max_remove"), record=False)


def record(call: Call):
    query = call.query
    with unprocessable():
        return call.sched.capacity(expander=query.get("expander"), threshold=query.get("threshold", 0.5),
                                   max_remove=query.get("max_remove"), record=True)


def last(call: Call):
    return {"answer": call.sched.last_capacity()}


QUERY = (Param("expander", {"type": "string"}, "least-waste (default), price, priority, most-tasks, or a chain "
                                                "such as priority,least-waste"),
         Param("threshold", {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
               "scale-down: nodes below this utilisation are considered"),
         Param("max_remove", {"type": "integer", "minimum": 0, "maximum": 100_000}, "scale-down: at most this many"))

ROUTES = [
    get("/v1/capacity", answer, "The capacity answer now: nodes to add per pool, nodes that can go, savings",
        s.CAPACITY, query=QUERY, refusals=(422,)),
    post("/v1/capacity", record, "The capacity answer now, recorded for the dashboard with its capacity event "
         "(no hook is called)", s.CAPACITY, query=QUERY, role=OPERATOR, refusals=(422,)),
    get("/v1/capacity/last", last, "The last capacity answer recorded (null: none yet)",
        s.obj({"answer": s.nullable(s.CAPACITY)})),
]

"""``/v1/nodes``: register, list, show, pause, drain (as disruption budgets allow),
activate and remove nodes, and their history (``sched node``)."""

from __future__ import annotations

import weakref

import orjson

from scheduler.client.drains import DEFAULT_DEADLINE
from scheduler.client.nodes import node_record
from scheduler.model import job_schema, make_node
from scheduler.model.errors import SpecError
from scheduler.model.taints import EFFECTS, parse_taint
from scheduler.state.read_steps import BLOCKING_CALLS
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import unprocessable
from scheduler.tools.api.route import BLOCKING, OPERATOR, Answer, Call, delete, get, post, put

NODE_SPEC = s.named("NodeSpec", job_schema.NODE_SPEC)


def node_from_body(name: str, body: dict):
    """The node a ``PUT /v1/nodes/{name}`` body describes (a SpecError names what is
    wrong)."""
    fields = job_schema.NODE_SPEC["properties"]
    unknown = sorted(set(body) - set(fields), key=str)
    if unknown:
        raise SpecError(f"node {name}: unknown field {unknown[0]!r}; the fields are {', '.join(fields)}.")
    if not isinstance(body.get("resources") or {}, dict):
        raise SpecError(f"node {name}: resources must be a mapping of resource names to amounts, like {{gpu: 1}}.")
    extra = dict(body.get("resources") or {})
    twice = sorted({"cpu", "memory", *(("gpu",) if body.get("gpu") is not None else ())} & set(extra))
    if twice:
        raise SpecError(f"node {name}: give {twice[0]} as its own field, not in resources.")
    if body.get("gpu") is not None:
        extra["gpu"] = body["gpu"]
    return make_node(name, cpu=body.get("cpu"), memory=body.get("memory"), resources=extra,
                     labels=body.get("labels"), engine_labels=body.get("engine_labels"), os=body.get("os", "linux"),
                     arch=body.get("arch", "amd64"), role=body.get("role", "worker"),
                     plugins=body.get("plugins") or [], taints=body.get("taints") or [])


DRAIN_OPTIONS = s.obj({}, {
    "deadline": {"type": ["string", "number", "null"], "default": DEFAULT_DEADLINE,
                 "description": "after it (30m, 1h, or seconds; null: none), what is left is stopped whatever the "
                                "budgets"},
    "force": {**s.BOOLEAN, "default": False, "description": "stop every task at once, whatever the budgets"},
    "detach": {**s.BOOLEAN, "default": True, "description": "answer at once (false: once the drain ends)"},
    "wait": {"type": "number", "minimum": 0, "maximum": 300, "default": 30,
             "description": "with detach false: seconds to wait at most"}}, additionalProperties=False)


_LISTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # namespace's App -> (nodes:seq, nodes, JSON)


def list_nodes(call: Call):
    """Every node, from a copy kept per namespace with its JSON, sent again while no node
    has changed since (their change sequence, as the workers' copies read it): one small
    round trip while nothing changes. A drain in progress is read as it is, each time."""
    seq, nodes, body = _LISTS.get(call.sched.app, (None, None, None))
    now, newest, fresh, draining = yield from call.sched.store.nodes_since_steps(seq)
    if fresh is not None:
        nodes, body = fresh, orjson.Fragment(orjson.dumps([node_record(n, n.tasks) for n in fresh]))
        _LISTS[call.sched.app] = (now, nodes, body)
    if draining:
        yield BLOCKING_CALLS
        drains = {d["node"]: d for d in call.sched.drains()}
        body = [node_record(n, n.tasks, drains.get(n.name)) for n in nodes]
    return Answer(200, body, newest_event=newest)


def show_node(call: Call):
    found = call.sched.node(call.path["name"])
    last = call.sched.drain_status(found.name)
    return node_record(found, found.tasks, last if last["state"] else None)


def register_node(call: Call):
    name = call.path["name"]
    with unprocessable():
        node = node_from_body(name, call.body)
    created = call.sched.put_node(node)
    found = call.sched.node(name)
    return Answer(201 if created else 200, {"created": created, "node": node_record(found, found.tasks)})


def taint_node(call: Call):
    with unprocessable():
        taint = parse_taint(call.body["taint"])
    return call.sched.taint(call.path["name"], taint)


def untaint_node(call: Call):
    with unprocessable():
        return call.sched.untaint(call.path["name"], call.body["key"], call.body.get("effect", ""))


def drain_node(call: Call):
    body = call.body or {}
    with unprocessable():
        report = call.sched.drain_report(call.path["name"], deadline=body.get("deadline", DEFAULT_DEADLINE),
                                         force=bool(body.get("force", False)))
    if body.get("detach", True) or report["state"] != "draining":
        return report
    last = report
    for last in call.sched.follow_drain(call.path["name"], timeout=float(body.get("wait", 30))):
        pass
    return {**report, **last, "stopped": report["stopped"], "replacements": report["replacements"]}


def drain_status(call: Call):
    return call.sched.drain_status(call.path["name"])


def pause_node(call: Call):
    return {"node": call.path["name"], "before": call.sched.pause(call.path["name"]), "availability": "pause"}


def activate_node(call: Call):
    return {"node": call.path["name"], "before": call.sched.activate(call.path["name"]), "availability": "active"}


def remove_node(call: Call):
    call.sched.remove_node(call.path["name"])
    return {"name": call.path["name"], "removed": True}


def node_history(call: Call):
    call.sched.node(call.path["name"])  # 404 for a node that does not exist
    return call.sched.audit_trail(node=call.path["name"])


ROUTES = [
    get("/v1/nodes", list_nodes, "List nodes", s.array(s.NODE), blocking=True, query=BLOCKING),
    get("/v1/nodes/{name}", show_node, "Show a node", s.NODE, refusals=(404,)),
    put("/v1/nodes/{name}", register_node, "Register a node, or update it", s.NODE_REGISTERED, role=OPERATOR,
        body=NODE_SPEC, status=(200, 201), refusals=(422,),
        description="A node registered here has no agent: it stays ready until changed (`sched node add`). "
                    "201 when it is new, 200 when it was updated (what runs on it is kept)."),
    post("/v1/nodes/{name}/taint", taint_node, "Taint a node: only tasks that tolerate it go there", s.TAINT_CHANGE,
         role=OPERATOR, body=s.obj({"taint": job_schema.TAINT}, additionalProperties=False), refusals=(404, 422),
         description="`sched node taint`: a taint of the same key and effect is replaced."),
    post("/v1/nodes/{name}/untaint", untaint_node, "Remove a node's taints of a key", s.TAINT_CHANGE, role=OPERATOR,
         body=s.obj({"key": s.STRING}, {"effect": {"enum": ["", *EFFECTS]}}, additionalProperties=False),
         refusals=(404, 422),
         description="`sched node untaint`: of one effect only, when it is given."),
    post("/v1/nodes/{name}/drain", drain_node, "Drain a node: move its tasks elsewhere as their budgets allow",
         s.DRAIN_REPORT, role=OPERATOR, refusals=(404, 422), body_required=False, body=DRAIN_OPTIONS, lasting=True,
         description="`sched node drain`: the node takes no new task; tasks of jobs without a disruption_budget "
                     "are stopped at once and replaced elsewhere, the others as their budgets allow, moved by the "
                     "workers (state `draining` and `message` say what it waits for; GET the drain to follow "
                     "it). `detach: false` answers once the drain ends, or after `wait` seconds."),
    get("/v1/nodes/{name}/drain", drain_status, "A node's drain: in progress, or how the last one ended",
        s.DRAIN, refusals=(404,)),
    post("/v1/nodes/{name}/pause", pause_node, "Pause a node: no new tasks there", s.AVAILABILITY_CHANGE,
         role=OPERATOR, refusals=(404,)),
    post("/v1/nodes/{name}/activate", activate_node, "Activate a node again", s.AVAILABILITY_CHANGE,
         role=OPERATOR, refusals=(404,)),
    delete("/v1/nodes/{name}", remove_node, "Remove a node that runs no tasks", s.NODE_REMOVED, role=OPERATOR,
           refusals=(404, 409)),
    get("/v1/nodes/{name}/history", node_history, "Who paused, drained or activated a node",
        s.array(s.HISTORY_ENTRY), refusals=(404,)),
]

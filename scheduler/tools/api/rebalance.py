"""``/v1/rebalance``: plans of moves that put running service tasks where they should be
now, applied make before break, and the moves (``sched rebalance``)."""

from __future__ import annotations

from scheduler.control.rebalance import MAX_MOVES, check_request
from scheduler.engine.rebalance import STRATEGIES
from scheduler.model.moves import MOVE_STATES, StalePlan
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import OPERATOR, Call, Param, get, post

SCORE = s.obj({"name": s.STRING, "before": s.NUMBER, "after": s.NUMBER, "gain": s.NUMBER})
PLANNED_MOVE = s.named("PlannedMove", s.obj(
    {"task": s.STRING, "job": s.STRING, "from": s.STRING, "to": s.STRING, "strategy": s.STRING, "score": SCORE,
     "reason": s.STRING},
    description="One move of a plan: the task, where from and to, the strategy that found it, the score it "
                "improves (before, after, gain) and why, in one sentence."))
PLAN = s.named("RebalancePlan", s.obj(
    {"strategy": s.STRING, "moves": s.array(PLANNED_MOVE),
     "jobs": {"type": "object", "description": "per job moved: moves, skew_before, skew_after, budget (null: none)"},
     "read": s.obj({"epoch": s.STRING, "nodes": s.ANY_OBJECT, "jobs": s.ANY_OBJECT},
                   description="what the plan read, which applying it checks")},
    {"planned_ms": s.NUMBER,
     "held": {"type": "object", "additionalProperties": s.INTEGER,
              "description": "live service tasks that may not move now, by why"},
     "applied": s.obj({"plan": s.nullable(s.INTEGER), "moves": s.array(s.STRING)},
                      description="the plan's id and its moves' ids (only when applied)")},
    description="A rebalance plan (`sched rebalance --dry-run --json`), and, applied, its moves' ids."))
MOVE = s.named("Move", s.obj(
    {"id": s.STRING, "plan": s.INTEGER, "task": s.STRING, "job": s.STRING, "from": s.STRING, "to": s.STRING,
     "strategy": s.STRING, "state": {"type": "string", "enum": list(MOVE_STATES)}, "new_task": s.STRING,
     "message": s.STRING},
    {"score": s.ANY_OBJECT, "reason": s.STRING, "created": s.MS, "updated": s.MS, "started": s.MS,
     "deadline": s.MS, "ended": s.MS},
    description="A move in progress or ended (`sched rebalance ls --json`)."))
REQUEST = s.named("RebalanceRequest", {
    "type": "object", "additionalProperties": False,
    "description": "What to plan (every field optional: spread, every job, up to 1000 moves), or a plan to apply.",
    "properties": {
        "strategy": {"type": "string", "enum": list(STRATEGIES), "description": "spread (the default) or pack, or "
                     "one of kube's descheduler strategies alone"},
        "max_moves": {"type": "integer", "minimum": 1, "maximum": MAX_MOVES, "description": "at most this many moves"},
        "job": {"type": "string", "description": "move only this job's tasks"},
        "dry_run": {"type": "boolean", "description": "plan only (as POST /v1/rebalance/plan)"},
        "plan": {"type": "object", "description": "a plan made earlier (POST /v1/rebalance/plan): applied whole, "
                 "or refused with 409 if the cluster changed since"}}})


def _asked(body: dict) -> tuple[str, int | None, str | None]:
    strategy, max_moves, job = body.get("strategy", "spread"), body.get("max_moves"), body.get("job")
    with unprocessable():
        check_request(strategy, max_moves)
    return strategy, max_moves, job


def plan_rebalance(call: Call):
    strategy, max_moves, job = _asked(call.body or {})
    return call.sched.rebalance(strategy, max_moves, job, dry_run=True)


def rebalance(call: Call):
    body = call.body or {}
    try:
        if "plan" in body:
            if set(body) - {"plan"}:
                raise Problem(422, "give a plan alone, or what to plan (strategy, max_moves, job), not both.")
            with unprocessable():
                return {**body["plan"], "applied": call.sched.apply_rebalance(body["plan"])}
        strategy, max_moves, job = _asked(body)
        return call.sched.rebalance(strategy, max_moves, job, dry_run=bool(body.get("dry_run")))
    except StalePlan as exc:
        raise Problem(409, str(exc)) from None


def list_moves(call: Call):
    return call.sched.moves(call.query["limit"], active=not call.query["all"])


def show_move(call: Call):
    return call.sched.move(call.path["move_id"])


ROUTES = [
    post("/v1/rebalance/plan", plan_rebalance, "Plan a rebalance: the moves, changing nothing", PLAN,
         body=REQUEST, body_required=False, refusals=(404, 409, 422),
         description="`sched rebalance --dry-run --json`: each move with the score it improves and why, each moved "
                     "job's skew before and after and its disruption budget, and what the plan read."),
    post("/v1/rebalance", rebalance, "Rebalance: plan and apply the moves, or apply a plan made earlier", PLAN,
         role=OPERATOR, body=REQUEST, body_required=False, refusals=(404, 409, 422),
         description="`sched rebalance --json`: the moves are recorded all or none (409 when the cluster changed "
                     "since the plan read it) and carried out by the workers, make before break."),
    get("/v1/rebalance/moves", list_moves, "List moves, oldest first", s.array(MOVE),
        query=(Param("all", {"type": "boolean", "default": False}, "those that ended lately too"),
               Param("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                     "at most this many"))),
    get("/v1/rebalance/moves/{move_id}", show_move, "Show a move", MOVE, refusals=(404,)),
]

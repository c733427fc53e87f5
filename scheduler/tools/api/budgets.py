"""``/v1/budgets``: jobs' disruption budgets as last counted, and the eviction of one task
through its job's budget (kube's eviction API: 429 when the budget allows none now)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem
from scheduler.tools.api.route import OPERATOR, Call, get, post


def list_budgets(call: Call):
    return call.sched.budgets()


def job_budget(call: Call):
    record = call.sched.budget(call.path["job_id"])
    if record is None:
        call.sched.job(call.path["job_id"])  # 404 for a job that does not exist
        raise Problem(404, f"job {call.path['job_id']} has no disruption_budget.")
    return record


def evict_task(call: Call):
    body = call.body or {}
    done = call.sched.evict(call.path["task_id"], body.get("reason") or "evicted through the API")
    if not done["evicted"] and done["verdict"] in ("gone", "elsewhere"):
        raise Problem(409, f"task {done['task']} is not live on a node: there is nothing to evict.")
    if not done["evicted"]:
        raise Problem(429, f"task {done['task']} was not evicted: waiting on {done['waiting']}.",
                      {"Retry-After": "1"})
    return done


ROUTES = [
    get("/v1/budgets", list_budgets, "Every job's disruption budget", s.array(s.BUDGET),
        description="The jobs with a disruption_budget, as last counted by the workers (about once a second), "
                    "less the disruptions since (`sched budget ls`)."),
    get("/v1/jobs/{job_id}/budget", job_budget, "A job's disruption budget", s.BUDGET, refusals=(404,),
        description="`sched budget show JOB`: expected, healthy and desired healthy tasks, the disruptions "
                    "allowed now, and those counted since the last count."),
    post("/v1/tasks/{task_id}/evict", evict_task, "Evict a task as its job's disruption budget allows",
         s.EVICTION, role=OPERATOR, refusals=(404, 409, 429),
         body_required=False,
         body=s.obj({}, {"reason": {**s.STRING, "description": "said in the task's end and the event"}},
                    additionalProperties=False),
         description="kube's eviction API: the task stops and a replacement is queued, if its job's budget "
                     "allows one more disruption now (always, for a job without one); else 429, and nothing "
                     "changes."),
]

"""``/v1/tasks``: list tasks (by job, state, node), show one, explain why it is where it
is, and what it printed (``sched task``)."""

from __future__ import annotations

from scheduler.client.tasks import task_record
from scheduler.model import TASK_STATES
from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import BLOCKING, JOB_ID, NODE_NAME, Call, Param, get, indexed


def list_tasks(call: Call):
    q = call.query
    return indexed(call, lambda: [task_record(t) for t in call.sched.tasks(job=q["job"], state=q["state"],
                                                                          node=q["node"])])


def show_task(call: Call):
    return task_record(call.sched.task(call.path["task_id"]))


def explain_task(call: Call):
    return call.sched.explain(call.path["task_id"])


def task_logs(call: Call):
    return call.sched.logs(call.path["task_id"])


ROUTES = [
    get("/v1/tasks", list_tasks, "List tasks", s.array(s.TASK), refusals=(404,),
        query=(Param("job", JOB_ID, "only this job's tasks"),
               Param("state", {"type": "string", "enum": list(TASK_STATES)}, "only tasks in this state"),
               Param("node", NODE_NAME, "only tasks on this node"), *BLOCKING), blocking=True),
    get("/v1/tasks/{task_id}", show_task, "Show a task", s.TASK, refusals=(404,)),
    get("/v1/tasks/{task_id}/explain", explain_task, "Why a task is where it is", s.EXPLANATION, refusals=(404,)),
    get("/v1/tasks/{task_id}/logs", task_logs, "What a task printed", s.LOGS, refusals=(404,)),
]

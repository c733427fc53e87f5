"""``/v1/deployments``: rolling updates of jobs: list, show, promote, pause, resume, fail
(``sched deployment``)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import JOB_ID, SUBMITTER, Call, Param, get, post


def list_deployments(call: Call):
    return call.sched.deployments(call.query["job"], call.query["limit"])


def show_deployment(call: Call):
    return call.sched.deployment(call.path["deployment_id"])


def promote_deployment(call: Call):
    return call.sched.promote(call.path["deployment_id"])


def pause_deployment(call: Call):
    return call.sched.pause_deployment(call.path["deployment_id"])


def resume_deployment(call: Call):
    return call.sched.resume_deployment(call.path["deployment_id"])


def fail_deployment(call: Call):
    return call.sched.fail_deployment(call.path["deployment_id"])


def _action(verb: str, run, summary: str):
    return post(f"/v1/deployments/{{deployment_id}}/{verb}", run, summary, s.DEPLOYMENT, role=SUBMITTER,
                refusals=(404, 409))


ROUTES = [
    get("/v1/deployments", list_deployments, "List deployments, newest first", s.array(s.DEPLOYMENT),
        query=(Param("job", JOB_ID, "only this job's deployments"),
               Param("limit", {"type": "integer", "minimum": 1, "maximum": 100_000, "default": 100},
                     "at most this many"))),
    get("/v1/deployments/{deployment_id}", show_deployment, "Show a deployment", s.DEPLOYMENT, refusals=(404,)),
    _action("promote", promote_deployment, "Let a deployment waiting on its canaries roll the rest"),
    _action("pause", pause_deployment, "Hold a deployment"),
    _action("resume", resume_deployment, "Carry on with a paused deployment"),
    _action("fail", fail_deployment, "End a deployment as failed now"),
]

"""``/v1/jobs``: submit (JSON, YAML or JSON lines), plan, list, show, scale, stop and
revert jobs, their versions, and waiting for their tasks (``sched job``)."""

from __future__ import annotations

import base64
import binascii

from scheduler.client import WaitTimeout
from scheduler.client.tasks import task_record
from scheduler.model import MAX_REPLICAS, TASK_STATES, job_schema
from scheduler.model.parameterized import MAX_META_VALUE, MAX_PAYLOAD_BYTES as MAX_PAYLOAD
from scheduler.state.read_steps import BLOCKING_CALLS
from scheduler.tools.api import filters
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import BLOCKING, JOB_ID, SUBMITTER, Answer, Call, Param, get, indexed, post

MAX_WAIT_S = 300
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
META_VALUE = {"anyOf": [{"type": "string", "maxLength": MAX_META_VALUE}, {"type": "number"}]}
JOB_SPEC = s.JOB_SPEC
SUBMISSION = {"anyOf": [JOB_SPEC, s.array(JOB_SPEC)],
              "description": "One job spec, or a list of them (all are checked before any is submitted). "
                             "YAML (one or more documents) and JSON lines are taken too."}


JOB_FIELDS = ("id", "type", "priority", "replicas", "version", "status", "next_launch")
MAX_PER_PAGE = 1000


def list_jobs(call: Call):
    q = call.query
    if q["per_page"] is None and q["next_token"] is None and not q["filter"] and not q["prefix"]:
        yield BLOCKING_CALLS
        return indexed(call, call.sched.jobs)  # every job, as `sched job ls --json`
    keep = filters.parse(q["filter"], JOB_FIELDS)
    prefix = max(q["prefix"] or "", keep.prefix, key=len)
    if not prefix.startswith(min(q["prefix"] or "", keep.prefix, key=len)):
        yield BLOCKING_CALLS
        return indexed(call, list)  # two prefixes no id has both of
    records, token, newest = yield from call.sched.jobs_page_steps(q["per_page"] or 100, q["next_token"], prefix,
                                                                   keep.test if q["filter"] else None)
    return Answer(200, records, {"x-sched-next-token": token} if token else {}, newest)


def submit_jobs(call: Call):
    body = call.body
    with unprocessable():
        if isinstance(body, dict):
            results = [call.sched.submit(body)]
        elif isinstance(body, list):
            results = call.sched.submit_many(body)
        elif isinstance(body, str):
            results = call.sched.submit_text(body)
        else:
            raise Problem(422, "the request body must be a job spec (a JSON object) or a list of them.")
    status = 201 if all(result["created"] for result in results) else 200
    return Answer(status, results[0] if len(results) == 1 and not isinstance(body, list) else results)


def plan_job(call: Call):
    with unprocessable():
        return call.sched.plan(call.body)


def show_job(call: Call):
    record, newest = yield from call.sched.job_steps(call.path["job_id"], history=True)
    return Answer(200, record, newest_event=newest)


def job_history(call: Call):
    return call.sched.history(call.path["job_id"])


def scale_job(call: Call):
    _job(call)
    replicas = call.body["replicas"]
    if not 0 <= replicas <= MAX_REPLICAS:
        raise Problem(422, f"replicas must be a whole number from 0 to {MAX_REPLICAS}.")
    return call.sched.scale(call.path["job_id"], replicas)


def stop_job(call: Call):
    return call.sched.stop(call.path["job_id"])


def revert_job(call: Call):
    _job(call)
    if call.body["version"] < 1:
        raise Problem(422, "version must be a job version, a whole number from 1.")
    with unprocessable():  # a version the job never had
        return call.sched.revert(call.path["job_id"], call.body["version"])


def _job(call: Call) -> str:
    """The path's job id, once it is known to exist (404 otherwise, before anything else)."""
    call.sched.store.require_job(call.path["job_id"])
    return call.path["job_id"]


def launch_job(call: Call):
    _job(call)
    with unprocessable():  # not periodic, stopped, or a launch still running under overlap forbid
        return call.sched.launch(call.path["job_id"])


def suspend_job(call: Call):
    _job(call)
    with unprocessable():
        return call.sched.suspend(call.path["job_id"])


def resume_job(call: Call):
    _job(call)
    with unprocessable():
        return call.sched.resume(call.path["job_id"])


def dispatch_job(call: Call):
    _job(call)
    body = call.body or {}
    payload = None
    if body.get("payload") is not None:
        try:
            payload = base64.b64decode(body["payload"], validate=True)
        except (binascii.Error, ValueError):
            raise Problem(422, "payload must be base64 (as Nomad's dispatch takes it).") from None
    with unprocessable():  # meta or payload the job does not take
        result = call.sched.dispatch(call.path["job_id"], body.get("meta") or {}, payload,
                                     body.get("idempotency_token"))
    return Answer(201 if result["created"] else 200, result)


def wait_job(call: Call):
    job_id, state, count, timeout = (_job(call), call.query["state"], call.query["count"], call.query["timeout"])
    wanted = count if count is not None else (call.sched.job(job_id)["spec"].get("replicas") or 1)
    try:
        tasks, reached, message = call.sched.wait(job_id, state, count, timeout), True, None
    except WaitTimeout as exc:
        tasks, reached, message = call.sched.tasks(job=job_id, state=state), False, str(exc)
    record = {"job": job_id, "state": state, "wanted": wanted, "reached": reached,
              "tasks": [task_record(t) for t in tasks]}
    return record if message is None else {**record, "message": message}


ROUTES = [
    get("/v1/jobs", list_jobs, "List jobs with their task counts by state", s.array(s.JOB_SUMMARY), blocking=True,
        refusals=(422,),
        answer_headers=("X-Sched-Next-Token",),
        query=(Param("per_page", {"type": "integer", "minimum": 1, "maximum": MAX_PER_PAGE},
                     "a page of at most this many jobs, in id order (without it, without next_token, filter and "
                     "prefix: every job)"),
               Param("next_token", JOB_ID, "the page from this job on: the X-Sched-Next-Token of the page before"),
               Param("prefix", {"type": "string", "pattern": r"^[A-Za-z0-9_/-]*$"}, "only jobs whose id starts so"),
               Param("filter", {"type": "string", "pattern": filters.pattern(JOB_FIELDS)},
                     'only jobs the expression holds for: status == "running", '
                                                   'type != "service" and priority >= 50, id matches "^web-", '
                                                   'status in ["failed", "complete"] (fields: ' +
                     ", ".join(JOB_FIELDS) + "); a filtered page looks at ten pages' worth of jobs at most, so it "
                                             "may hold fewer and still have a next one"),
               *BLOCKING),
        description="Paged as Nomad pages: `per_page` and `next_token`, the next page's token in the "
                    "`X-Sched-Next-Token` header (none after the last page). A blocking query (`index`, `wait`) "
                    "answers once something changed in the namespace since that index."),
    post("/v1/jobs", submit_jobs, "Submit job specs", {"anyOf": [s.SUBMITTED, s.array(s.SUBMITTED)]},
         role=SUBMITTER, body=SUBMISSION, texts=True, status=(201, 200), refusals=(422,),
         description="Create jobs, or update them (a new version). One spec answers one result, a list (or "
                     "several YAML documents, or JSON lines) a list. 201 when every job is new, else 200. "
                     "Nothing is submitted if any spec is not valid (422, naming it)."),
    post("/v1/jobs/plan", plan_job, "Dry run: where a spec's tasks would go now", s.PLAN, body=JOB_SPEC,
         refusals=(422,), description="Changes nothing (`sched job plan`)."),
    get("/v1/jobs/{job_id}", show_job, "Show a job, and who did what to it", s.JOB, refusals=(404,), blocking=True,
        query=BLOCKING),
    get("/v1/jobs/{job_id}/history", job_history, "A job's versions", s.array(s.JOB_VERSION), refusals=(404,)),
    post("/v1/jobs/{job_id}/scale", scale_job, "Set a job's replicas", s.SCALED, role=SUBMITTER,
         body=s.obj({"replicas": job_schema.whole(0, MAX_REPLICAS)}, additionalProperties=False),
         refusals=(404, 409, 422)),
    post("/v1/jobs/{job_id}/stop", stop_job, "Stop every task of a job", s.STOPPED, role=SUBMITTER,
         refusals=(404,)),
    post("/v1/jobs/{job_id}/revert", revert_job, "Run an earlier version's spec again, as a new version",
         s.SUBMITTED, role=SUBMITTER, body=s.obj({"version": {"type": "integer", "minimum": 1}},
                                                 additionalProperties=False),
         refusals=(404, 422)),
    post("/v1/jobs/{job_id}/launch", launch_job, "Launch a periodic job now, outside its schedule", s.LAUNCHED,
         role=SUBMITTER, refusals=(404, 422), description="Nomad's `periodic force` (`sched job launch`)."),
    post("/v1/jobs/{job_id}/suspend", suspend_job, "Launch no tick of a periodic job", s.SCHEDULE, role=SUBMITTER,
         refusals=(404, 422)),
    post("/v1/jobs/{job_id}/resume", resume_job, "Launch a suspended periodic job's ticks again", s.SCHEDULE,
         role=SUBMITTER, refusals=(404, 422)),
    post("/v1/jobs/{job_id}/dispatch", dispatch_job, "Launch a parameterized job with its input", s.DISPATCHED,
         role=SUBMITTER, status=(201, 200), refusals=(404, 422), body_required=False,
         body=s.obj({}, {"meta": {"type": ["object", "null"], "additionalProperties": META_VALUE},
                         "payload": {"type": ["string", "null"], "pattern": BASE64,
                                     "maxLength": 4 * -(-MAX_PAYLOAD // 3),
                                     "description": "base64, at most 16 KiB once decoded"},
                         "idempotency_token": {"type": ["string", "null"], "pattern": r"^[!-~]{1,128}$"}},
                    additionalProperties=False),
         description="`sched job dispatch`: 201 with a new launch, 200 with the launch a dispatch with the same "
                     "idempotency token made."),
    get("/v1/jobs/{job_id}/wait", wait_job, "Wait until tasks of a job are in a state", s.WAITED,
        refusals=(404,), lasting=True,
        query=(Param("state", {"type": "string", "enum": list(TASK_STATES), "default": "running"},
                     "the state to wait for"),
               Param("count", {"type": "integer", "minimum": 0, "maximum": MAX_REPLICAS},
                     "how many tasks (default: the job's replicas)"),
               Param("timeout", {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_S, "default": 30},
                     "seconds to wait at most")),
        description="Answers as soon as `count` tasks are in `state` (`reached`: true), or after `timeout` "
                    "seconds with the tasks in that state then (`reached`: false)."),
]

"""``/v1/config`` and ``/v1/memory``: the namespace's settings kept in Redis (retention,
the event stream's bound) and the memory they govern (``sched config``)."""

from __future__ import annotations

from scheduler.model import job_schema
from scheduler.model.retention import HELP, SETTINGS
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import OPERATOR, Call, Param, delete, get, put

NAMES = (*SETTINGS, "stream_maxlen")
MAX_STREAM = 1_000_000_000  # entries: far beyond what memory holds, within what Redis counts
DIGITS = {"type": "string", "pattern": r"^[ \t\n\r\f\v]*[0-9]+[ \t\n\r\f\v]*$"}
KINDS = {"task_retention": job_schema.seconds_or_text(), "job_retention": job_schema.seconds_or_text(),
         "ended_tasks_per_job": {"anyOf": [job_schema.whole(0, 1_000_000), DIGITS]},
         "stream_maxlen": {"anyOf": [job_schema.whole(0, MAX_STREAM), DIGITS, {"type": "null"}]}}
VALUES = s.named("SettingValues", {
    "type": "object", "additionalProperties": False,
    "description": "Settings to set; those not given are left as they are.",
    "properties": {name: {**KINDS[name],
                          "description": HELP.get(name, "events kept in the namespace's stream (0: no stream)")
                          + (": seconds, or 90s, 30m, 6h, 7d" if name.endswith("_retention") else
                             ": a whole number")}
                   for name in NAMES}})


def show_config(call: Call):
    return {"namespace": call.sched.namespace, "settings": call.sched.config(), "memory": call.sched.memory()}


def set_config(call: Call):
    if not call.body:
        raise Problem(422, f"give at least one setting: {', '.join(NAMES)}.")
    with unprocessable():
        return call.sched.set_config(**call.body)


def unset_config(call: Call):
    return call.sched.unset_config(*call.query["setting"])


def show_memory(call: Call):
    return call.sched.memory()


ROUTES = [
    get("/v1/config", show_config, "The namespace's settings and Redis's memory", s.CONFIG,
        description="`sched config show --json`: each setting with whether it is the default, and `memory` as "
                    "`GET /v1/memory` answers it."),
    put("/v1/config", set_config, "Set settings: retention and the event stream's bound", s.SETTINGS, role=OPERATOR,
        body=VALUES, refusals=(422,),
        description="`sched config set`: every value is checked before any is written (422, naming the setting)."),
    delete("/v1/config", unset_config, "Set settings back to their defaults", s.SETTINGS, role=OPERATOR,
           query=(Param("setting", {"type": "array", "items": {"type": "string", "enum": list(NAMES)}},
                        "a setting to set back (repeat it for several)", required=True),),
           description="`sched config unset NAME...`."),
    get("/v1/memory", show_memory, "Redis's memory as the namespace sees it", s.MEMORY),
]

"""``/v1/config`` and ``/v1/memory``: the namespace's settings kept in Redis (retention,
the event stream's bound, rebalancing) and the memory they govern (``sched config``)."""

from __future__ import annotations

from scheduler.model import job_schema
from scheduler.model.moves import HELP as REBALANCE_HELP, POLICY_STRATEGIES, SETTINGS as REBALANCE
from scheduler.model.retention import HELP, SETTINGS
from scheduler.tools.api import schemas as s
from scheduler.tools.api.problems import Problem, unprocessable
from scheduler.tools.api.route import OPERATOR, Call, Param, delete, get, put

NAMES = (*SETTINGS, "stream_maxlen", *REBALANCE)
MAX_STREAM = 1_000_000_000  # entries: far beyond what memory holds, within what Redis counts
DIGITS = {"type": "string", "pattern": r"^[ \t\n\r\f\v]*[0-9]+[ \t\n\r\f\v]*$"}
DURATIONS = ("rebalance_interval", "rebalance_deadline")
KINDS = {"task_retention": job_schema.seconds_or_text(), "job_retention": job_schema.seconds_or_text(),
         "ended_tasks_per_job": {"anyOf": [job_schema.whole(0, 1_000_000), DIGITS]},
         "stream_maxlen": {"anyOf": [job_schema.whole(0, MAX_STREAM), DIGITS, {"type": "null"}]},
         "rebalance_interval": job_schema.seconds_or_text(), "rebalance_deadline": job_schema.seconds_or_text(),
         "rebalance_strategy": {"type": "string", "enum": list(POLICY_STRATEGIES)}}


def _kind(name: str) -> str:
    if name.endswith("_retention") or name in DURATIONS:
        return ": seconds, or 90s, 30m, 6h, 7d"
    return ": spread or pack" if name == "rebalance_strategy" else ": a whole number"


VALUES = s.named("SettingValues", {
    "type": "object", "additionalProperties": False,
    "description": "Settings to set; those not given are left as they are.",
    "properties": {name: {**KINDS[name],
                          "description": {**HELP, **REBALANCE_HELP}.get(
                              name, "events kept in the namespace's stream (0: no stream)") + _kind(name)}
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
    put("/v1/config", set_config, "Set settings: retention, the event stream's bound, rebalancing", s.SETTINGS,
        role=OPERATOR,
        body=VALUES, refusals=(422,),
        description="`sched config set`: every value is checked before any is written (422, naming the setting)."),
    delete("/v1/config", unset_config, "Set settings back to their defaults", s.SETTINGS, role=OPERATOR,
           query=(Param("setting", {"type": "array", "items": {"type": "string", "enum": list(NAMES)}},
                        "a setting to set back (repeat it for several)", required=True),),
           description="`sched config unset NAME...`."),
    get("/v1/memory", show_memory, "Redis's memory as the namespace sees it", s.MEMORY),
]

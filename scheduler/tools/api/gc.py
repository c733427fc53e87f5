"""``/v1/gc``: remove now the ended work whose retention has passed (``sched gc``)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import OPERATOR, Call, Param, post


def collect_garbage(call: Call):
    return call.sched.gc(dry_run=call.query["dry_run"])


ROUTES = [
    post("/v1/gc", collect_garbage, "Remove now what retention would remove", s.GC_REPORT, role=OPERATOR,
         query=(Param("dry_run", {"type": "boolean", "default": False}, "say what would be removed; remove nothing"),),
         description="`sched gc`: finished jobs past their retention (with every key of them) and ended tasks of "
                     "running jobs past task_retention or beyond ended_tasks_per_job. The workers do the same on "
                     "their own every second or so."),
]

"""``/v1/queues``: how many tasks wait in each part of the scheduling queue (``sched queue ls``)."""

from __future__ import annotations

from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import Call, get


def queue_counts(call: Call):
    return call.sched.queue_counts()


ROUTES = [get("/v1/queues", queue_counts, "Count the tasks in each queue", s.QUEUES)]

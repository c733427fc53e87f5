"""Every voluntary disruption checked against its job's disruption budget, as the job stood
when it was granted: fed the event stream in order by ``placement_ledger.Ledger``.

A drain that evicts a task through the gate ends it with the message ``node <name>
drained`` (a drain past its deadline, or forced, adds why, and passes no gate). At that
event the job's tasks are known from the events before it: its open ones (pending or
live) and its running ones, which are its healthy ones (the machine's jobs have no health
check). The budget's arithmetic is written again here (``docs/budgets.md``): ``expected``
is a service's replicas, else the open tasks; ``desired`` is ``expected - max_unavailable``
or ``min_available``, a percentage of ``expected`` rounded up. A healthy task may go only if
``healthy - 1 >= desired``; one not counted healthy only while ``healthy >= desired``.

The gate judges on the last count, at most a few seconds old, less the grants since: a
change the count has not seen yet may let it grant what the job as it stands would not,
as kube's may: a running task that ended another way (failed, completed, lost, stopped by
a scale down...), a new version or count of the job, and, for a job whose expected tasks
are its open ones, a task opened or ended otherwise than by a grant and its replacement.
So a grant within ``STALE_MS`` of such a change of its job is not judged.
"""

from __future__ import annotations

import math
from collections import defaultdict

from scheduler.model.errors import NotFound

STALE_MS = 10_000  # the oldest count the gate judges on (scheduler/control/budgets.py STALE_MS)


def desired(budget: dict, expected: int) -> int:
    def scaled(value) -> int:
        text = str(value)
        return math.ceil(int(text[:-1]) * expected / 100) if text.endswith("%") else int(text)

    if "max_unavailable" in budget:
        return max(0, expected - scaled(budget["max_unavailable"]))
    return scaled(budget["min_available"])


class Budgets:
    def __init__(self, store):
        self.store = store
        self.open: dict[str, str] = {}  # task -> job: pending or live
        self.running: dict[str, str] = {}  # task -> job
        self.changed: dict[str, int] = defaultdict(int)  # job -> when a count last had something new to see
        self.replacing: dict[str, int] = defaultdict(int)  # job -> replacements of grants still to come
        self.checked = self.unjudged = 0

    def see_job(self, event: dict) -> None:
        if event.get("event") in ("submitted", "updated", "scaled"):
            self.changed[event["id"]] = event.get("ts", 0)

    def see(self, event: dict, task=None) -> list[str]:
        """One task event (``task``: its hash as read, for an end); the problems it shows."""
        task_id, state, job, at = event["id"], event.get("state"), event.get("job"), event.get("ts", 0)
        if state == "pending" and job:  # a new task (or a preemptor nominated: open already)
            if task_id not in self.open:
                self.open[task_id] = job
                if self.replacing[job]:  # the replacement of a grant: the open tasks are as they were
                    self.replacing[job] -= 1
                else:
                    self.changed[job] = at
            return []
        if state == "assigned":
            self.open[task_id] = job
            return []
        if state == "running":
            self.running[task_id] = job
            return []
        if state not in ("completed", "failed", "stopped", "lost", "preempted") or task_id not in self.open:
            return []
        problems = []
        gated = task is not None and state == "stopped" and task.message == f"node {event.get('node')} drained"
        if gated:
            problems = self.grant(task_id, self.open[task_id], at)
        else:
            self.changed[self.open[task_id]] = at
        self.open.pop(task_id, None)
        self.running.pop(task_id, None)
        return problems

    def grant(self, task_id: str, job: str, at: int) -> list[str]:
        try:
            spec = self.store.job_spec(job).raw
        except NotFound:
            return []
        if spec["type"] not in ("global", "sysbatch"):  # a grant's task is replaced (a global one's is not)
            self.replacing[job] += 1
        budget = spec.get("disruption_budget")
        if not budget:
            return []  # nothing protects it
        if at - self.changed[job] <= STALE_MS:
            self.unjudged += 1
            return []
        self.checked += 1
        healthy = sum(1 for j in self.running.values() if j == job)
        expected = spec["replicas"] if spec["type"] == "service" else sum(1 for j in self.open.values() if j == job)
        keep = desired(budget, expected)
        if task_id in self.running and healthy - 1 < keep:
            return [f"{task_id} evicted by a drain with {healthy} healthy tasks of job {job}, whose budget "
                    f"{budget} keeps {keep} of {expected}"]
        if task_id not in self.running and healthy < keep:
            return [f"{task_id} (not running) evicted by a drain while job {job} has {healthy} healthy tasks, "
                    f"fewer than the {keep} its budget {budget} keeps"]
        return []

"""Every voluntary disruption checked against its job's disruption budget: fed the event
stream in order by ``placement_ledger.Ledger``.

Every voluntary disruption that asks the gate is told by the message it ends its task
with (:func:`gated`): a drain's ``node <name> drained`` (a drain past its deadline, or
forced, adds why, and passes no gate); a move's stop of its old task, ``moved to <node>
(move <id>)``, and of the task its job queued in place of an old task that ended
meanwhile when it already ran (``move <id>'s new task ... took ...'s place``; one not
running yet is stopped without asking); and ``sched task evict`` with the machine's
reason, ``EVICT_REASON``. The job's
tasks are known from the events before it: its open ones (pending or live), its running
ones, which are its healthy ones (the machine's jobs have no health check), and its
replicas (the job's events say them). The budget's arithmetic is written again here
(``docs/budgets.md``): ``expected`` is a service's replicas, else the open tasks;
``desired`` is ``expected - max_unavailable`` or ``min_available``, a percentage of
``expected`` rounded up; a healthy task may go if ``healthy - desired >= 1``, one not
counted healthy while ``healthy >= desired``.

The gate judges on the job's last count, which may be up to ``STALE_MS`` old, less the
grants since (as kube's, it may so let go what the job as it stands would not, after a
change the count has not seen). So a grant is sound when the job as it stood at some
moment of the last ``STALE_MS`` (a count then), less the grants since, allowed it.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from scheduler.model.errors import NotFound

STALE_MS = 10_000  # the oldest count the gate judges on (scheduler/control/budgets.py STALE_MS)
EVICT_REASON = "evicted by hand"  # what the machine's `sched task evict` says
MOVED = re.compile(r"moved to \S+ \(move \d+-\d+\)")
SURPLUS = re.compile(r"move \d+-\d+'s new task \S+ took \S+'s place")


def gated(message: str, node: str, running: bool) -> str | None:
    """Which voluntary disruption through the gate ended a task so (None: none did)."""
    if message == f"node {node} drained":
        return "drain"
    if MOVED.fullmatch(message) or (running and SURPLUS.fullmatch(message)):
        return "move"
    if message == EVICT_REASON:
        return "evict"
    return None


def desired(budget: dict, expected: int) -> int:
    def scaled(value) -> int:
        text = str(value)
        return math.ceil(int(text[:-1]) * expected / 100) if text.endswith("%") else int(text)

    if "max_unavailable" in budget:
        return max(0, expected - scaled(budget["max_unavailable"]))
    return scaled(budget["min_available"])


@dataclass(frozen=True)
class Moment:
    """A job as a count at ``at`` would have found it."""

    at: int
    healthy: int
    open: int
    replicas: int
    grants: int  # the job's grants so far


class Budgets:
    def __init__(self, store):
        self.store = store
        self.open: dict[str, str] = {}  # task -> job: pending or live
        self.running: dict[str, str] = {}  # task -> job
        self.replicas: dict[str, int] = {}
        self.grants: dict[str, int] = defaultdict(int)
        self.moments: dict[str, list[Moment]] = defaultdict(list)
        self.checked: Counter = Counter()  # disruptions judged, by what made them

    def see_job(self, event: dict) -> None:
        if "replicas" in event:
            self.replicas[event["id"]] = event["replicas"]
            self._moment(event["id"], event.get("ts", 0))

    def see(self, event: dict, task=None) -> list[str]:
        """One task event (``task``: its hash as read, for a stop); the problems it shows."""
        task_id, state, at = event["id"], event.get("state"), event.get("ts", 0)
        job = event.get("job") or self.open.get(task_id)
        if state == "pending" and event.get("job"):
            self.open[task_id] = job  # a new task (or a preemptor nominated: open already)
        elif state == "assigned":
            self.open[task_id] = job
        elif state == "running":
            self.running[task_id] = job
        elif state in ("completed", "failed", "stopped", "lost", "preempted") and task_id in self.open:
            problems = []
            kind = gated(task.message, event.get("node"), task_id in self.running) \
                if task is not None and state == "stopped" else None
            if kind is not None:
                problems = self.grant(task_id, job, at, kind)
                self.grants[job] += 1
            self.open.pop(task_id, None)
            self.running.pop(task_id, None)
            self._moment(job, at)
            return problems
        else:
            return []
        self._moment(job, at)
        return []

    def _moment(self, job: str, at: int) -> None:
        moments = self.moments[job]
        moments.append(Moment(at, sum(1 for j in self.running.values() if j == job),
                              sum(1 for j in self.open.values() if j == job), self.replicas.get(job, 0),
                              self.grants[job]))
        old = [i for i, m in enumerate(moments) if m.at < at - STALE_MS]
        if len(old) > 1:  # the last one before the window stays: a count may have seen it
            del moments[:old[-1]]

    def grant(self, task_id: str, job: str, at: int, kind: str = "drain") -> list[str]:
        try:
            spec = self.store.job_spec(job).raw
        except NotFound:
            return []
        budget = spec.get("disruption_budget")
        if not budget:
            return []  # nothing protects it
        self.checked[kind] += 1
        healthy_task = task_id in self.running
        seen = [m for m in self.moments[job] if m.at >= at - STALE_MS] or self.moments[job][-1:]
        before = [m for m in self.moments[job] if m.at < at - STALE_MS][-1:]
        for m in before + seen:
            healthy = m.healthy - (self.grants[job] - m.grants)
            keep = desired(budget, m.replicas if spec["type"] == "service" else m.open)
            if healthy - keep >= 1 or (not healthy_task and healthy >= keep):
                return []
        now = self.moments[job][-1]
        return [f"{task_id} evicted by a {kind} from job {job} (budget {budget}) although no count of the last "
                f"{STALE_MS} ms allowed it: now {now.healthy} healthy of {now.open} open, replicas {now.replicas}, "
                f"{self.grants[job]} grants so far"]

"""Why tasks wait, for the dashboard: a pending task's verdict node by node (what it needs,
what each node has free), and a job's summary of why its pending tasks wait and where one
more could go now.

Two sources, said apart on the pages: what the last placement attempt found (the
explanation stored on each task, as ``sched task explain`` shows it), and the nodes as
they are when the page is read (the filter pipeline run again, nothing written): tasks
come and go between the two. Pure: :mod:`data` reads what these need.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import orjson

from scheduler.engine.domains import DomainCounts
from scheduler.engine.fit import over_quota
from scheduler.engine.explanations import explain
from scheduler.engine.verdicts import NodeVerdict, needs, verdicts
from scheduler.model import PENDING, JobSpec, Node, Task
from scheduler.model.placement_rules import Rules
from scheduler.model.reasons import Explanation

FITS_NAMED = 12  # nodes named where one more task would fit


@dataclass
class TaskPlaces:
    """Where a pending task could go now, node by node."""

    needs: dict[str, int]  # resource -> amount one task asks for (stored units)
    ports: tuple[int, ...]
    verdicts: list[NodeVerdict]
    pinned: str = ""  # a global job's task may go to this node only
    quota: str | None = None  # the namespace's quota stops it whatever the nodes

    @property
    def fits(self) -> int:
        return sum(1 for v in self.verdicts if v.fits)


@dataclass
class JobWaits:
    """Why a job's pending tasks wait: their last attempts, and the nodes now."""

    pending: int
    unattempted: int  # pending tasks no worker has tried to place yet
    last: list[tuple[str, int, str]] = field(default_factory=list)  # (last attempt's message, tasks, one of them)
    now: Explanation = field(default_factory=Explanation)  # one more task against every node now
    fits_on: list[str] = field(default_factory=list)  # the first FITS_NAMED nodes it would fit on now
    quota: str | None = None
    example: str = ""  # a pending task whose page shows each node's verdict


def task_places(spec: JobSpec, task: Task, nodes: list[Node], job_counts: dict[str, int], namespace: str,
                quota: dict[str, int], used: dict[str, int], rules: Rules | None = None,
                domains: DomainCounts | None = None) -> TaskPlaces:
    """``rules`` and ``domains``: the job's domain rules and the counts they read
    (``scheduler.control.rule_view.rules_now``)."""
    candidates = [n for n in nodes if n.name == task.pin] if task.pin else nodes
    return TaskPlaces(needs=needs(spec), ports=spec.ports,
                      verdicts=verdicts(spec, candidates, job_counts, rules, domains),
                      pinned=task.pin, quota=over_quota(namespace, spec.resources, used, quota))


def job_waits(spec: JobSpec, tasks: list[Task], nodes: list[Node], job_counts: dict[str, int], namespace: str,
              quota: dict[str, int], used: dict[str, int], rules: Rules | None = None,
              domains: DomainCounts | None = None) -> JobWaits | None:
    """None when no task of the job is pending. A global job's pending tasks are judged
    against their own nodes only."""
    pending = [t for t in tasks if t.state == PENDING]
    if not pending:
        return None
    messages: Counter[str] = Counter()
    example: dict[str, str] = {}
    unattempted = 0
    for task in pending:
        message = _last_message(task)
        if message is None:
            unattempted += 1
            continue
        messages[message] += 1
        example.setdefault(message, task.id)
    pins = {t.pin for t in pending if t.pin}
    if pins:  # a global job's tasks each wait for their own node
        nodes = [n for n in nodes if n.name in pins]
    now = explain(nodes, spec, job_counts, rules, domains)
    fits_on = [v.node for v in verdicts(spec, nodes, job_counts, rules, domains) if v.fits][:FITS_NAMED]
    shown = next((t.id for t in pending if _last_message(t) is not None), pending[0].id)
    return JobWaits(pending=len(pending), unattempted=unattempted,
                    last=[(message, count, example[message]) for message, count in messages.most_common()],
                    now=now, fits_on=fits_on, quota=over_quota(namespace, spec.resources, used, quota),
                    example=shown)


def _last_message(task: Task) -> str | None:
    if not task.explanation:
        return None
    try:
        return orjson.loads(task.explanation).get("message") or None
    except (orjson.JSONDecodeError, AttributeError):
        return None

"""What a replay measures, as it happens: each node's allocation, each task's wait, and
samples over time of utilisation, pending tasks, stranded resources and tenants' shares.

The replay (``replay.py``) tells it what the scheduler did (read from the namespace's
event stream, so these are the commits' own outcomes); it never decides anything.

**Stranded** (Borg's term): room on a node that no task of the trace could use because
another resource of that node is exhausted. A resource counts as exhausted on a node when
what is free of it is less than the smallest request for it in the trace; then whatever
is free of the node's other resources is stranded (free cpu on nodes whose memory is
full, and the reverse). Only ready, active nodes count.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from scheduler.model import JobSpec, Node


@dataclass
class Series:
    """Samples over time: ``t`` (seconds), and one list of values per name."""

    t: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, t_s: float, row: dict[str, float]) -> None:
        if self.t and self.t[-1] == t_s:  # the same instant again: the later state wins
            for name, value in row.items():
                self.values.setdefault(name, [0.0] * len(self.t))[-1] = value
            return
        self.t.append(t_s)
        for name in set(self.values) | set(row):
            self.values.setdefault(name, [0.0] * (len(self.t) - 1)).append(row.get(name, 0.0))

    def mean(self, name: str, until_s: float, since_s: float | None = None) -> float:
        """The time-weighted mean of a step function (each value holds until the next
        sample) from ``since_s`` (the first sample) to ``until_s``; over no time, the value
        then."""
        values, t = self.values.get(name, []), self.t
        if not t:
            return 0.0
        since = t[0] if since_s is None else max(since_s, t[0])
        if until_s <= since:
            i = max(0, bisect.bisect_right(t, since) - 1)
            return values[i] if values else 0.0
        total = 0.0
        for i, value in enumerate(values):
            start, end = max(t[i], since), min(t[i + 1] if i + 1 < len(t) else until_s, until_s)
            if end > start:
                total += value * (end - start)
        return total / (until_s - since)

    def peak(self, name: str) -> float:
        return max(self.values.get(name, [0.0]) or [0.0])

    def thinned(self, most: int = 500) -> dict:
        """At most ``most`` samples (every k-th, the last kept), for the JSON report."""
        step = max(1, math.ceil(len(self.t) / most))
        idx = list(range(0, len(self.t), step))
        if self.t and idx[-1] != len(self.t) - 1:
            idx.append(len(self.t) - 1)
        return {"t": [self.t[i] for i in idx], **{name: [round(v[i], 6) for i in idx]
                                                  for name, v in sorted(self.values.items())}}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Recorder:
    def __init__(self, resources: list[str], smallest: dict[str, int]):
        self.resources = resources
        self.smallest = smallest  # resource -> the smallest request for it in the trace (> 0)
        self.capacity: dict[str, dict[str, int]] = {}  # node -> capacity
        self.used: dict[str, dict[str, int]] = {}  # node -> allocated
        self.usable: dict[str, bool] = {}  # node -> ready and active
        self.stranded_on: dict[str, dict[str, int]] = {}  # node -> its stranded room
        self.total_capacity = dict.fromkeys(resources, 0)
        self.total_used = dict.fromkeys(resources, 0)
        self.total_stranded = dict.fromkeys(resources, 0)
        self.by_tenant: dict[str, dict[str, int]] = {}
        self.weights: dict[str, float] = {}
        self.spec_of: dict[str, JobSpec] = {}  # task -> its job's spec
        self.created_ms: dict[str, int] = {}
        self.node_of: dict[str, str] = {}  # live task -> node
        self.pending: dict[str, None] = {}  # waiting tasks, oldest first
        self.delays: dict[int, list[float]] = {}  # priority -> seconds waited, per placed task
        self.longest_wait_s = 0.0
        self.tasks = self.placed = self.preemptions = self.lost = 0  # tasks: created
        self.reasons: dict[str, int] = {}
        self.series = Series()
        self.tenant_series = Series()

    # Nodes.
    def node(self, node: Node, usable: bool = True) -> None:
        if node.name in self.capacity:
            self._forget(node.name)
        self.capacity[node.name] = {r: node.capacity.get(r, 0) for r in self.resources}
        self.used.setdefault(node.name, dict.fromkeys(self.resources, 0))
        self.usable[node.name] = usable
        self._count(node.name)

    def node_usable(self, name: str, usable: bool) -> None:
        if name in self.capacity and self.usable[name] != usable:
            self._forget(name)
            self.usable[name] = usable
            self._count(name)

    def _forget(self, name: str) -> None:
        """Take the node's part out of the totals (before it changes)."""
        if self.usable.get(name):
            for r in self.resources:
                self.total_capacity[r] -= self.capacity[name][r]
                self.total_used[r] -= self.used[name][r]
                self.total_stranded[r] -= self.stranded_on[name][r]

    def _count(self, name: str) -> None:
        """Put the node's part into the totals (after it changed)."""
        cap, used = self.capacity[name], self.used[name]
        free = {r: cap[r] - used[r] for r in self.resources}
        exhausted = [r for r in self.resources if r in self.smallest and free[r] < self.smallest[r]]
        stranded = {r: (free[r] if any(s != r for s in exhausted) else 0) for r in self.resources}
        self.stranded_on[name] = stranded
        if self.usable[name]:
            for r in self.resources:
                self.total_capacity[r] += cap[r]
                self.total_used[r] += used[r]
                self.total_stranded[r] += stranded[r]

    # Tasks.
    def created(self, task_id: str, spec: JobSpec, at_ms: int) -> None:
        self.tasks += 1  # (a job removed and submitted again numbers its tasks from 0 again)
        self.spec_of[task_id] = spec
        self.created_ms[task_id] = at_ms
        self.pending[task_id] = None

    def assigned(self, task_id: str, node: str, at_ms: int) -> None:
        spec = self.spec_of.get(task_id)
        if spec is None or task_id in self.node_of:
            return
        self.pending.pop(task_id, None)
        waited = max(0, at_ms - self.created_ms[task_id]) / 1000
        self.delays.setdefault(spec.priority, []).append(waited)
        self.longest_wait_s = max(self.longest_wait_s, waited)
        self.placed += 1
        self.node_of[task_id] = node
        self._allocate(node, spec, 1)

    def ended(self, task_id: str, state: str) -> None:
        """The task ended (in ``state``): what it held is free again."""
        self.pending.pop(task_id, None)
        node = self.node_of.pop(task_id, None)
        if state == "preempted":
            self.preemptions += 1
        elif state == "lost":
            self.lost += 1
        if node is not None:
            self._allocate(node, self.spec_of[task_id], -1)

    def _allocate(self, node: str, spec: JobSpec, sign: int) -> None:
        if node not in self.used:
            return
        self._forget(node)
        used = self.used[node]
        mine = self.by_tenant.setdefault(spec.tenant, dict.fromkeys(self.resources, 0))
        for r, amount in spec.resources.items():
            if r in used:
                used[r] += sign * amount
                mine[r] += sign * amount
        self._count(node)

    def note_reasons(self, reasons: dict[str, int]) -> None:
        for reason, count in reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + count

    # Samples.
    def sample(self, at_ms: int) -> None:
        t = at_ms / 1000
        row = {"pending": float(len(self.pending)), "running": float(len(self.node_of))}
        for r in self.resources:  # the totals are kept as tasks and nodes come and go
            cap = self.total_capacity[r]
            row[f"utilisation.{r}"] = self.total_used[r] / cap if cap else 0.0
            row[f"stranded.{r}"] = self.total_stranded[r] / cap if cap else 0.0
        self.series.add(t, row)
        shares = {}
        for tenant, held in self.by_tenant.items():
            top = max((held[r] / self.total_capacity[r] for r in self.resources if self.total_capacity[r] > 0),
                      default=0.0)
            shares[tenant] = top
        self.tenant_series.add(t, shares)

    # The figures.
    def delay_table(self) -> dict[str, dict[str, float]]:
        out = {}
        for priority in sorted(self.delays, reverse=True):
            waits = sorted(self.delays[priority])
            out[str(priority)] = {"tasks": len(waits), "p50": round(percentile(waits, 50), 3),
                                  "p95": round(percentile(waits, 95), 3), "p99": round(percentile(waits, 99), 3),
                                  "max": round(waits[-1], 3)}
        return out

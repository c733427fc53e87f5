"""Lower bounds on the nodes a trace needs: counts of nodes below which no cluster of the
inventory's shapes can place the trace's tasks (each run once, as traced) with no task
waiting longer than ``max_wait_s``. Compaction (``compact.py``) reports them beside its
answer, and starts its search from them.

Two measures, each per resource, in the replay's own time (arrivals rounded up to the
tick, as the replay sees them):

- **Compulsory parts** (the timetable bound of cumulative scheduling): a task that
  arrives at ``a`` and runs ``d`` starts by ``a + max_wait`` at the latest, so it certainly
  holds its request over ``[a + max_wait, a + d)``. The most that such certain parts ask
  for at one instant must fit in the cluster at once. With no waiting this is the trace's
  peak demand.
- **Demand-seconds over capacity-seconds**: every run lies between its arrival and the
  end of the replay, which comes at the latest when the last task that waits the longest
  allowed ends. For every window from an arrival to that end, the tasks arriving in it
  ask ``request x duration`` of it; the cluster offers ``capacity x length``.

Capacity is counted by the largest nodes first, per resource: N nodes of a mixed
inventory offer at most its N largest (and a cluster larger than the inventory, as
compaction grows it by repeating the inventory, at most its copies and the largest of
the rest). So the bound holds for any choice of N nodes of the inventory, not only for
the inventory's mix, where a mean node would overstate what few nodes offer.

``peak_demand_nodes`` is the peak demand counted the same way, every task from its
arrival for its duration: the bound when no task may wait, and no bound when they may
(queueing smooths peaks), reported beside it under its own name.

A task the scheduler ends early (preempted) runs again whole: that only adds work, which
the bounds do not count.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from scheduler.model import SpecError
from scheduler.tools.simulate.trace import DRAIN, NODE, NODE_DOWN, NODE_UP, TASK, Trace

CLUSTER_EVENTS = (NODE, NODE_DOWN, NODE_UP, DRAIN)  # compaction's own cluster replaces the trace's


@dataclass(frozen=True)
class Run:
    """A trace's tasks of one event, in the replay's time (ms): all ``count`` of them."""

    arrival: int
    duration: int | None  # None: until the replay ends
    resources: dict[str, int]  # the request of all of them together


class Capacity:
    """What N nodes of an inventory offer at most, per resource: its N largest (beyond its
    size, whole copies of it and the largest of the rest)."""

    def __init__(self, inventory):
        self.size = len(inventory)
        self.prefix: dict[str, list[int]] = {}
        for r in {r for node in inventory for r in node.capacity}:
            sizes = sorted((node.capacity.get(r, 0) for node in inventory), reverse=True)
            sums = [0]
            for size in sizes:
                sums.append(sums[-1] + size)
            self.prefix[r] = sums

    def of(self, r: str, nodes: int) -> int:
        sums = self.prefix.get(r, [0])
        whole, rest = divmod(nodes, self.size)
        return whole * sums[-1] + sums[rest]

    def nodes_for(self, r: str, amount: int) -> int | None:
        """The fewest nodes that offer ``amount`` of ``r`` at once (None: no count does)."""
        if amount <= 0:
            return 0
        sums = self.prefix.get(r, [0])
        total = sums[-1]
        if total <= 0:
            return None
        whole = -(-amount // total) - 1  # whole copies below the amount; the rest from one more
        return whole * self.size + bisect.bisect_left(sums, amount - whole * total)


def runs(trace: Trace, tick_s: float = 1.0) -> list[Run]:
    tick = max(1, int(tick_s * 1000))
    out = []
    for event in trace.events:
        if event.kind == TASK and event.spec is not None:
            out.append(Run(-(-event.time_ms // tick) * tick, event.duration_ms,
                           {r: amount * event.count for r, amount in event.spec.resources.items() if amount > 0}))
    return out


def _peak(runs: list[Run], wait_ms: int, end_ms: int) -> dict[str, int]:
    """Per resource, the most that the runs certainly hold at one instant: each over
    ``[arrival + wait, arrival + duration)``, up to ``end_ms`` (no duration: through the
    end, which the replay visits with every such run placed: a trace whose tasks all
    arrive at 0 and never end holds them all at 0)."""
    changes: dict[str, list[tuple[int, int]]] = {}
    for run in runs:
        start = run.arrival + wait_ms
        stop = end_ms + 1 if run.duration is None else min(end_ms, run.arrival + run.duration)
        if stop <= start:
            continue
        for r, amount in run.resources.items():
            changes.setdefault(r, []).extend(((start, amount), (stop, -amount)))
    peaks = {}
    for r, points in changes.items():
        level = peak = 0
        for _, delta in sorted(points):  # at one instant, ends (negative) before starts
            level += delta
            peak = max(peak, level)
        peaks[r] = peak
    return peaks


def _energy(runs: list[Run], wait_ms: int, ends: tuple[int, int], cut: bool) -> dict[str, int]:
    """Per resource, the most capacity (per instant) that any window from an arrival to
    the replay's end asks for: the demand-seconds of the tasks arriving in it over its
    length. The end lies between ``ends``; the bound takes the one that asks the least
    (the ratio is monotone in the end). ``cut``: the replay may stop (``--until``) before
    a task's run is over: only what it certainly runs by the earliest end counts."""
    earliest, latest = ends
    need: dict[str, int] = {}
    ordered = sorted(runs, key=lambda run: -run.arrival)  # suffixes: latest arrivals first
    for r in sorted({r for run in runs for r in run.resources}):
        # Demand-seconds of runs with a duration, and for runs until the end, their
        # request and request x (arrival + wait): theirs is request x end - that.
        fixed = open_amount = open_start = 0
        for run in ordered:
            amount = run.resources.get(r, 0)
            if run.duration is not None:
                fixed += amount * (min(run.duration, max(0, earliest - run.arrival - wait_ms)) if cut else run.duration)
            else:
                open_amount += amount
                open_start += amount * (run.arrival + wait_ms)
            asked = [-(-(fixed + max(0, open_amount * end - open_start)) // (end - run.arrival))
                     for end in (earliest, latest) if end > run.arrival]
            if asked:
                need[r] = max(need.get(r, 0), min(asked))
    return need


def lower_bound(trace: Trace, max_wait_s: float = 0.0, tick_s: float = 1.0, until_s: float | None = None) -> dict:
    """``nodes`` (the bound), ``per_resource`` (each resource's), and ``peak_demand_nodes``
    (the peak demand's, which is the bound only when ``max_wait_s`` is 0), for replays
    with that tick and ``until_s``."""
    inventory = trace.nodes
    if not inventory:
        raise SpecError("compaction needs the trace's nodes at time 0 (its inventory) to know a node's shape.")
    tick = max(1, int(tick_s * 1000))
    wait_ms = int(max_wait_s * 1000)
    until = None if until_s is None else int(until_s * 1000)
    tasks = [run for run in runs(trace, tick_s) if until is None or run.arrival <= until]
    # When the replay ends: at the earliest once every event is visited and every run,
    # placed at once, is over; at the latest once the last run that waited as long as it
    # may is over (its end visited at the tick).
    last_event = max((-(-e.time_ms // tick) * tick for e in trace.events if e.kind not in CLUSTER_EVENTS), default=0)
    earliest = max([last_event, *(run.arrival + run.duration for run in tasks if run.duration is not None)])
    latest = max([earliest, *(-(-(run.arrival + wait_ms + run.duration) // tick) * tick
                              for run in tasks if run.duration is not None)])
    if until is not None:
        earliest, latest = min(earliest, until), min(latest, until)
    capacity = Capacity(inventory)
    compulsory = _peak(tasks, wait_ms, earliest)
    energy = _energy(tasks, wait_ms, (earliest, latest), until is not None)
    per_resource: dict[str, int | None] = {}
    for r in sorted({r for run in tasks for r in run.resources}):
        counts = [capacity.nodes_for(r, need.get(r, 0)) for need in (compulsory, energy)]
        per_resource[r] = None if None in counts else max(counts)
    peak = [capacity.nodes_for(r, amount) for r, amount in _peak(tasks, 0, earliest).items()]
    return {"nodes": max((n for n in per_resource.values() if n is not None), default=0),
            "per_resource": per_resource,
            "peak_demand_nodes": max((n for n in peak if n is not None), default=0)}

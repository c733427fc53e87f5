"""What a run left behind, turned into numbers: the tasks read back, latency percentiles,
spread skews, and the invariants (the audit plus the bench's own checks).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import orjson

from scheduler.control.audit import audit
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.fit import misfit
from scheduler.model import ASSIGNED, PENDING, SPREAD, JobSpec, Node, Task
from scheduler.state.app import App

READ_CHUNK = 5000  # task hashes per pipeline round trip when reading results


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def read_tasks(app: App, task_ids: list[str]) -> list[Task]:
    out: list[Task] = []
    for i in range(0, len(task_ids), READ_CHUNK):
        out += app.store.tasks(task_ids[i:i + READ_CHUNK])
    return out


def spread_skews(nodes: list[Node], specs: list[JobSpec], tasks: list[Task]) -> tuple[int, int]:
    """(``spread_skew``, ``zone_spread_skew``); see the package docstring (``__init__.py``).

    Computed without visiting every node for every job: the largest count is on a node
    holding tasks of the job, and the smallest is 0 as soon as one eligible node with
    room holds none (found by scanning until the first), which is the usual case.
    """
    per_job: dict[str, Counter] = defaultdict(Counter)
    for task in tasks:
        if task.state == ASSIGNED:
            per_job[task.job][task.node] += 1
    by_name = {n.name: n for n in nodes}
    zone_nodes: dict[str, list[Node]] = defaultdict(list)
    for n in nodes:
        zone_nodes[n.labels.get("zone", "")].append(n)
    node_skew = zone_skew = 0
    for spec in specs:
        if spec.strategy != SPREAD:
            continue
        static = filter_pipeline(spec).static_check
        counts = per_job.get(spec.id, Counter())

        def has_room(node: Node) -> bool:
            return static(node) is None and misfit(node, spec.resources, spec.ports, spec.max_per_node,
                                                    counts[node.name]) is None

        if not spec.preferences:
            held = [c for name, c in counts.items() if name in by_name and has_room(by_name[name])]
            empty = any(n.name not in counts and has_room(n) for n in nodes)
            if held or empty:
                node_skew = max(node_skew, max(held, default=0) - (0 if empty else min(held)))
        elif [p.spread for p in spec.preferences] == ["node.labels.zone"]:
            by_zone: Counter = Counter()
            for name, count in counts.items():
                if name in by_name:
                    by_zone[by_name[name].labels.get("zone", "")] += count
            on_zone = [by_zone[zone] for zone, members in zone_nodes.items() if any(map(has_room, members))]
            if on_zone:
                zone_skew = max(zone_skew, max(on_zone) - min(on_zone))
    return node_skew, zone_skew


def check_results(app: App, tasks: list[Task], expected: int, stats: dict[str, int], pool,
                  require_reasons: bool = True) -> dict:
    """The audit plus the bench's own invariants; returns the part of the report about them.
    ``require_reasons=False`` (an offered-load run stopped before its queue drained)
    allows pending tasks that were never attempted (the audit still checks each is queued)."""
    report = audit(app.store)
    problems = list(report.problems)
    if len(pool.reports) < len(pool.processes):
        problems.append(f"only {len(pool.reports)} of {len(pool.processes)} worker processes finished normally")
    states = Counter(t.state for t in tasks)
    if len(tasks) != expected:
        problems.append(f"{len(tasks)} tasks found, {expected} submitted")
    others = {s: n for s, n in states.items() if s not in (ASSIGNED, PENDING)}
    if others:
        problems.append(f"tasks neither assigned nor pending: {others}")
    unexplained = [t.id for t in tasks
                   if require_reasons and t.state == PENDING and not t.explanation]
    if unexplained:
        problems.append(f"{len(unexplained)} pending task(s) without a reason, e.g. {unexplained[0]}")
    if stats.get("placed", 0) != states[ASSIGNED]:
        problems.append(f"workers counted {stats.get('placed', 0)} placements, "
                        f"but {states[ASSIGNED]} tasks are assigned")
    return {"invariants_ok": not problems, "overcommits": report.overcommits, "problems": problems[:5],
            "problem_count": len(problems), "states": dict(states)}


def unplaced_summary(tasks: list[Task], limit: int = 3) -> list[dict]:
    out = []
    for task in tasks:
        if task.state == PENDING and len(out) < limit:
            message = orjson.loads(task.explanation).get("message", "") if task.explanation else ""
            out.append({"id": task.id, "message": message})
    return out


def _round(value, digits):
    return None if value is None else round(value, digits)


def _per(amount: int, count: int):
    return round(amount / count, 1) if count else None

"""``--sweep``: the batch run at several cluster sizes with the same load per node, and how
the time per placement grows."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from scheduler.tools.bench.batch import run_batch
from scheduler.tools.bench.harness import DEFAULT_NAMESPACE
from scheduler.tools.bench.report import DEFINITIONS, WINDOW
from scheduler.tools.bench.scenario import Scenario

SWEEP_NODES = (1000, 5000, 20000, 100000)


def sweep_scenarios(scenario: Scenario, sizes=SWEEP_NODES) -> list[Scenario]:
    """The scenario at each cluster size, with the jobs scaled to keep the load per node."""
    return [replace(scenario, nodes=n, jobs=max(1, round(scenario.jobs * n / scenario.nodes))) for n in sizes]


SWEEP_FIELDS = ("nodes", "jobs", "tasks", "assigned", "unplaced", "placements_per_s", "placements_per_s_from_start",
                "us_per_placement", "worker_cpu_us_per_placement", "window_s", "commit_rejections", "overcommits", "invariants_ok",
                "spread_skew", "redis_bytes_per_task", "worker_cpu_s", "redis_cpu_s", "register_s", "submit_s",
                "machine")


def run_sweep(scenario: Scenario, sizes=SWEEP_NODES, redis_url: str | None = None,
              namespace: str = DEFAULT_NAMESPACE, clear: bool = True, progress: bool = False,
              on_point: Callable[[dict], None] | None = None) -> dict:
    """The batch run at each size (a fresh private server for each, unless a URL is given)."""
    points = []
    for i, point in enumerate(sweep_scenarios(scenario, sizes)):
        report = run_batch(point, redis_url, namespace, clear=clear or i > 0, progress=progress)
        row = {name: report.get(name, report["scenario"].get(name)) for name in SWEEP_FIELDS}
        row["problems"] = report["problems"]
        points.append(row)
        if on_point:
            on_point(row)
    base = points[0]["us_per_placement"] if points else None
    for row in points:
        us = row["us_per_placement"]
        row["vs_first"] = round(us / base, 2) if us and base else None
    return {
        "mode": "sweep",
        "scenario": {**scenario.describe(), "sizes": list(sizes),
                     "jobs_per_point": "jobs x nodes / scenario nodes (same load per node)"},
        "points": points,
        "invariants_ok": all(row["invariants_ok"] for row in points),
        "overcommits": sum(row["overcommits"] for row in points),
        "window": WINDOW,
        "definitions": {**DEFINITIONS, "vs_first": "us_per_placement relative to the first (smallest) point"},
    }

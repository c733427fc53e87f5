"""Compaction (Borg's measure of placement quality): the fewest nodes of the inventory's
shape on which the trace still places with no task waiting longer than a bound, found by
bisection, against the lower bound for that wait (``bounds.py``).

The inventory is the trace's nodes at time 0; a cluster of N nodes repeats them in turn
(``replay.shaped_nodes``), so a mixed inventory keeps its mix. "Places" means: nothing
pending at the end, and no task waited longer than ``max_wait_s``. Bisection assumes that
more nodes never make it worse; each probe is a replay, stopped as soon as a task has
waited longer than the bound (it has failed then).
"""

from __future__ import annotations

import dataclasses

from scheduler.tools.simulate.bounds import lower_bound
from scheduler.tools.simulate.replay import Settings
from scheduler.tools.simulate.trace import Trace

MOST_GROWTH = 8  # the inventory is grown up to this many times its size when it does not place the trace


def compact(replay, trace: Trace, settings: Settings, max_wait_s: float) -> dict:
    """Bisect for the fewest nodes; ``replay(trace, settings)`` runs one replay and reports."""
    tries: dict[int, dict] = {}

    def places(n: int) -> bool:
        if n not in tries:
            report = replay(trace, dataclasses.replace(settings, nodes=n, give_up_wait_s=max_wait_s))
            report["places"] = (not report["gave_up"] and report["pending_at_end"] == 0
                                and report["longest_wait_s"] <= max_wait_s)
            tries[n] = report
        return tries[n]["places"]

    bound = lower_bound(trace, max_wait_s, settings.tick_s, settings.until_s)
    high = max(len(trace.nodes), bound["nodes"], 1)
    while not places(high):
        if high >= MOST_GROWTH * max(len(trace.nodes), bound["nodes"], 1):
            break
        high *= 2
    if not tries[high]["places"]:
        needed = None
    else:
        low = 0  # no nodes place nothing
        probe = max(1, bound["nodes"])
        if probe < high:  # most answers lie near the bound: try it first
            if places(probe):
                high = probe
            else:
                low = probe
        while high - low > 1:
            middle = (low + high) // 2
            if places(middle):
                high = middle
            else:
                low = middle
        needed = high
    return {"nodes_needed": needed, "lower_bound": bound["nodes"], "lower_bound_per_resource": bound["per_resource"],
            "peak_demand_nodes": bound["peak_demand_nodes"], "max_wait_s": max_wait_s,
            "tries": [{"nodes": n, "places": r["places"], "longest_wait_s": r["longest_wait_s"],
                       "pending_at_end": r["pending_at_end"], "stopped_at_s": r["simulated_s"] if r["gave_up"] else None,
                       "wall_s": r["wall_s"]} for n, r in sorted(tries.items())],
            "report": tries[needed] if needed is not None else tries[high]}

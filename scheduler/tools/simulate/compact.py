"""Compaction (Borg's measure of placement quality): the fewest nodes of the inventory's
shape on which the trace still places with no task waiting longer than a bound, searched
upwards from the lower bound for that wait (``bounds.py``).

The inventory is the trace's nodes at time 0; a cluster of N nodes repeats them in turn
(``replay.shaped_nodes``), so a mixed inventory keeps its mix. "Places" means: nothing
pending at the end, and no task waited longer than ``max_wait_s``. The search assumes that
more nodes never make it worse. The bound is sound (no fewer nodes can place the trace), so
the search starts there and most answers lie a little above it: it steps up from it, the
step doubling, until a probe places, then bisects between the last that did not and that
one. Each probe is a replay, stopped as soon as a task has waited longer than the bound
(it has failed then) or once its verdict is settled: every task of the trace has arrived
and none waits (only runs are left to end, and no task can wait again).
"""

from __future__ import annotations

import dataclasses

from scheduler.tools.simulate.bounds import lower_bound
from scheduler.tools.simulate.replay import Settings
from scheduler.tools.simulate.trace import Trace

MOST_GROWTH = 8  # the inventory is grown up to this many times its size when it does not place the trace
FIRST_STEP = 0.04  # the first step up from the bound, as a share of it (answers lie 0-20 % above it)


def compact(replay, trace: Trace, settings: Settings, max_wait_s: float) -> dict:
    """The fewest nodes, searched up from the lower bound; ``replay(trace, settings)`` runs
    one replay and reports."""
    tries: dict[int, dict] = {}

    def places(n: int) -> bool:
        if n not in tries:
            report = replay(trace, dataclasses.replace(settings, nodes=n, give_up_wait_s=max_wait_s,
                                                       stop_when_settled=True))
            report["places"] = (not report["gave_up"] and report["pending_at_end"] == 0
                                and report["longest_wait_s"] <= max_wait_s)
            tries[n] = report
        return tries[n]["places"]

    bound = lower_bound(trace, max_wait_s, settings.tick_s, settings.until_s)
    most = MOST_GROWTH * max(len(trace.nodes), bound["nodes"], 1)
    low, high = max(1, bound["nodes"]) - 1, max(1, bound["nodes"])  # fewer than the bound never place
    step = max(1, round(high * FIRST_STEP))
    while not places(high):
        if high >= most:
            break
        low, high = high, min(high + step, most)
        step *= 2
    if not tries[high]["places"]:
        needed = None
    else:
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
                       "pending_at_end": r["pending_at_end"],
                       "stopped_at_s": r["simulated_s"] if r["gave_up"] or r["settled"] else None,
                       "wall_s": r["wall_s"]} for n, r in sorted(tries.items())],
            "report": tries[needed] if needed is not None else tries[high]}

"""The report of a replay as one JSON-able dict (``sched simulate --json`` prints it; the
HTML page draws it). ``docs/simulate.md`` explains each figure."""

from __future__ import annotations

from scheduler.tools.simulate.replay import Replay


def summarise(replay: Replay) -> dict:
    recorder, trace = replay.recorder, replay.trace
    until_s = replay.end_ms / 1000
    series = recorder.series
    resources = recorder.resources
    weights = recorder.weights
    tenants = sorted(recorder.by_tenant)
    total_weight = sum(weights.get(t, 1.0) for t in tenants) or 1.0
    simulated_tasks = recorder.placed + len(recorder.pending)
    # The arrival window: from the first tasks' arrival to the last's (the load a trace
    # offers is over it; the whole replay adds the tail in which the last tasks run out).
    first_s, last_s = (t / 1000 for t in (replay.arrivals_ms or (0, 0)))
    return {
        "settings": replay.settings.label(),
        "gave_up": replay.gave_up,
        "settled": replay.settled,
        "source": trace.source,
        "nodes": len(replay.nodes),
        "tasks": recorder.tasks,
        "trace_tasks": trace.tasks,
        "placed": recorder.placed,
        "pending_at_end": len(recorder.pending),
        "utilisation": {r: round(series.mean(f"utilisation.{r}", until_s), 4) for r in resources},
        "utilisation_arrival_window": {r: round(series.mean(f"utilisation.{r}", last_s, first_s), 4)
                                       for r in resources},
        "arrival_window_s": [first_s, last_s],
        "utilisation_peak": {r: round(series.peak(f"utilisation.{r}"), 4) for r in resources},
        "stranded": {r: round(series.mean(f"stranded.{r}", until_s), 4) for r in resources},
        "stranded_peak": {r: round(series.peak(f"stranded.{r}"), 4) for r in resources},
        "queueing_delay_s": recorder.delay_table(),
        "longest_wait_s": round(recorder.longest_wait_s, 3),
        "preemptions": recorder.preemptions,
        "lost": recorder.lost,
        "pending_reasons": dict(sorted(recorder.reasons.items(), key=lambda kv: -kv[1])),
        "tenants": {t: {"weight": weights.get(t, 1.0),
                        "fair_share": round(weights.get(t, 1.0) / total_weight, 4),
                        "dominant_share_mean": round(recorder.tenant_series.mean(t, until_s), 4),
                        "dominant_share_peak": round(recorder.tenant_series.peak(t), 4)} for t in tenants},
        "simulated_s": round(until_s, 3),
        "wall_s": round(replay.wall_s, 3),
        "tasks_per_wall_s": round(simulated_tasks / replay.wall_s, 1) if replay.wall_s > 0 else 0.0,
        "series": series.thinned(),
        "tenant_series": recorder.tenant_series.thinned(),
    }

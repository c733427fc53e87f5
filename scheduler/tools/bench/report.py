"""What ``sched bench`` reports: the definitions its JSON carries, and the table for people."""

from __future__ import annotations

WINDOW = "first claim to last commit"
DEFINITIONS = {
    "placements_per_s": "tasks assigned / window_s; window_s = first claim (earliest lease) to last commit "
                        "(latest assigned_at), Redis TIME; from the workers' release if every claim was "
                        "committed before the bench first looked",
    "placements_per_s_from_start": "tasks assigned / (last commit - just before the worker processes were started), "
                                   "Redis TIME: process start-up and the first node load included",
    "us_per_placement": "1e6 / placements_per_s (wall time per placement, all workers together)",
    "worker_cpu_us_per_placement": "1e6 * worker_cpu_s / tasks assigned",
    "node_read_cpu_s": "CPU of reading every node once, before the worker processes start (they share that "
                       "copy); part of worker_cpu_s, a cost of starting that a longer run spreads thinner",
    "worker_loop_cpu_us_per_placement": "1e6 * (worker_cpu_s - node_read_cpu_s) / tasks assigned: the worker "
                                        "processes' own CPU per placement",
    "p50_ms/p99_ms": "task created to assigned_at (Redis TIME), nearest rank over assigned tasks",
    "commit_rejections": "placements refused by the Lua commit",
    "overcommits": "node resources over capacity, from the audit (must be 0)",
    "unplaced": "tasks still pending at the end (each with an explanation)",
    "spread_skew": "largest max-min tasks of a spread job per node, among nodes eligible and with room, "
                   "over spread jobs without preferences",
    "zone_spread_skew": "largest max-min tasks of a job per zone, among zones with an eligible node with room, "
                        "over jobs with a zone spread preference",
    "redis_bytes_per_task": "(used_memory after the run - before submitting) / tasks",
    "worker_cpu_s": "user+system CPU of the worker processes",
    "redis_cpu_s": "user+system CPU of redis-server while the workers ran (INFO cpu)",
    "stream": "the event stream at the end: its bound (0: none), entries kept, bytes (MEMORY USAGE)",
}

RATE_DEFINITIONS = {
    "offered_rate": "tasks/s the submitter is scheduled to submit (jobs of `replicas` tasks, evenly spaced)",
    "achieved_rate": "measured tasks / time from when the measured part was due to start to its last submission",
    "submit_lag_max_ms": "how far behind its schedule the submitter fell at worst (jobs go out once per tick, "
                         "so up to about one tick by design)",
    "tick_ms": "the submitter sends every job due by then in one call (submit_many) once per tick",
    "placements_per_s": "measured tasks assigned / (last assigned_at - first created) over them",
    "p50_ms/p99_ms/max_ms": "task created to assigned_at (Redis TIME), nearest rank, over measured tasks assigned",
    "backlog_max": "largest active-queue length seen (polled every 0.2 s)",
    "drained": "the queue emptied within the drain timeout after the last submission",
    "never_attempted": "tasks still pending that no worker had tried yet (only when not drained)",
    "unplaced": "tasks pending after an attempt (with an explanation)",
    "worker_cpu_s": "user+system CPU of the worker processes",
    "redis_cpu_s": "user+system CPU of redis-server during the run (INFO cpu)",
}


SUMMARY = {
    "batch": ("tasks", "assigned", "unplaced", "placements_per_s", "placements_per_s_from_start", "us_per_placement",
              "window_s", "p50_ms", "p99_ms", "commit_rejections", "overcommits", "invariants_ok", "spread_skew", "zone_spread_skew",
              "redis_bytes_per_task", "worker_cpu_s", "worker_cpu_us_per_placement", "node_read_cpu_s",
              "worker_loop_cpu_us_per_placement", "redis_cpu_s", "startup_s",
              "elapsed_s", "register_s", "submit_s"),
    "rate": ("offered_rate", "achieved_rate", "submit_lag_max_ms", "placements_per_s", "p50_ms", "p99_ms", "max_ms",
             "tasks", "assigned", "unplaced", "never_attempted", "backlog_max", "drained", "drain_s",
             "commit_rejections", "overcommits",
             "invariants_ok", "redis_bytes_per_task", "worker_cpu_s", "redis_cpu_s"),
}


def print_report(report: dict) -> None:
    """The report for people: a table (the JSON has everything)."""
    from scheduler.tools.render import print_table

    mode = report["mode"]
    scenario = ", ".join(f"{k}={v}" for k, v in report["scenario"].items() if not isinstance(v, (dict, list)))
    if mode == "sweep":
        columns = ["NODES", "TASKS", "UNPLACED", "PLACEMENTS/S", "US/PLACEMENT", "VS FIRST", "CPU US/PLACEMENT",
                   "OK"]
        rows = [[p["nodes"], p["tasks"], p["unplaced"], p["placements_per_s"], p["us_per_placement"], p["vs_first"],
                 p["worker_cpu_us_per_placement"], "yes" if p["invariants_ok"] and not p["overcommits"] else "NO"]
                for p in report["points"]]
        print(f"sched bench --sweep: {scenario}")
        print_table(columns, rows)
        problems = [problem for p in report["points"] for problem in p["problems"]]
    else:
        names = SUMMARY["rate" if mode == "rate" else "batch"]
        print(f"sched bench ({mode}): {scenario}")
        print_table(["MEASURE", "VALUE"], [[name, report.get(name)] for name in names])
        problems = report["problems"]
    for problem in problems:
        print(f"problem: {problem}")

"""Measure sched capacity (docs/benchmarks-history.md, "Capacity"):

1. ``speed``: a capacity answer on N nodes (1,000) holding T live tasks (10,000), with a
   few hundred tasks pending and three pools, on a private redis-server; the answer's
   wall time, best and median of a few runs.
2. ``agreement``: a generated batch trace replayed to its last event, then the
   scale-down's count of nodes that stay, against ``sched simulate --compact``'s
   ``nodes_needed`` on the same trace.

    .venv/bin/python scripts/capacity_bench.py speed --nodes 1000 --tasks 10000
    .venv/bin/python scripts/capacity_bench.py agreement --tasks 2000 --nodes 60 --seed 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from scheduler.client import Client
from scheduler.control.capacity import CapacityOptions, answer
from scheduler.model import make_node
from scheduler.model.pools import make_pool
from scheduler.state.app import App
from scheduler.tools.simulate import private_redis


def speed(args) -> dict:
    with private_redis() as url:
        app = App(redis_url=url, namespace="bench")
        api = Client(app=app)
        app.store.put_new_nodes([make_node(f"n{i}", cpu=16, memory="64GiB", labels={"zone": f"z{i % 4}"})
                                 for i in range(args.nodes)])
        per_job = 10
        jobs = [({"id": f"j{i}", "type": "service", "replicas": per_job,
                  "resources": {"cpu": [0.25, 0.5, 1, 2][i % 4], "memory": ["512MiB", "1GiB", "2GiB", "4GiB"][i % 4]}})
                for i in range(args.tasks // per_job)]
        for spec in jobs:
            api.submit(spec)
        started = time.perf_counter()
        api.run_workers(until_idle=True)
        placed_s = time.perf_counter() - started
        api.submit({"id": "gpu-work", "replicas": args.pending, "resources": {"cpu": 2, "memory": "8GiB", "gpu": 1}})
        for pool in (make_pool("std", cpu=16, memory="64GiB", cost=1.0),
                     make_pool("big", cpu=64, memory="256GiB", cost=3.5),
                     make_pool("gpu", cpu=16, memory="64GiB", gpu=4, cost=6.0)):
            app.store.put_pool(pool)
        times, result = [], None
        for _ in range(args.runs):
            started = time.perf_counter()
            result = answer(app.store, CapacityOptions(threshold=args.threshold))
            times.append(time.perf_counter() - started)
        app.store.clear_namespace()
        return {"nodes": args.nodes, "live": result["live"], "pending": result["pending"], "place_s": round(placed_s, 1),
                "answer_best_s": round(min(times), 3), "answer_median_s": round(statistics.median(times), 3),
                "add": [(a["pool"], a["nodes"]) for a in result["scale_up"]["add"]],
                "removable": result["scale_down"]["nodes"], "candidates": result["scale_down"]["candidates"]}


def agreement(args) -> dict:
    from scheduler.tools.simulate import Simulator
    from scheduler.tools.simulate.compact import compact
    from scheduler.tools.simulate.capacity import capacity_after
    from scheduler.tools.simulate.generate import generate
    from scheduler.tools.simulate.replay import Settings
    from scheduler.tools.simulate.trace import TraceBuilder

    builder = TraceBuilder("generated")
    for number, record in enumerate(generate("batch", args.tasks, args.nodes, args.seed), 1):
        builder.add(record, number)
    trace = builder.build("generated batch trace")
    started = time.perf_counter()
    with private_redis() as url:
        found = compact(Simulator(url).replay, trace, Settings(), args.max_wait)
    compact_s = time.perf_counter() - started
    started = time.perf_counter()
    result = capacity_after(trace, [], CapacityOptions(threshold=args.threshold, scale_up=False))
    capacity_s = time.perf_counter() - started
    stay = result["nodes"] - result["scale_down"]["nodes"]
    needed = found["nodes_needed"]
    return {"tasks": args.tasks, "nodes": args.nodes, "seed": args.seed, "threshold": args.threshold,
            "nodes_needed": needed, "lower_bound": found["lower_bound"], "capacity_nodes_kept": stay,
            "removable": result["scale_down"]["nodes"], "live_at_end": result["live"],
            "pending_at_end": result["pending"], "simulated_s": result["simulated_s"],
            "difference": round((stay - needed) / needed, 4) if needed else None,
            "compact_s": round(compact_s, 1), "capacity_s": round(capacity_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("speed")
    one.add_argument("--nodes", type=int, default=1000)
    one.add_argument("--tasks", type=int, default=10_000)
    one.add_argument("--pending", type=int, default=200)
    one.add_argument("--runs", type=int, default=3)
    one.add_argument("--threshold", type=float, default=0.5)
    two = sub.add_parser("agreement")
    two.add_argument("--tasks", type=int, default=2000)
    two.add_argument("--nodes", type=int, default=60)
    two.add_argument("--seed", type=int, default=1)
    two.add_argument("--max-wait", type=float, default=60.0)
    two.add_argument("--threshold", type=float, default=1.0)
    args = parser.parse_args()
    print(json.dumps(speed(args) if args.what == "speed" else agreement(args)))


if __name__ == "__main__":
    main()

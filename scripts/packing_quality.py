"""How close ``sched simulate --compact`` comes to the exact optimum on static traces.

For each shape and seed of ``tests/static_traces.py``: the fewest nodes with which every
task places, as compaction finds it (the scheduler worker's own placement, every task at
time 0, no waiting) for binpack and spread, beside CP-SAT's optimum for the same question
(the inventory's nodes taken in turn) and for any nodes of the inventory. Prints one JSON
line per trace and a summary line. Needs OR-tools (the ``test`` extra):

    .venv/bin/python scripts/packing_quality.py [TASKS ...]    # default: 60 120 250
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from static_traces import SHAPES, optimum, static_trace  # noqa: E402

from scheduler.tools.simulate import Settings, Simulator, private_redis  # noqa: E402
from scheduler.tools.simulate.compact import compact  # noqa: E402
from scheduler.tools.simulate.trace import read_jsonl  # noqa: E402

SEEDS = (1, 2, 3)


def main(sizes: list[int]) -> None:
    ratios: dict[str, list[float]] = {"binpack": [], "spread": []}
    with private_redis() as url:
        simulator = Simulator(url)
        for tasks in sizes:
            for shape in SHAPES:
                for seed in SEEDS:
                    events = static_trace(shape, seed, tasks)
                    trace = read_jsonl(io.StringIO("\n".join(json.dumps(e) for e in events)), f"{shape}-{seed}")
                    best = optimum(trace)
                    anywhere = optimum(trace, prefix=False)
                    row = {"shape": shape, "seed": seed, "tasks": tasks, "optimum": best["nodes"],
                           "proven": best["proven"], "optimum_any_nodes": anywhere["nodes"],
                           "any_proven": anywhere["proven"], "solve_s": round(best["wall_s"] + anywhere["wall_s"], 1)}
                    for strategy in ("binpack", "spread"):
                        started = time.perf_counter()
                        found = compact(simulator.replay, trace, Settings(strategy=strategy), max_wait_s=0)
                        row[strategy] = found["nodes_needed"]
                        row[f"{strategy}_s"] = round(time.perf_counter() - started, 1)
                        ratios[strategy].append(found["nodes_needed"] / best["nodes"] - 1)
                    print(json.dumps(row), flush=True)
    print(json.dumps({strategy: {"median_pct": round(100 * statistics.median(r), 1),
                                 "max_pct": round(100 * max(r), 1), "traces": len(r),
                                 "at_optimum": sum(1 for x in r if x == 0)} for strategy, r in ratios.items()}))


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [60, 120, 250])

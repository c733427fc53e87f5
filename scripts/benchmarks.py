"""Re-run the figures of docs/benchmarks.md and write its table of today's figures.

    .venv/bin/python scripts/benchmarks.py                 # every figure, 3 runs each
    .venv/bin/python scripts/benchmarks.py --runs 5 --only default,rules
    .venv/bin/python scripts/benchmarks.py --write docs/benchmarks.md

Each figure is a command a user can type (shown beside it in the table), run ``--runs``
times, one after another; a figure's value is the median of its runs, with their range.
Everything runs on this checkout's ``.venv`` and starts its own ``redis-server`` (as
``sched bench`` and ``sched simulate`` do), so nothing else on the machine is touched.
``--write FILE`` replaces the part of FILE between the markers ``<!-- figures:start -->``
and ``<!-- figures:end -->`` with the table, headed by the commit, the date and the
machine; without it the table is printed. ``--json`` prints every run's numbers instead.
Figures marked long (the simulator's day on 10,000 nodes) run with ``--long`` only.
``--resume LOG`` takes the runs an earlier call printed to its standard error (saved in
LOG) and runs only what it did not finish.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv" / "bin"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


@dataclass
class Figure:
    """One row: what it measures, the command shown, how to run it once, and how to read
    the numbers of one run (name -> value) from what the run printed."""

    name: str
    what: str
    shown: str
    argv: Callable[[Path], list[str]]
    read: Callable[[dict], dict[str, float]]
    columns: list[tuple[str, str]]  # (number's name, how the table says it)
    setup: Callable[[Path], None] | None = None
    long: bool = False
    wall: bool = False  # the run's wall time is one of its numbers (``wall_s``)
    most_runs: int | None = None  # a long figure runs at most this many times
    runs: list[dict[str, float]] = field(default_factory=list)


def sched(*words: str) -> list[str]:
    return [str(VENV / "sched"), *words]


def python(script: str, *words: str) -> list[str]:
    return [str(VENV / "python"), str(ROOT / "scripts" / script), *words]


def _bench(report: dict) -> dict[str, float]:
    return {"placements_per_s": report["placements_per_s"],
            "redis_us": report["redis_cpu_us_per_placement"],
            "worker_us": report["worker_loop_cpu_us_per_placement"]}


def _rules(report: dict) -> dict[str, float]:
    plain = report["plain"]
    return {"placements_per_s": report["placements_per_s"], "plain_per_s": plain["placements_per_s"],
            "rules_to_plain": report["rules_to_plain"],
            "redis_ratio": report["redis_cpu_us_per_placement"] / plain["redis_cpu_us_per_placement"]}


def _rate(report: dict) -> dict[str, float]:
    return {"achieved": report["placements_per_s"], "p50_ms": report["p50_ms"], "p99_ms": report["p99_ms"]}


def _replay(report: dict) -> dict[str, float]:
    return {"tasks_per_wall_s": report["tasks_per_wall_s"], "wall_s": report["wall_s"]}


def _api(report: dict) -> dict[str, float]:
    return {"per_s": report["per_s"], "p50_ms": report["p50_ms"], "p99_ms": report["p99_ms"],
            "failures": report["failures"], "missing": report["missing"]}


def _rebalance(report: dict) -> dict[str, float]:
    return {"moves": report["moves_done"], "skew_after": max(report["skew_after"].values()),
            "over_budget": report["samples_over_budget"], "seconds": report["seconds"]}


def _packing(report: dict) -> dict[str, float]:
    binpack, spread = report["binpack"], report["spread"]
    return {"at_optimum": binpack["at_optimum"], "traces": binpack["traces"], "median_pct": binpack["median_pct"],
            "max_pct": binpack["max_pct"], "spread_at_optimum": spread["at_optimum"]}


def _strategies(report: dict) -> dict[str, float]:
    binpack, spread = report["runs"]
    return {"binpack": binpack["nodes_needed"], "spread": spread["nodes_needed"],
            "lower_bound": binpack["lower_bound"],
            "over_bound_pct": round(100 * (binpack["nodes_needed"] / binpack["lower_bound"] - 1), 1)}


def _generate(kind: str, tasks: int, nodes: int, seed: int, name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        trace = folder / name
        if not trace.exists():
            with open(trace, "wb") as out:
                subprocess.run(sched("simulate", "generate", "--kind", kind, "--tasks", str(tasks), "--nodes",
                                     str(nodes), "--seed", str(seed)), stdout=out, check=True)
    return make


FIGURES = [
    Figure("default", "default: 5,000 nodes, 100 jobs x 100 tasks, 2 workers", "sched bench --json",
           lambda d: sched("bench", "--json"), _bench,
           [("placements_per_s", "placements/s"), ("redis_us", "Redis µs/placement"),
            ("worker_us", "worker µs/placement")]),
    Figure("distinct", "every task its own job (no batching)", "sched bench --distinct --json",
           lambda d: sched("bench", "--distinct", "--json"), _bench,
           [("placements_per_s", "placements/s"), ("redis_us", "Redis µs/placement")]),
    Figure("rules", "placement rules beside the plain default, in one run", "sched bench --rules --json",
           lambda d: sched("bench", "--rules", "--json"), _rules,
           [("placements_per_s", "placements/s with rules"), ("plain_per_s", "plain"),
            ("rules_to_plain", "rules_to_plain"), ("redis_ratio", "Redis per placement, rules / plain")]),
    Figure("rate1000", "steady 1,000 tasks/s, one-task jobs", "sched bench --rate 1000 --json",
           lambda d: sched("bench", "--rate", "1000", "--json"), _rate,
           [("achieved", "achieved/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms")]),
    Figure("rate5000", "steady 5,000 tasks/s, one-task jobs", "sched bench --rate 5000 --duration 8 --json",
           lambda d: sched("bench", "--rate", "5000", "--duration", "8", "--json"), _rate,
           [("achieved", "achieved/s"), ("p99_ms", "p99 ms")]),
    Figure("swarmkit", "SwarmKit's benchmark shape: 1,000 nodes, 10,000 one-task jobs, from the command's start",
           "python scripts/one_task_services.py",
           lambda d: python("one_task_services.py"), lambda r: {"placements_per_s": r["placements_per_s"]},
           [("placements_per_s", "placements/s")]),
    Figure("replay20k", "simulator: a 20,000-task batch trace on 200 nodes",
           "sched simulate generate --kind batch --tasks 20000 --nodes 200 --seed 1 > b20k.jsonl; "
           "sched simulate b20k.jsonl --json",
           lambda d: sched("simulate", str(d / "b20k.jsonl"), "--json"), _replay,
           [("tasks_per_wall_s", "tasks/wall s"), ("wall_s", "wall s")],
           setup=_generate("batch", 20000, 200, 1, "b20k.jsonl")),
    Figure("compact20k", "simulator: the fewest nodes for that trace (--compact)",
           "sched simulate b20k.jsonl --compact --json",
           lambda d: sched("simulate", str(d / "b20k.jsonl"), "--compact", "--json"),
           lambda r: {"nodes_needed": r["nodes_needed"], "lower_bound": r["lower_bound"]},
           [("nodes_needed", "nodes needed"), ("lower_bound", "lower bound"), ("wall_s", "wall s")],
           setup=_generate("batch", 20000, 200, 1, "b20k.jsonl"), wall=True, most_runs=1),
    Figure("packing_static", "binpack against CP-SAT's exact optimum on 45 static traces (60-250 tasks)",
           "python scripts/packing_quality.py", lambda d: python("packing_quality.py"), _packing,
           [("at_optimum", "traces at the optimum"), ("traces", "of"), ("median_pct", "median % over"),
            ("max_pct", "most % over"), ("spread_at_optimum", "spread at the optimum")], most_runs=1),
    *(Figure(f"compact_{kind}_{wait}", f"fewest nodes against the lower bound: a 5,000-task {kind} trace on 100 "
             f"nodes, waits up to {wait} s", f"sched simulate generate --kind {kind} --tasks 5000 --nodes 100 "
             f"--seed {seed} > {kind}.jsonl; sched simulate {kind}.jsonl --strategy binpack --compare "
             f"strategy=spread --compact --max-wait {wait} --json",
             lambda d, kind=kind, wait=wait: sched("simulate", str(d / f"{kind}.jsonl"), "--strategy", "binpack",
                                                  "--compare", "strategy=spread", "--compact", "--max-wait",
                                                  str(wait), "--json"),
             _strategies, [("binpack", "binpack"), ("spread", "spread"), ("lower_bound", "lower bound"),
                           ("over_bound_pct", "binpack % over the bound")],
             setup=_generate(kind, 5000, 100, seed, f"{kind}.jsonl"), most_runs=1)
      for kind, seed in (("batch", 11), ("service", 12)) for wait in (0, 60)),
    Figure("day10k", "simulator: a day of 850,000 tasks on 10,000 nodes",
           "sched simulate generate --kind batch --tasks 850000 --nodes 10000 --seed 5 --span 86400 > day.jsonl; "
           "sched simulate day.jsonl --json",
           lambda d: sched("simulate", str(d / "day.jsonl"), "--json"), _replay,
           [("tasks_per_wall_s", "tasks/wall s"), ("wall_s", "wall s")],
           setup=_generate("batch", 850000, 10000, 5, "day.jsonl"), long=True, most_runs=1),
    Figure("api50", "HTTP API: 50 clients with no wait (GET a job, GET a page of jobs, POST a job, GET nodes)",
           "python scripts/api_load.py --workers 2 --json",
           lambda d: python("api_load.py", "--workers", "2", "--json"), _api,
           [("per_s", "requests/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("failures", "failures"),
            ("missing", "acknowledged jobs missing")]),
    Figure("rebalance12", "rebalance: 12 nodes, 3 new and empty, services crowded on the old ones, under budgets",
           "python scripts/rebalance_bench.py measure --json",
           lambda d: python("rebalance_bench.py", "measure", "--json"), _rebalance,
           [("moves", "moves"), ("skew_after", "largest skew after"), ("over_budget", "samples over a budget"),
            ("seconds", "seconds to the last move")]),
    Figure("rebalance_plan", "rebalance plan (--dry-run) on 1,000 nodes and 10,000 tasks",
           "python scripts/rebalance_bench.py plan --repeat 3 --json",
           lambda d: python("rebalance_bench.py", "plan", "--repeat", "3", "--json"),
           lambda r: {"plan_s": r["plan_s"]["median"], "moves": r["moves"]},
           [("plan_s", "seconds"), ("moves", "moves")]),
    Figure("capacity", "capacity answer on 1,000 nodes and 10,000 tasks, 200 pending, 3 pools",
           "python scripts/capacity_bench.py speed --runs 3",
           lambda d: python("capacity_bench.py", "speed", "--runs", "3"),
           lambda r: {"answer_s": r["answer_median_s"]}, [("answer_s", "seconds")]),
    Figure("capacity_compact", "capacity scale-down at the end of a 2,000-task batch trace, against --compact",
           "python scripts/capacity_bench.py agreement",
           lambda d: python("capacity_bench.py", "agreement"),
           lambda r: {"kept": r["capacity_nodes_kept"], "needed": r["nodes_needed"],
                      "difference": 100 * r["difference"], "compact_s": r["compact_s"]},
           [("kept", "nodes kept by capacity"), ("needed", "nodes needed by --compact"),
            ("difference", "difference %"), ("compact_s", "--compact seconds")], most_runs=1),
]


def run_once(figure: Figure, folder: Path) -> dict[str, float]:
    started = time.monotonic()
    done = subprocess.run(figure.argv(folder), capture_output=True, text=True, cwd=folder)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"benchmarks: {figure.name} failed (exit {done.returncode}): "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    try:
        printed = json.loads(done.stdout)
    except json.JSONDecodeError:  # a script that prints lines before its JSON line
        printed = json.loads(done.stdout.strip().splitlines()[-1])
    numbers = figure.read(printed)
    return {**numbers, "wall_s": round(wall, 1)} if figure.wall else numbers


def cell(values: list[float]) -> str:
    """The median, and the range when there is more than one run."""
    def text(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}".rstrip("0").rstrip(".")
    middle = text(statistics.median(values))
    return middle if len(values) == 1 else f"**{middle}** ({text(min(values))}–{text(max(values))})"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    memory = next((int(line.split()[1]) // (1024 * 1024) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    version = next((w.split("=", 1)[1] for w in redis if w.startswith("v=")), "?")
    return (f"{os.cpu_count()} vCPUs ({cpu}), {memory} GiB; Python {platform.python_version()}, "
            f"redis-server {version}")


def table(figures: list[Figure], runs: int) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    lines = [f"Measured at {commit} on {date.today().isoformat()} by `scripts/benchmarks.py` "
             + (f"({runs} runs each unless a row says one run, one after another: the median, with the range), "
                if runs > 1 else "(one run each), ")
             + f"on {machine()}, load average {os.getloadavg()[0]:.1f} at the end.", "",
             "| figure | command | numbers |", "| --- | --- | --- |"]
    for figure in figures:
        numbers = "; ".join(f"{label} {cell([run[name] for run in figure.runs])}" for name, label in figure.columns
                            if all(run.get(name) is not None for run in figure.runs))
        once = " (one run)" if len(figure.runs) == 1 and runs > 1 else ""
        lines.append(f"| {figure.what}{once} | `{figure.shown}` | {numbers} |")
    return "\n".join(lines)


def logged(log: Path, figures: list[Figure]) -> None:
    """The runs a call printed to ``log`` (``benchmarks: NAME run I/N: {...}``), into ``figures``."""
    by_name = {figure.name: figure for figure in figures}
    for line in log.read_text().splitlines():
        head, _, numbers = line.partition(": {")
        words = head.split()
        if len(words) == 4 and words[0] == "benchmarks:" and words[2] == "run" and words[1] in by_name:
            by_name[words[1]].runs.append(ast.literal_eval("{" + numbers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="Comma-separated figure names: " +
                        ", ".join(f.name for f in FIGURES))
    parser.add_argument("--long", action="store_true", help="Also the figures marked long.")
    parser.add_argument("--write", type=Path, default=None, metavar="FILE")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--resume", type=Path, default=None, metavar="LOG",
                        help="Take the runs an earlier call printed to LOG (its standard error) and run the rest.")
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    unknown = wanted - {f.name for f in FIGURES}
    if unknown:
        parser.error(f"no figure named {', '.join(sorted(unknown))}")
    chosen = [f for f in FIGURES if (f.name in wanted if wanted else (args.long or not f.long))]
    if args.resume is not None:
        logged(args.resume, chosen)
    with tempfile.TemporaryDirectory(prefix="sched-benchmarks-") as scratch:
        folder = Path(scratch)
        for figure in chosen:
            runs = min(args.runs, figure.most_runs or args.runs)
            if len(figure.runs) >= runs:
                continue
            if figure.setup is not None:
                figure.setup(folder)
            for i in range(len(figure.runs), runs):
                figure.runs.append(run_once(figure, folder))
                print(f"benchmarks: {figure.name} run {i + 1}/{runs}: {figure.runs[-1]}", file=sys.stderr)
    if args.json:
        print(json.dumps({f.name: f.runs for f in chosen}, indent=2))
        return
    text = table(chosen, args.runs)
    if args.write is None:
        print(text)
        return
    document = args.write.read_text()
    if START not in document or END not in document:
        raise SystemExit(f"benchmarks: {args.write} has no {START} ... {END} markers")
    head, rest = document.split(START, 1)
    _, tail = rest.split(END, 1)
    args.write.write_text(f"{head}{START}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()

"""Endurance: does Redis memory level off under steady work?

One-task batch jobs (the command ``true``) are submitted at a steady rate and run by real
node agents (``sched agent``, through RQ on the same Redis) placed by one ``sched worker``,
for ``--minutes``; Redis ``used_memory`` is sampled every ``--every`` seconds. With
``--retention`` (where this version of sched has retention) finished jobs and ended tasks
are kept only that long, so retention turns over many times in the run. The event stream
is bounded to ``--stream`` entries in both cases, so that it is not what grows.

    .venv/bin/python scripts/endurance.py run --minutes 12 --rate 4 --retention 30s --out after.json
    .venv/bin/python scripts/endurance.py plot before.json after.json --png docs/img/endurance.png

``run`` prints and writes one JSON document: the settings, the machine, the samples
(seconds since start, used_memory, keys, jobs, completed tasks) and the slope of
used_memory over the last half of the run (least squares, bytes per minute). It uses only
the Python API that sched had before retention, so the same file measures an older
checkout (run it with that checkout's interpreter). ``plot`` draws the runs given (with
matplotlib) on one chart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

NAMESPACE = "endure"


def slope_per_minute(samples: list[dict], field: str = "used_memory") -> float:
    """Least-squares slope of ``field`` over the second half of the samples, per minute."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return 0.0
    xs = [s["t"] / 60 for s in half]
    ys = [s[field] for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args) -> dict:
    from scheduler.client import Client
    from scheduler.tools.bench.harness import redis_server

    bin_dir = Path(sys.executable).parent
    sched = str(bin_dir / "sched")
    with redis_server(args.url) as url:
        client = Client(url, NAMESPACE)
        store = client.app.store
        store.clear_namespace()
        client.keep_events(args.stream)
        retention = None
        if args.retention and hasattr(client, "set_config"):  # a sched with retention
            client.set_config(job_retention=args.retention, task_retention=args.retention)
            retention = args.retention
        env = dict(os.environ, SCHED_HOME=str(Path(args.home).resolve()))
        base = [sched, "--redis-url", url, "--namespace", NAMESPACE]
        procs = [subprocess.Popen([*base, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)]
        for i in range(args.agents):
            procs.append(subprocess.Popen([*base, "agent", f"a{i}", "--cpu", "8", "--memory", "16GiB",
                                           "--slots", str(args.slots)], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        completed = [0]
        stop = threading.Event()

        def count_completions() -> None:
            pubsub = client.app.client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(client.app.keys.events)
            while not stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message and '"state":"completed"' in message["data"]:
                    completed[0] += 1
            pubsub.close()

        counter = threading.Thread(target=count_completions, daemon=True)
        counter.start()
        redis = client.app.client
        samples: list[dict] = []
        submitted = 0
        started = time.monotonic()
        next_sample = started
        spec = {"type": "batch", "replicas": 1, "max_retries": 0, "run": {"command": ["true"]}}
        try:
            while True:
                now = time.monotonic()
                elapsed = now - started
                if elapsed >= args.minutes * 60:
                    break
                due = int(elapsed * args.rate)
                while submitted < due:
                    client.submit({**spec, "id": f"e{submitted}"})
                    submitted += 1
                if now >= next_sample:
                    info = redis.info("memory")
                    samples.append({"t": round(elapsed, 1), "used_memory": int(info["used_memory"]),
                                    "keys": int(redis.dbsize()), "jobs": int(redis.scard(client.app.keys.jobs)),
                                    "submitted": submitted, "completed": completed[0], "load": _load()})
                    next_sample += args.every
                time.sleep(min(0.05, max(0.0, started + (submitted + 1) / args.rate - time.monotonic())))
        finally:
            stop.set()
            for proc in procs:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            counter.join(timeout=5)
        minutes = samples[-1]["t"] / 60 if samples else 0
        result = {
            "label": args.label, "minutes": round(minutes, 2), "rate_per_s": args.rate, "agents": args.agents,
            "slots": args.slots, "retention": retention, "stream_maxlen": args.stream,
            "submitted": submitted, "completed": completed[0],
            "completed_per_min_last_half": _rate_last_half(samples),
            "slope_bytes_per_min_last_half": round(slope_per_minute(samples)),
            "used_memory_first": samples[0]["used_memory"] if samples else 0,
            "used_memory_last": samples[-1]["used_memory"] if samples else 0,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.platform()},
            "samples": samples,
        }
        store.clear_namespace()
        return result


def _rate_last_half(samples: list[dict]) -> float:
    half = samples[len(samples) // 2:]
    if len(half) < 2 or half[-1]["t"] == half[0]["t"]:
        return 0.0
    return round((half[-1]["completed"] - half[0]["completed"]) / ((half[-1]["t"] - half[0]["t"]) / 60), 1)


def plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for path in args.runs:
        doc = json.loads(Path(path).read_text())
        xs = [s["t"] / 60 for s in doc["samples"]]
        ys = [s["used_memory"] / 2 ** 20 for s in doc["samples"]]
        label = f"{doc['label']}: last half {doc['slope_bytes_per_min_last_half'] / 1024:+.0f} KiB/min"
        ax.plot(xs, ys, label=label)
    ax.set_xlabel("minutes")
    ax.set_ylabel("Redis used_memory (MiB)")
    ax.set_title("One-task batch jobs at a steady rate through real agents")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png)
    print(args.png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the workload and sample Redis memory")
    r.add_argument("--url", default=None, help="a Redis to use (default: a private redis-server)")
    r.add_argument("--minutes", type=float, default=12.0)
    r.add_argument("--rate", type=float, default=4.0, help="jobs submitted per second")
    r.add_argument("--agents", type=int, default=2)
    r.add_argument("--slots", type=int, default=2)
    r.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    r.add_argument("--retention", default="30s", help="job and task retention, where sched has it")
    r.add_argument("--stream", type=int, default=5000, help="events kept in the stream")
    r.add_argument("--label", default="run")
    r.add_argument("--home", default=".endurance-home", help="SCHED_HOME for the agents' journals")
    r.add_argument("--out", required=True)
    p = sub.add_parser("plot", help="draw runs written by `run` on one chart")
    p.add_argument("runs", nargs="+")
    p.add_argument("--png", required=True)
    args = parser.parse_args()
    if args.command == "run":
        result = run(args)
        Path(args.out).write_text(json.dumps(result))
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    else:
        plot(args)


if __name__ == "__main__":
    main()

"""``--rate``: steady offered load. A submitter offers N tasks/s in ticks while the workers
run continuously; latency is measured over the tasks submitted after the warm-up."""

from __future__ import annotations

import time

from scheduler.control.reconcile import submit_many
from scheduler.model import ASSIGNED, PENDING, parse_job
from scheduler.state.app import App
from scheduler.tools.bench.harness import (DEFAULT_NAMESPACE, machine, prepare_namespace, read_stats, redis_info,
                                           redis_server, register_nodes, worker_processes)
from scheduler.tools.bench.progress import Progress
from scheduler.tools.bench.report import RATE_DEFINITIONS
from scheduler.tools.bench.results import _per, check_results, percentile, read_tasks
from scheduler.tools.bench.scenario import (DEFAULT_BATCH, DEFAULT_NODES, DEFAULT_SEED, DEFAULT_WORKERS, RACKS,
                                            ZONES, make_nodes, rate_specs)

RATE_TICK_S = 0.005  # --rate: the submitter sends what is due once per tick, in one call
STARTUP_GRACE_S = 0.5  # --rate: after the workers start, before offering load (their first upkeep)


def run_rate(rate: float, duration: float = 10.0, warmup: float = 2.0, nodes: int = DEFAULT_NODES,
             replicas: int = 1, workers: int = DEFAULT_WORKERS, batch_size: int = DEFAULT_BATCH,
             seed: int = DEFAULT_SEED, redis_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
             clear: bool = True, progress: bool = False, drain_timeout: float | None = None,
             percentage_of_nodes: int | None = None) -> dict:
    """Offer ``rate`` tasks/s (jobs of ``replicas`` tasks, at evenly spaced instants) for
    ``warmup`` + ``duration`` seconds while the workers run; latency over the tasks
    submitted after the warm-up."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        app = App(redis_url=url, namespace=namespace)
        try:
            return _run_rate(app, bar, rate, duration, warmup, nodes, replicas, workers, batch_size, seed, clear,
                             redis_url is None, drain_timeout, percentage_of_nodes)
        finally:
            app.close()


def _run_rate(app, bar, rate, duration, warmup, node_count, replicas, workers, batch_size, seed, clear, private,
              drain_timeout, percentage_of_nodes) -> dict:
    prepare_namespace(app, clear)
    nodes = make_nodes(node_count, seed)
    update = bar.phase(f"registering {len(nodes)} nodes", len(nodes))
    register_nodes(app, nodes, lambda count: update(advance=count))
    warm = [parse_job(raw) for raw in rate_specs(round(rate * warmup / replicas), replicas, seed, "w")]
    measured = [parse_job(raw) for raw in rate_specs(max(1, round(rate * duration / replicas)), replicas, seed, "r")]
    everything = warm + measured
    total = len(everything) * replicas
    info_before = redis_info(app)
    host = machine()
    interval = replicas / rate
    backlog_max = 0
    lag_max = 0.0
    update = bar.phase(f"offering {rate:g} tasks/s", total)

    def poll() -> dict[str, int]:
        nonlocal backlog_max
        counts = app.queue.counts()
        backlog_max = max(backlog_max, counts["active"])
        stats = read_stats(app)
        update(completed=stats.get("placed", 0),
               note=f"queued {counts['active']}  in flight {counts['inflight']}  "
                    f"commit rejections {stats.get('refused', 0)}")
        return counts

    with worker_processes(app.url, app.keys.namespace, workers, batch_size, until_idle=False, seed=seed,
                    percentage_of_nodes=percentage_of_nodes) as pool:
        pool.start()
        pool.wait_started()
        pool.release()
        time.sleep(STARTUP_GRACE_S)
        start = last_poll = time.perf_counter()
        measured_start = measured_end = None
        i = 0
        while i < len(everything):
            # One tick: every job due by now goes in one call (submit_many), so that the
            # submitter does not pay a round trip per job; then wait a tick, or until the next is due.
            now = time.perf_counter()
            if now - last_poll >= 0.2:
                last_poll = now
                poll()
            due = min(len(everything), int((now - start) / interval) + 1)
            if due > i:
                lag_max = max(lag_max, now - (start + i * interval))
                if i <= len(warm) < due:
                    measured_start = now
                submit_many(app.store, [(spec.id, spec) for spec in everything[i:due]])
                i = due
            if i < len(everything):
                wake = max(now + RATE_TICK_S, start + i * interval)
                time.sleep(max(0.0, min(wake - time.perf_counter(), 0.2)))
        measured_end = time.perf_counter()
        submitted_all = measured_end
        deadline = submitted_all + (drain_timeout if drain_timeout is not None else max(30.0, 5 * (warmup + duration)))
        while True:
            counts = poll()
            drained = counts["active"] == 0 and counts["backoff"] == 0 and counts["inflight"] == 0
            if drained or time.perf_counter() >= deadline:
                break
            time.sleep(0.05)
        drained_s = time.perf_counter() - submitted_all
        pool.stop()
        pool.join()
    info_end = redis_info(app)
    worker_cpu = pool.totals()[1]
    counters = read_stats(app)

    tasks = read_tasks(app, app.store.all_task_ids())
    checks = check_results(app, tasks, total, counters, pool, require_reasons=drained)
    measured_ids = {spec.id for spec in measured}
    mine = [t for t in tasks if t.job in measured_ids]
    assigned = [t for t in mine if t.state == ASSIGNED]
    latencies = sorted(t.assigned_ms - t.created_ms for t in assigned)
    window_ms = (max(t.assigned_ms for t in assigned) - min(t.created_ms for t in mine)
                 if assigned else 0)
    # From when the measured part was due to start (not when it did: a submitter running
    # late and catching up would seem faster than offered) to one interval after its last
    # submission (n submissions on schedule span n intervals).
    submit_s = measured_end + interval - (start + len(warm) * interval) if measured_start is not None else 0.0
    return {
        "mode": "rate",
        "scenario": {"nodes": node_count, "rate": rate, "duration_s": duration, "warmup_s": warmup,
                     "replicas": replicas, "workers": workers, "batch_size": batch_size, "seed": seed,
                     "percentage_of_nodes": percentage_of_nodes,
                     "tasks": total, "measured_tasks": len(measured) * replicas, "zones": ZONES, "racks": RACKS,
                     "redis": "private" if private else "given", "namespace": app.keys.namespace},
        "offered_rate": rate,
        "tick_ms": RATE_TICK_S * 1000,
        "achieved_rate": round(len(mine) / submit_s, 1) if submit_s > 0 else None,  # behind schedule: lower
        "submit_lag_max_ms": round(lag_max * 1000, 1),
        "placements_per_s": round(len(assigned) / (window_ms / 1000), 1) if window_ms > 0 else None,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1] if latencies else None,
        "latency": "created to assigned, over the tasks submitted after the warm-up"
                   + ("" if drained else "; queue not drained, so only the tasks assigned in time count"),
        "drained": drained,
        "never_attempted": sum(1 for t in tasks if t.state == PENDING and not t.explanation),
        "tasks": len(tasks),
        "assigned": sum(1 for t in tasks if t.state == ASSIGNED),
        "unplaced": sum(1 for t in tasks if t.state == PENDING and t.explanation),
        "backlog_max": backlog_max,
        "drain_s": round(drained_s, 3),
        "commit_rejections": counters.get("refused", 0),
        "overcommits": checks["overcommits"],
        "invariants_ok": checks["invariants_ok"],
        "problems": checks["problems"],
        "redis_bytes_per_task": _per(info_end["used_memory"] - info_before["used_memory"], len(tasks)),
        "worker_cpu_s": round(worker_cpu, 3),
        "redis_cpu_s": round(info_end["cpu_s"] - info_before["cpu_s"], 3),
        "workers": {**{name: counters.get(name, 0) for name in ("batches", "claimed", "placed", "refused")},
                    "reported": len(pool.reports)},
        "states": checks["states"],
        "machine": {**host, "loadavg_1m_after": machine()["loadavg_1m"]},
        "definitions": RATE_DEFINITIONS,
    }

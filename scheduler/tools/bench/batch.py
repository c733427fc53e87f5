"""The batch run: every job of the scenario submitted, then the workers started and run
until nothing is left that could be scheduled; measured and checked. The default scenario,
``--distinct``, ``--small``, ``--gang`` and ``--tenants`` are all this run.
"""

from __future__ import annotations

import dataclasses
import time

from scheduler.control.reconcile import submit
from scheduler.model import ASSIGNED, PENDING, JobSpec, Task, parse_job
from scheduler.state.app import App
from scheduler.tools.bench.harness import (DEFAULT_NAMESPACE, ClaimWatch, machine, prepare_namespace, read_stats,
                                           redis_info, redis_now_ms, redis_server, register_nodes, worker_processes)
from scheduler.tools.bench.progress import Progress
from scheduler.tools.bench.report import DEFINITIONS, WINDOW
from scheduler.tools.bench.results import (_per, _round, check_results, percentile, read_tasks, spread_skews,
                                           unplaced_summary)
from scheduler.tools.bench.scenario import Scenario, job_specs, make_nodes, requested_pct, tenant_weights


def run_batch(scenario: Scenario, redis_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
              clear: bool = True, progress: bool = False) -> dict:
    """One batch (or ``--distinct``) run; returns the JSON report."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        app = App(redis_url=url, namespace=namespace)
        try:
            return _run_batch(app, scenario, bar, clear, private=redis_url is None)
        finally:
            app.close()


def _run_batch(app: App, scenario: Scenario, bar: Progress, clear: bool, private: bool) -> dict:
    prepare_namespace(app, clear)
    if scenario.stream_maxlen is not None:
        app.store.stream.set_maxlen(scenario.stream_maxlen)
    nodes = make_nodes(scenario.nodes, scenario.seed, scenario.rules)
    specs = [parse_job(raw) for raw in job_specs(scenario)]

    info_empty = redis_info(app)
    started = time.perf_counter()
    update = bar.phase(f"registering {len(nodes)} nodes", len(nodes))
    register_nodes(app, nodes, lambda count: update(advance=count))
    register_s = time.perf_counter() - started
    info_nodes = redis_info(app)

    for tenant, weight in tenant_weights(scenario).items():
        app.store.set_tenant_weight(tenant, weight)
    started = time.perf_counter()
    update = bar.phase(f"submitting {len(specs)} jobs", scenario.tasks)
    for spec in specs:
        submit(app.store, spec)
        update(advance=spec.replicas)
    submit_s = time.perf_counter() - started
    info_submitted = redis_info(app)

    host = machine()
    update = bar.phase(f"placing ({scenario.workers} workers)", scenario.tasks)
    with worker_processes(app.url, app.keys.namespace, scenario.workers, scenario.batch_size, until_idle=True,
                    seed=scenario.seed, percentage_of_nodes=scenario.percentage_of_nodes,
                    fair_window=scenario.fair_window) as pool:
        launch_ms = redis_now_ms(app)  # placements_per_s_from_start counts from here
        pool.start()
        pool.wait_started()
        start_ms = redis_now_ms(app)
        watch = ClaimWatch(app, start_ms)
        pool.release()
        last_update = 0.0
        while pool.alive():
            first = watch.poll()
            now = time.monotonic()
            if now - last_update >= 0.1:
                last_update = now
                stats = read_stats(app)
                update(completed=stats.get("placed", 0), note=f"commit rejections {stats.get('refused', 0)}  "
                                                              f"failed attempts {stats.get('unplaced', 0)}")
            time.sleep(0.1 if first else 0.002)
        watch.poll()  # a run over before the first look
    end_ms = redis_now_ms(app)
    info_end = redis_info(app)
    worker_cpu = pool.totals()[1]
    counters = read_stats(app)
    update(completed=counters.get("placed", 0))

    tasks = read_tasks(app, app.store.all_task_ids())
    checks = check_results(app, tasks, scenario.tasks, counters, pool)
    assigned = [t for t in tasks if t.state == ASSIGNED]
    latencies = sorted(t.assigned_ms - t.created_ms for t in assigned)
    last_commit = max((t.assigned_ms for t in assigned), default=None)
    first_claim = watch.first_ms
    window_s = (last_commit - first_claim) / 1000 if assigned and first_claim is not None else None
    # With --distinct every job has one task: there is nothing to spread.
    spread, zone_spread = (None, None) if scenario.distinct else spread_skews(app.store.nodes(), specs, tasks)

    placements_per_s = len(assigned) / window_s if window_s else None
    from_start_s = (last_commit - launch_ms) / 1000 if last_commit is not None else None
    placements_per_s_from_start = len(assigned) / from_start_s if from_start_s else None
    return {
        "mode": "distinct" if scenario.distinct else "gang" if scenario.gang else "rules" if scenario.rules else "batch",
        "scenario": {**scenario.describe(), "requested_pct": requested_pct(nodes, specs),
                     "redis": "private" if private else "given", "namespace": app.keys.namespace},
        "tasks": len(tasks),
        "assigned": len(assigned),
        "unplaced": sum(1 for t in tasks if t.state == PENDING),
        "placements_per_s": _round(placements_per_s, 1),
        "placements_per_s_from_start": _round(placements_per_s_from_start, 1),
        "us_per_placement": _round(1e6 / placements_per_s if placements_per_s else None, 1),
        "window_s": _round(window_s, 3),
        "window": WINDOW,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "latency": "created to assigned; all tasks are submitted before the workers start, so mostly queueing",
        "commit_rejections": counters.get("refused", 0),
        "overcommits": checks["overcommits"],
        "invariants_ok": checks["invariants_ok"],
        "problems": checks["problems"],
        "spread_skew": spread,
        "zone_spread_skew": zone_spread,
        "redis_bytes_per_task": _per(info_end["used_memory"] - info_nodes["used_memory"], len(tasks)),
        "redis_bytes_per_task_pending": _per(info_submitted["used_memory"] - info_nodes["used_memory"], len(tasks)),
        "redis_bytes_per_node": _per(info_nodes["used_memory"] - info_empty["used_memory"], len(nodes)),
        "worker_cpu_s": round(worker_cpu, 3),
        "worker_cpu_us_per_placement": _round(1e6 * worker_cpu / len(assigned) if assigned else None, 1),
        "node_read_cpu_s": round(pool.read_cpu_s, 3),
        "worker_loop_cpu_us_per_placement": _round(1e6 * (worker_cpu - pool.read_cpu_s) / len(assigned)
                                                   if assigned else None, 1),
        "redis_cpu_s": round(info_end["cpu_s"] - info_submitted["cpu_s"], 3),
        "redis_cpu_us_per_placement": _round(1e6 * (info_end["cpu_s"] - info_submitted["cpu_s"]) / len(assigned)
                                             if assigned else None, 1),
        "stream": {"maxlen": app.store.stream.maxlen(), "entries": app.store.stream.length(),
                   "bytes": app.store.stream.memory()},
        "tenants": _tenant_summary(app, scenario, assigned, specs) if scenario.tenants else None,
        "startup_s": _round((first_claim - start_ms) / 1000 if first_claim else None, 3),
        "elapsed_s": round((end_ms - start_ms) / 1000, 3),
        "register_s": round(register_s, 3),
        "submit_s": round(submit_s, 3),
        "workers": {"batches": counters.get("batches", 0), "claimed": counters.get("claimed", 0),
                    "placed": counters.get("placed", 0), "refused": counters.get("refused", 0),
                    "unplaced_attempts": counters.get("unplaced", 0), "reported": len(pool.reports)},
        "states": checks["states"],
        "unplaced_examples": unplaced_summary(tasks),
        "machine": {**host, "loadavg_1m_after": machine()["loadavg_1m"]},
        "definitions": DEFINITIONS,
    }


def run_rules(scenario: Scenario, redis_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
              clear: bool = True, progress: bool = False) -> dict:
    """``--rules``: the scenario with placement rules, and the same without (the plain
    default) right after it, in one run: both reports, and the ratio of their placements/s."""
    ruled = run_batch(dataclasses.replace(scenario, rules=True), redis_url, namespace, clear, progress)
    # The same namespace again, emptied of what the first run left.
    plain = run_batch(dataclasses.replace(scenario, rules=False), redis_url, namespace, True, progress)
    ratio = (ruled["placements_per_s"] / plain["placements_per_s"]
             if ruled["placements_per_s"] and plain["placements_per_s"] else None)
    return {**ruled, "plain": plain, "rules_to_plain": _round(ratio, 3),
            "invariants_ok": ruled["invariants_ok"] and plain["invariants_ok"],
            "overcommits": ruled["overcommits"] + plain["overcommits"]}


def _tenant_summary(app: App, scenario: Scenario, assigned: list[Task], specs: list[JobSpec]) -> dict:
    """Per tenant: weight, tasks assigned, and its weighted dominant share at the end."""
    tenant_of = {spec.id: spec.tenant for spec in specs}
    usage = app.store.usage()
    capacity: dict[str, int] = {}
    for node in app.store.nodes():
        for resource, amount in node.capacity.items():
            capacity[resource] = capacity.get(resource, 0) + amount
    out = {}
    for tenant, weight in tenant_weights(scenario).items():
        share = max((usage.get(f"tenant:{tenant}:{r}", 0) / c for r, c in capacity.items() if c), default=0.0)
        out[tenant] = {"weight": weight, "assigned": sum(1 for t in assigned if tenant_of.get(t.job) == tenant),
                       "dominant_share": round(share, 4), "weighted_share": round(share / weight, 4)}
    return out

"""``--cells N``: the batch scenario in N namespaces at once, placed on different masters of
a Redis Cluster, each with its own workers; aggregate and per-cell placements/s, and CPU
per placement."""

from __future__ import annotations

import time

from scheduler.control.audit import audit
from scheduler.control.reconcile import submit
from scheduler.model import ASSIGNED, parse_job
from scheduler.state.app import App
from scheduler.tools.bench.harness import (ClaimWatch, machine, prepare_namespace, read_stats, redis_now_ms,
                                           redis_server, register_nodes, worker_processes)
from scheduler.tools.bench.progress import Progress
from scheduler.tools.bench.results import _round, read_tasks
from scheduler.tools.bench.scenario import Scenario, job_specs, make_nodes


def cell_namespaces(url: str, count: int) -> list[str]:
    """``count`` namespaces, on as many different masters as a cluster has (round-robin)."""
    probe = App(redis_url=url, namespace="bench-c0")
    by_owner: dict[str, list[str]] = {}
    for i in range(2000):
        ns = f"bench-c{i}"
        by_owner.setdefault(App(client=probe.client, namespace=ns).store.slot_owner(), []).append(ns)
        if len(by_owner) >= count and all(len(v) >= count for v in by_owner.values()):
            break
    owners = sorted(by_owner)
    return [by_owner[owners[i % len(owners)]][i // len(owners)] for i in range(count)]


def run_cells(scenario: Scenario, cells: int, redis_url: str | None = None, progress: bool = False) -> dict:
    """``cells`` namespaces at once, each with the scenario's nodes and jobs and its own
    ``scenario.workers`` worker processes, all released together; reports aggregate and
    per-cell placements/s, and CPU per placement (Redis, summed over masters; workers)."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        apps = [App(redis_url=url, namespace=ns) for ns in cell_namespaces(url, cells)]
        update = bar.phase(f"preparing {cells} cell(s)", cells)
        for app in apps:
            prepare_namespace(app, clear=True)
            register_nodes(app, make_nodes(scenario.nodes, scenario.seed))
            for raw in job_specs(scenario):
                submit(app.store, parse_job(raw))
            update(advance=1)
        info_before = apps[0].store.shards_usage()
        pools = [worker_processes(url, app.keys.namespace, scenario.workers, scenario.batch_size, until_idle=True,
                                  seed=scenario.seed, percentage_of_nodes=scenario.percentage_of_nodes) for app in apps]
        update = bar.phase(f"placing ({cells} cells x {scenario.workers} workers)", cells * scenario.tasks)
        for pool in pools:
            pool.start()
        for pool in pools:
            pool.wait_started()
        watches = [ClaimWatch(app, redis_now_ms(app)) for app in apps]
        for pool in pools:
            pool.release()
        while any(pool.alive() for pool in pools):
            for watch in watches:
                watch.poll()
            update(completed=sum(read_stats(app).get("placed", 0) for app in apps))
            time.sleep(0.05)
        for pool in pools:
            pool.join(timeout=30)
        info_after = apps[0].store.shards_usage()
        per_cell, firsts, lasts, assigned_total, ok = [], [], [], 0, True
        for app, watch in zip(apps, watches):
            watch.poll()
            tasks = read_tasks(app, app.store.all_task_ids())
            assigned = [t for t in tasks if t.state == ASSIGNED]
            last = max((t.assigned_ms for t in assigned), default=None)
            window = (last - watch.first_ms) / 1000 if assigned and watch.first_ms is not None else None
            report = audit(app.store)
            ok = ok and report.ok
            per_cell.append({"namespace": app.keys.namespace, "shard": app.store.slot_owner() or "single",
                             "assigned": len(assigned), "placements_per_s": _round(len(assigned) / window, 1)
                             if window else None, "invariants_ok": report.ok})
            assigned_total += len(assigned)
            if watch.first_ms is not None and last is not None:
                firsts.append(watch.first_ms)
                lasts.append(last)
        window_s = (max(lasts) - min(firsts)) / 1000 if firsts else None
        worker_cpu = sum(pool.totals()[1] for pool in pools)
        redis_cpu = info_after["cpu_s"] - info_before["cpu_s"]
        for app in apps:
            app.close()
    return {"mode": "cells", "cells": cells, "scenario": scenario.describe(), "machine": machine(),
            "masters": info_after.get("masters", 1), "assigned": assigned_total,
            "placements_per_s": _round(assigned_total / window_s, 1) if window_s else None,
            "per_cell": per_cell, "worker_cpu_s": _round(worker_cpu, 2), "redis_cpu_s": _round(redis_cpu, 2),
            "worker_cpu_ms_per_placement": _round(1000 * worker_cpu / assigned_total, 3) if assigned_total else None,
            "redis_cpu_ms_per_placement": _round(1000 * redis_cpu / assigned_total, 3) if assigned_total else None,
            "invariants_ok": ok, "overcommits": 0}

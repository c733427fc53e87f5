"""``sched bench``: the options of the benchmark; ``scheduler/tools/bench.py`` runs it."""

from __future__ import annotations

import click

from scheduler.model import SpecError
from scheduler.tools.cli.common import json_option
from scheduler.tools.render import print_json


@click.command()
@click.option("--nodes", type=click.IntRange(1, 1_000_000), default=5000, show_default=True,
              help="Static nodes to register, across 4 zones and 40 racks, mixed sizes.")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=100, show_default=True,
              help="Jobs to submit (a third zone-constrained, a third zone-spread, 1 in 20 bin-packed).")
@click.option("--replicas", type=click.IntRange(1, 1_000_000), default=None,
              help="Tasks per job.  [default: 100; 1 with --rate]")
@click.option("--workers", type=click.IntRange(1, 256), default=2, show_default=True,
              help="Worker processes.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Tasks a worker claims per batch.")
@click.option("--distinct", is_flag=True, help="Every task is its own job (no batching possible).")
@click.option("--small", is_flag=True,
              help="Tiny requests (cpu 0.05-0.2, memory 32-128 MiB; same constraints, spread and bin-packing), "
                   "so every task fits even on a small cluster.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed of the scenario (nodes, jobs, tie-breaks).")
@click.option("--percentage-of-nodes", type=click.IntRange(0, 100), default=None,
              help="The workers' --percentage-of-nodes (0 = kube's adaptive default; unset = score all nodes).")
@click.option("--redis-url", "bench_url", default=None, metavar="URL",
              help="Run against this Redis (also `sched --redis-url URL bench`; SCHED_REDIS_URL is ignored). "
                   "Default: a private redis-server in a temporary folder, stopped at the end.")
@click.option("--sweep", is_flag=True, help="Run the scenario at 1k, 5k, 20k and 100k nodes (same load per node) "
                                            "and report how the time per placement grows.")
@click.option("--sweep-nodes", default="1000,5000,20000,100000", show_default=True, metavar="N,N,...",
              help="Cluster sizes for --sweep.")
@click.option("--rate", type=click.FloatRange(min=1), default=None, metavar="TASKS_PER_S",
              help="Steady offered-load mode: submit this many tasks/s while the workers run; report p50/p99 "
                   "submit-to-assigned. The load is sent in ticks of 5 ms: each tick submits every job due "
                   "by then in one call.")
@click.option("--duration", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds of offered load measured with --rate.")
@click.option("--warmup", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds of offered load before the measured part, with --rate.")
@click.option("--gang", type=click.IntRange(0, 1_000_000), default=0, show_default=True, metavar="N",
              help="Jobs as gangs of N (each job's tasks split into gang: true jobs of N; the same tasks in all).")
@click.option("--tenants", type=click.IntRange(0, 1000), default=0, show_default=True, metavar="N",
              help="Jobs spread over N tenants t1..tN with weights 1..N (fair share between them).")
@click.option("--fair-window", type=click.IntRange(0, 1_000_000), default=None, metavar="N",
              help="The workers' fair-share window (0 = off).  [default: the workers' 2048]")
@click.option("--stream-maxlen", type=click.IntRange(min=0), default=None, metavar="N",
              help="The event stream's bound for the run (0: no stream, events go only to the channel).  "
                   "[default: the namespace's, 100000 unless set]")
@click.option("--rules", is_flag=True,
              help="Placement rules: one node in 10 tainted NoSchedule and one in 10 PreferNoSchedule; every job "
                   "labelled, a quarter each with a soft zone affinity, a hard spread over zones, one task per host "
                   "(anti-affinity with itself), or a toleration and a soft job affinity. The plain scenario runs "
                   "right after it: both are reported, with the ratio of their placements/s.")
@click.option("--cells", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Run N cells (namespaces, on different masters of a cluster) at once, each with the scenario "
                   "and its own --workers; report aggregate and per-cell placements/s.")
@json_option
@click.pass_context
def bench(ctx, nodes, jobs, replicas, workers, batch_size, distinct, small, seed, percentage_of_nodes, bench_url, sweep,
          sweep_nodes, rate, duration, warmup, gang, tenants, fair_window, stream_maxlen, rules, cells, as_json):
    """Measure scheduling throughput and latency on a synthetic cluster.

    \b
    Default scenario (fixed, seeded): 5,000 nodes (cpu 4/8/16/32, memory 8-64 GiB,
    4 zones, 40 racks); 100 jobs x 100 tasks (cpu 0.5-12, 1-3 GiB per core; a third
    constrained to a zone, a third spreading over zones, 1 in 20 bin-packed), all
    submitted before 2 worker processes start; they run until nothing is schedulable.
    Then the invariants are checked (exit 1 if any fails) and the results printed:
    placements_per_s (first claim to last commit; placements_per_s_from_start counts
    from the start of the worker processes), p50_ms/p99_ms (submit to assigned),
    commit_rejections, overcommits, unplaced, spread_skew, redis_bytes_per_task,
    worker_cpu_s, redis_cpu_s.

    Uses the namespace 'bench' (cleared first) unless one is given with the group's
    option, `sched -n NS bench`; that namespace must then be empty.
    """
    from scheduler.tools import bench as b

    group = ctx.parent
    url = bench_url
    if url is None and group.get_parameter_source("redis_url") == click.core.ParameterSource.COMMANDLINE:
        url = group.params["redis_url"]
    namespace = group.params.get("namespace") or b.DEFAULT_NAMESPACE
    clear = namespace == b.DEFAULT_NAMESPACE
    progress = not as_json
    if cells is not None:
        if sweep or rate is not None:
            raise SpecError("--cells cannot be combined with --sweep or --rate.")
        scenario = b.Scenario(nodes=nodes, jobs=jobs, replicas=replicas or b.DEFAULT_REPLICAS, workers=workers,
                              batch_size=batch_size, distinct=distinct, seed=seed,
                              percentage_of_nodes=percentage_of_nodes, gang=gang, tenants=tenants,
                              fair_window=fair_window, small=small)
        report = b.run_cells(scenario, cells, redis_url=url, progress=progress)
        print_json(report)
        ctx.exit(0 if report["invariants_ok"] else 1)
    if stream_maxlen is not None and (cells is not None or rate is not None):
        raise SpecError("--stream-maxlen applies to the batch scenario and --sweep, not to --cells or --rate.")
    if rules and (cells is not None or rate is not None or sweep):
        raise SpecError("--rules cannot be combined with --cells, --rate or --sweep.")
    if rate is not None:
        if sweep or distinct or gang or tenants or small:
            raise SpecError("--rate cannot be combined with --sweep, --distinct, --gang, --tenants or --small "
                            "(its requests are small already).")
        report = b.run_rate(rate, duration, warmup, nodes=nodes, replicas=replicas or 1, workers=workers,
                            batch_size=batch_size, seed=seed, redis_url=url, namespace=namespace, clear=clear,
                            progress=progress, percentage_of_nodes=percentage_of_nodes)
    else:
        scenario = b.Scenario(nodes=nodes, jobs=jobs, replicas=replicas or b.DEFAULT_REPLICAS, workers=workers,
                              batch_size=batch_size, distinct=distinct, seed=seed,
                              percentage_of_nodes=percentage_of_nodes, gang=gang, tenants=tenants,
                              fair_window=fair_window, small=small, stream_maxlen=stream_maxlen)
        if sweep:
            try:
                sizes = [int(part) for part in sweep_nodes.split(",") if part.strip()]
            except ValueError:
                raise SpecError(f"--sweep-nodes {sweep_nodes!r} must be numbers separated by commas.") from None
            if not sizes or min(sizes) < 1:
                raise SpecError("--sweep-nodes needs at least one positive node count.")
            report = b.run_sweep(scenario, sizes, redis_url=url, namespace=namespace, clear=clear,
                                 progress=progress)
        elif rules:
            report = b.run_rules(scenario, redis_url=url, namespace=namespace, clear=clear, progress=progress)
        else:
            report = b.run_batch(scenario, redis_url=url, namespace=namespace, clear=clear, progress=progress)
    if as_json:
        print_json(report)
    else:
        b.print_report(report)
    if not report["invariants_ok"] or report["overcommits"]:
        ctx.exit(1)

"""``sched worker``: run scheduler worker processes (claim, place, commit)."""

from __future__ import annotations

import sys

import click

from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.model import SpecError
from scheduler.tools import logs
from scheduler.tools.cli.common import json_option, pass_app, run_options
from scheduler.tools.render import print_json


@click.command()
@click.option("--concurrency", "-c", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker loops to run, each in its own process (placement is CPU-bound).")
@click.option("--batch-size", "-b", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Tasks claimed per batch; identical tasks in a batch are placed together.")
@click.option("--lease", "lease_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds a claim is held before other workers may take the tasks back.")
@click.option("--until-idle", is_flag=True, help="Exit once nothing is left that could be scheduled.")
@click.option("--percentage-of-nodes", type=click.IntRange(0, 100), default=None,
              help="Score only this share of nodes per task (0 = kube's adaptive default; unset = all).")
@click.option("--seed", type=int, default=None, help="Seed for tie-breaking, to replay a run.")
@click.option("--namespace", "-n", "cells_", multiple=True, metavar="NS",
              help="Serve this cell (namespace); repeat for several, served in turn, one batch each "
                   "(instead of the global -n).")
@click.option("--all-namespaces", "every", is_flag=True,
              help="Serve every cell of the registry sched:namespaces, and those created later.")
@click.option("--repair-on-start", is_flag=True,
              help="Make each cell's bookkeeping agree with its tasks before serving it (sched audit --repair); "
                   "for a restart after a failover, with no other worker running.")
@run_options
@json_option
@pass_app
def worker(app, concurrency, batch_size, lease_s, until_idle, percentage_of_nodes, seed, cells_, every,
           repair_on_start, metrics_port, log_level, log_format, as_json):
    """Run scheduler workers: claim pending tasks, place them, commit atomically.

    Run as many as you like, on as many machines as you like, against the same Redis:
    they coordinate only through it. SIGTERM (or Ctrl-C) lets each finish or hand back
    its current batch, then exits 0.
    """
    logs.configure(log_level, log_format)
    config = WorkerConfig(batch_size=batch_size, lease_ms=int(lease_s * 1000), until_idle=until_idle,
                          placement=PlacementOptions(percentage_of_nodes_to_score=percentage_of_nodes, seed=seed),
                          metrics_port=metrics_port, wait_replicas=app.app.wait_replicas,
                          repair_on_start=repair_on_start)
    if every and cells_:
        raise SpecError("give --namespace or --all-namespaces, not both.")
    totals = app.run_workers(concurrency, config=config,
                             namespaces=[] if every else (list(dict.fromkeys(cells_)) if cells_ else None))
    if as_json:
        print_json(totals)
    else:
        click.echo("workers stopped: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    if totals.get("crashed"):
        click.echo(f"Error: {totals['crashed']} worker process(es) exited abnormally.", err=True)
        sys.exit(1)

"""``sched demo``: a small live cluster, end to end (``scheduler/tools/demo.py`` runs it)."""

from __future__ import annotations

import os

import click

from scheduler.state.app import App


@click.command()
@click.option("--seconds", type=click.FloatRange(1, 3600), default=12.0, show_default=True,
              help="How long to watch the cluster run before the summary.")
@click.pass_context
def demo(ctx, seconds):
    """Run a small live cluster end to end: 4 agents, 2 workers, a mix of jobs.

    Uses the namespace 'demo' unless --namespace is given, and clears it first.
    Ctrl-C stops everything the demo started.
    """
    from scheduler.tools.demo import run_demo

    app = ctx.obj.app
    if ctx.parent.params.get("namespace") is None and "SCHED_NAMESPACE" not in os.environ:
        app = App(redis_url=app.redis_url, namespace="demo")
    ctx.exit(run_demo(app, seconds))

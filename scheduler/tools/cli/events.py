"""``sched events``: follow the events channel."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import pass_app


@click.command()
@click.option("--count", type=int, default=None, help="Stop after this many events.")
@pass_app
def events(app, count):
    """Follow the events channel: one JSON object per line (task and node changes)."""
    seen = 0
    with app.store.subscribe() as subscription:
        try:
            for line in subscription.lines():
                click.echo(line)
                seen += 1
                if count is not None and seen >= count:
                    break
        except KeyboardInterrupt:
            pass

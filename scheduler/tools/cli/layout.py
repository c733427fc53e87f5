"""``sched upgrade``: move a namespace's key layout forward in place."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import all_namespaces_option, cells, json_option, pass_app
from scheduler.tools.render import print_json


@click.command()
@all_namespaces_option
@json_option
@pass_app
def upgrade(app, every, as_json):
    """Bring the namespace's keys up to the layout this sched writes, in place.

    A namespace written by an older sched is refused writes until it is upgraded (the
    refusal says so). Stop the processes of the older version first; running it again
    does no harm.
    """
    records = [client.upgrade() for _, client in cells(app, every)]
    if as_json:
        return print_json(records if every else records[0])
    for r in records:
        if r["from"] == r["to"]:
            click.echo(f"namespace {r['namespace']}: key layout {r['to']} already")
            continue
        steps = "; ".join(f"layout {v}: " + ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in done.items())
                          for v, done in r["steps"].items())
        click.echo(f"namespace {r['namespace']}: key layout {r['from']} -> {r['to']}" + (f" ({steps})" if steps else ""))

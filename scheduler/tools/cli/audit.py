"""``sched audit``: check a namespace's invariants, and with ``--repair`` restore them."""

from __future__ import annotations

import sys

import click

from scheduler.tools.cli.common import all_namespaces_option, cells, json_option, pass_app
from scheduler.tools.render import print_json


@click.command()
@click.option("--repair", is_flag=True, help="Make the bookkeeping agree with the tasks (the truth), then check again.")
@all_namespaces_option
@json_option
@pass_app
def audit(app, repair, every, as_json):
    """Check the namespace's invariants: no node over capacity, allocations, task sets,
    tallies and free sets equal to what the tasks hold, every pending task in one queue.

    With --repair, rewrite what disagrees from the task hashes: a pending task in no queue
    is queued again, a live task on a node that is gone is marked lost and replaced. Run
    it with no worker placing (after a failover, before restarting the workers). Exits 1
    if problems remain."""
    from scheduler.control import audit as checks

    records = []
    for ns, client in cells(app, every):
        record = {"namespace": ns}
        if repair:
            done = checks.repair(client.store)
            record.update(repaired=done["problems"], requeued=done["requeued"], lost=done["lost"],
                          replacements=done["replacements"])
        report = checks.audit(client.store)
        record.update(ok=report.ok, tasks=report.tasks, overcommits=report.overcommits, problems=report.problems,
                      notes=report.notes)
        records.append(record)
    if as_json:
        print_json(records if every else records[0])
    else:
        for r in records:
            if r.get("repaired"):
                click.echo(f"{r['namespace']}: repaired {len(r['repaired'])} problem(s); requeued {r['requeued']}, "
                           f"lost {len(r['lost'])}")
            click.echo(f"{r['namespace']}: {'ok' if r['ok'] else 'PROBLEMS'} ({r['tasks']} tasks)")
            for problem in r["problems"]:
                click.echo(f"  {problem}")
            for note in r["notes"]:
                click.echo(f"  note: {note}")
    if not all(r["ok"] for r in records):
        sys.exit(1)

"""``sched queue``: how many tasks wait in each part of the scheduling queue."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import all_namespaces_option, cells, json_option, pass_app
from scheduler.tools.render import print_json, print_table


@click.group()
def queue():
    """Inspect the scheduling queue."""


@queue.command("ls")
@all_namespaces_option
@json_option
@pass_app
def queue_ls(app, every, as_json):
    """Count the tasks in each queue: active, backoff, unschedulable, inflight, and waiting
    (tasks of jobs whose `after` dependencies do not hold yet).

    With --all-namespaces, --json prints one record per namespace: {"namespace", and the
    same counts}."""
    if every:
        records = [{"namespace": ns, **client.queue_counts()} for ns, client in cells(app, True)]
        if as_json:
            return print_json(records)
        names = ["active", "backoff", "unschedulable", "inflight", "waiting"]
        return print_table(["NAMESPACE", *(n.upper() for n in names)], [[r["namespace"], *(r.get(n, 0) for n in names)]
                                                                         for r in records])
    counts = app.queue_counts()
    if as_json:
        return print_json(counts)
    keys = app.app.keys
    print_table(["QUEUE", "TASKS", "KEY"], [[name, count, getattr(keys, name)] for name, count in counts.items()])

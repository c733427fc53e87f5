"""``sched node drain``: move a node's tasks elsewhere as their jobs' disruption budgets
allow, and follow the drain until it is done (Nomad's ``node drain -enable``, which
monitors by default)."""

from __future__ import annotations

import click

from scheduler.client.drains import DEFAULT_DEADLINE
from scheduler.tools.cli import complete
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.control.schedule import iso
from scheduler.tools.render import print_json


def drain_line(record: dict) -> str:
    """One line of a drain in progress: what it did, what is left, what it waits for."""
    return (f"drain of {record['node']}: {record['stopped_count']} task(s) stopped, {record['left']} left; "
            f"{record['message']}")


def end_line(record: dict) -> str:
    if not record["state"]:
        return f"node {record['node']} has not been drained"
    if record["state"] == "complete":
        return f"node {record['node']} drained: {record['message']}"
    return f"drain of {record['node']} {record['state']}: {record['message']}"


@click.command("drain")
@click.argument("node_name", metavar="NAME", shell_complete=complete.node_names)
@click.option("--deadline", default=DEFAULT_DEADLINE, show_default=True, metavar="D",
              help="After D (such as 30m, 1h, or seconds), the tasks still on the node are stopped whatever their "
                   "budgets (Nomad's drain deadline).")
@click.option("--no-deadline", is_flag=True, help="Wait on the budgets however long it takes.")
@click.option("--force", is_flag=True, help="Stop every task at once, whatever the budgets.")
@click.option("--detach", is_flag=True, help="Return at once; the workers go on moving the tasks.")
@click.option("--monitor", is_flag=True, help="Follow the node's drain in progress, without changing it.")
@json_option
@pass_app
def drain(app, node_name, deadline, no_deadline, force, detach, monitor, as_json):
    """Stop placing tasks on a node and move its tasks elsewhere, as their jobs'
    disruption budgets allow.

    Tasks of jobs without a disruption_budget are stopped at once and replaced elsewhere.
    The others go one step at a time: the next task of a job stops once its budget allows
    it (its replacements running, and healthy where the job has a health check), moved
    by the scheduler workers. The drain is followed until it is done (Ctrl-C stops
    following; the drain goes on): each line says what it waits for, such as
    `drain of n3: 1 task(s) stopped, 2 left; waiting on job web's budget, 1 of 1
    unavailable`. Global jobs' tasks go last. `sched node activate NAME` cancels it.

    \b
    Examples:
      sched node drain n3                  # follow it until done
      sched node drain n3 --deadline 10m   # after 10 minutes, stop what is left
      sched node drain n3 --force          # everything at once, whatever the budgets
      sched node drain n3 --detach         # return at once; sched node show n3 says how it goes
    """
    if monitor:
        first = app.drain_status(node_name)
        if not as_json:
            click.echo(drain_line(first) if first["state"] == "draining" else end_line(first))
        return _follow(app, node_name, as_json, first)
    report = app.drain_report(node_name, deadline=None if no_deadline else deadline, force=force)
    if as_json and (detach or report["state"] != "draining"):
        return print_json(report)
    stopped, queued = len(report["stopped"]), len(report["replacements"])
    if report["state"] != "draining":
        if report["before"] == "drain" and not stopped:
            return None if as_json else click.echo(f"node {node_name} is already drained")
        return None if as_json else click.echo(f"node {node_name} drained: {stopped} task(s) stopped; "
                                               f"{queued} replacement(s) queued")
    if not as_json:
        deadline_words = f" (deadline {iso(report['deadline_at'])})" if report["deadline_at"] else ""
        click.echo(f"node {node_name} draining{deadline_words}: {stopped} task(s) stopped; {queued} replacement(s) "
                   f"queued; {report['message']}")
    if detach:
        return click.echo(f"the workers move the rest; follow it: sched node drain --monitor {node_name}")
    return _follow(app, node_name, as_json, report)


def _said(record: dict) -> tuple:
    return record["state"], record["message"], record["stopped_count"], record["left"]


def _follow(app, name: str, as_json: bool, first: dict | None) -> None:
    """Print the drain each time what it says changes (not what ``first`` said already)."""
    last = first
    try:
        for record in app.follow_drain(name):
            if first is not None and _said(record) == _said(first):
                continue
            last = record
            if not as_json:
                click.echo(drain_line(record) if record["state"] == "draining" else end_line(record))
    except KeyboardInterrupt:
        click.echo(f"stopped following; the drain goes on: sched node drain --monitor {name}", err=True)
        return None
    if as_json and last is not None:
        print_json(last)

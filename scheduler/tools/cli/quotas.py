"""``sched quota``: set, remove and list per-namespace quotas."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import in_namespace, json_option, pass_app, quantities
from scheduler.tools.render import history_text, print_json, print_table


@click.group()
def quota():
    """Per-namespace quotas: what the namespace's live tasks may hold at most."""


@quota.command("set")
@click.argument("namespace_name", metavar="NS")
@click.option("--cpu", default=None, help="cores, e.g. 100 or 500m")
@click.option("--memory", default=None, help="bytes, e.g. 200GiB")
@click.option("--tasks", type=int, default=None, help="live tasks")
@json_option
@pass_app
def quota_set(app, namespace_name, cpu, memory, tasks, as_json):
    """Set NS's quota; a task that would exceed it stays pending with the reason."""
    client = in_namespace(app, namespace_name)
    record = client.set_quota(cpu=cpu, memory=memory, tasks=tasks)
    if as_json:
        return print_json(record)
    click.echo(f"quota of {namespace_name}: {quantities(record['quota'])}")


@quota.command("rm")
@click.argument("namespace_name", metavar="NS")
@pass_app
def quota_rm(app, namespace_name):
    """Remove NS's quota."""
    removed = in_namespace(app, namespace_name).remove_quota()
    click.echo(f"quota of {namespace_name} {'removed' if removed else 'was not set'}")


@quota.command("ls")
@json_option
@pass_app
def quota_ls(app, as_json):
    """Every namespace with a quota: its limits and what its live tasks hold."""
    records = app.quotas()
    if as_json:
        return print_json(records)
    print_table(["NAMESPACE", "QUOTA", "USED"],
                [[r["namespace"], quantities(r["quota"]), quantities(r["used"])] for r in records])


@quota.command("history")
@click.argument("namespace_name", metavar="NS")
@json_option
@pass_app
def quota_history(app, namespace_name, as_json):
    """Who changed NS's quota and tenant weights, and when (oldest first)."""
    entries = in_namespace(app, namespace_name).audit_trail()
    if as_json:
        return print_json(entries)
    click.echo(history_text(entries))

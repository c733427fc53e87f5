"""``sched tenant``: tenants' weights and their dominant shares of the namespace's nodes."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import json_option, pass_app, quantities
from scheduler.tools.render import print_json, print_table


@click.group()
def tenant():
    """Tenants sharing the namespace's nodes by dominant resource fairness."""


@tenant.command("set")
@click.argument("name")
@click.option("--weight", type=float, required=True, help="share relative to other tenants (default 1)")
@json_option
@pass_app
def tenant_set(app, name, weight, as_json):
    """Set a tenant's weight: a tenant of weight 2 gets twice the dominant share of weight 1."""
    record = app.set_tenant(name, weight)
    if as_json:
        return print_json(record)
    click.echo(f"tenant {name}: weight {record['weight']:g}")


@tenant.command("ls")
@json_option
@pass_app
def tenant_ls(app, as_json):
    """Each tenant's weight, usage and dominant share."""
    records = app.tenants()
    if as_json:
        return print_json(records)
    print_table(["TENANT", "WEIGHT", "USED", "DOMINANT SHARE"],
                [[r["name"], f"{r['weight']:g}", quantities(r["used"]), f"{r['dominant_share']:.3f}"] for r in records])

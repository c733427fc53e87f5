"""``sched acl``: Redis ACL users confined to one namespace, each with a role
(docs/security.md): create, list, remove, and set again on every server. Run with the
admin's URL."""

from __future__ import annotations

import click

from scheduler.state.acl import ROLES
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table


@click.group()
def acl():
    """Redis users that reach one namespace only, with a role's commands."""


def _warnings(result: dict) -> None:
    for server, reason in result["missed"].items():
        click.echo(f"Warning: {server} did not answer ({reason}); run sched acl sync once it does.", err=True)
    if not result["persisted"]:
        click.echo("Warning: the server keeps its users only until it restarts (it has no ACL file or config "
                   "file to save them in); run sched acl sync after a restart.", err=True)


@acl.command("create")
@click.argument("name")
@click.option("--namespace", "namespace_name", required=True, metavar="NS", help="The one namespace it reaches.")
@click.option("--role", required=True, type=click.Choice(ROLES),
              help="viewer: reads; submitter: jobs; worker: sched worker; agent: sched agent.")
@json_option
@pass_app
def acl_create(app, name, namespace_name, role, as_json):
    """Create a Redis user NAME for one namespace and role, and print the URL to use.

    The URL holds the user's password, shown this once (generated, never stored: Redis
    keeps only its SHA-256). The user is set on every server (each master and replica of
    a cluster)."""
    result = app.create_user(name, namespace_name, role)
    if as_json:
        print_json(result)
    else:
        click.echo(f"Redis user {name} created: {role} of namespace {namespace_name}.")
        click.echo("Its URL, with a password shown only this once:")
        click.echo(result["url"])
    _warnings(result)


@acl.command("ls")
@json_option
@pass_app
def acl_ls(app, as_json):
    """List the users sched acl create made."""
    records = app.users()
    if as_json:
        return print_json(records)
    print_table(["NAME", "NAMESPACE", "ROLE", "ACTIVE"],
                [[r["name"], r["namespace"], r["role"], "yes" if r["active"] else "no"] for r in records])


@acl.command("rm")
@click.argument("name")
@pass_app
def acl_rm(app, name):
    """Remove a user sched acl create made (from every server)."""
    result = app.remove_user(name)
    click.echo(f"Redis user {name} removed")
    _warnings(result)


@acl.command("sync")
@pass_app
def acl_sync(app):
    """Set every user sched acl create made again, with its role's current commands, on
    every server: after a server restarted without an ACL file, a replica was added, or
    sched was upgraded."""
    results = app.sync_users()
    click.echo(f"{len(results)} user(s) set on every server")
    for result in results:
        _warnings(result)

"""``sched token``: the HTTP API's bearer tokens (create, list, revoke), each of one
namespace (or of every one) and one role (docs/http-api.md, Tokens). Run with the
admin's URL: tokens live outside every namespace (``sched:api:*``)."""

from __future__ import annotations

import re
from datetime import datetime

import click

from scheduler.model import SpecError
from scheduler.state.api_tokens import EVERY_NAMESPACE, ROLES, ApiTokens
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table

_TTL_RE = re.compile(r"([0-9]{1,9})([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> int:
    """``90s``, ``30m``, ``12h``, ``30d`` or a number of seconds."""
    found = _TTL_RE.fullmatch(text.strip())
    if not found or int(found.group(1)) == 0:
        raise SpecError(f"--ttl {text!r} is not a time to live such as 3600, 30m, 12h or 30d.")
    return int(found.group(1)) * _UNIT_S[found.group(2)]


@click.group()
def token():
    """Tokens for the HTTP API (sched api, and /v1/ of sched ui)."""


def _when(ms) -> str:
    return "never" if ms is None else datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


@token.command("create")
@click.argument("name")
@click.option("--namespace", "namespace_name", metavar="NS", default=None, help="The one namespace it reaches.")
@click.option("--all-namespaces", "-A", "every", is_flag=True,
              help="Reach every namespace (quotas need such a token).")
@click.option("--role", required=True, type=click.Choice(ROLES),
              help="viewer: reads; submitter: also jobs and deployments; operator: also nodes, tenants, quotas.")
@click.option("--ttl", default=None, metavar="DURATION", help="Expire after this long (3600, 30m, 12h, 30d). "
                                                              "Default: never (until revoked).")
@json_option
@pass_app
def token_create(app, name, namespace_name, every, role, ttl, as_json):
    """Make a token NAME and print it, as the last word of the output.

    The token is shown this once: only its SHA-256 is kept. Send it as
    'Authorization: Bearer TOKEN'; it reaches one namespace (or, with
    --all-namespaces, every one) with ROLE's rights.

    \b
    TOKEN=$(sched token create ci --namespace team-a --role submitter | tail -n 1)
    """
    if every == (namespace_name is not None):
        raise SpecError("give --namespace NS or --all-namespaces (one of the two).")
    ttl_s = parse_ttl(ttl) if ttl is not None else None
    record = ApiTokens(app.app.client).create(name, EVERY_NAMESPACE if every else namespace_name, role, ttl_s)
    if as_json:
        return print_json(record)
    scope = "every namespace" if every else f"namespace {namespace_name}"
    click.echo(f"API token {name} created: {role} of {scope}, expires {_when(record['expires'])}.")
    click.echo("The token, shown only this once:")
    click.echo(record["token"])


@token.command("ls")
@json_option
@pass_app
def token_ls(app, as_json):
    """List tokens (never the tokens themselves, which are kept nowhere)."""
    records = ApiTokens(app.app.client).records()
    if as_json:
        return print_json(records)
    print_table(["NAME", "NAMESPACE", "ROLE", "CREATED", "EXPIRES"],
                [[r["name"], r["namespace"], r["role"], _when(r["created"]), _when(r["expires"])] for r in records])


@token.command("revoke")
@click.argument("name")
@pass_app
def token_revoke(app, name):
    """End a token now: requests carrying it are refused from the next one on."""
    ApiTokens(app.app.client).revoke(name)
    click.echo(f"API token {name} revoked")

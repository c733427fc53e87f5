"""``sched ui user add/rm/ls``: who may sign in to the dashboard, as a viewer (looks) or
an operator (also drains, pauses, activates, scales and stops). The password is asked
twice without echo, or read from stdin with ``--password-stdin``, and stored as a
salted scrypt hash (``passwords.py``)."""

from __future__ import annotations

import sys

import click

from scheduler.client import Client
from scheduler.model.errors import NotFound, SpecError
from scheduler.tools.render import print_json, print_table
from scheduler.tools.ui import passwords
from scheduler.tools.ui.auth import ROLES

pass_client = click.make_pass_decorator(Client)
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")


def _check_name(name: str) -> str:
    if not 1 <= len(name) <= 64 or not set(name) <= _NAME_CHARS:
        raise SpecError(f"user name {name!r} is not valid; use 1 to 64 letters, digits, '.', '_', '-' and '@'.")
    return name


@click.group("user")
def user():
    """Who may sign in to the dashboard (shared by every namespace of this Redis)."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), default="viewer", show_default=True,
              help="viewer: looks only; operator: also drains, pauses, activates, scales and stops.")
@click.option("--password-stdin", is_flag=True,
              help="Read the password from the first line of stdin (what happens anyway when stdin is no terminal).")
@pass_client
def user_add(client, name, role, password_stdin):
    """Add a dashboard user, or give an existing one a new password and role (which ends
    its sessions). From a terminal the password is asked twice without echo; otherwise
    (a pipe, a script) it is the first line of stdin."""
    _check_name(name)
    password = _password(name, password_stdin or not sys.stdin.isatty())
    hashed = passwords.hash_password(password)  # a SpecError (one sentence) if too short
    added = client.dashboard_users().put(name, role, hashed)
    click.echo(f"dashboard user {name} {'added' if added else 'updated (its sessions ended)'}: {role}")


def _password(name: str, from_stdin: bool) -> str:
    """The new password: the first line of stdin, or asked at the terminal."""
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            raise SpecError(f"no password came on stdin for dashboard user {name}; give it as the first line "
                            f"(printf '%s\\n' \"$PASSWORD\" | sched ui user add {name}).")
        return line.rstrip("\r\n")
    try:
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    except click.Abort:  # Ctrl-C or Ctrl-D at the prompt
        raise SpecError(f"no password was given, so dashboard user {name} was not added.") from None


@user.command("rm")
@click.argument("name")
@pass_client
def user_rm(client, name):
    """Remove a dashboard user (its sessions end at their next request)."""
    if not client.dashboard_users().remove(name):
        raise NotFound(f"dashboard user {name!r} does not exist.")
    click.echo(f"dashboard user {name} removed")


@user.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only, for scripts.")
@pass_client
def user_ls(client, as_json):
    """List the dashboard users and their roles."""
    records = [{"name": name, "role": record["role"], "created": record["created"]}
               for name, record in client.dashboard_users().all().items()]
    if as_json:
        return print_json(records)
    print_table(["NAME", "ROLE"], [[r["name"], r["role"]] for r in records])

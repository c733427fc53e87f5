"""``sched server``: the embedded Redis server's status, and stopping it."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import json_option
from scheduler.tools.render import print_json


@click.group()
def server():
    """The embedded Redis server: the one sched starts when no Redis URL is given."""


@server.command("status")
@json_option
def server_status(as_json):
    """Say whether the embedded server runs, and where (its socket and state folder)."""
    from scheduler.state.embedded import embedded_status

    status = embedded_status()
    if as_json:
        return print_json(status)
    if status["running"]:
        click.echo(f"embedded server running: {status['url']} (pid {status['pid']}, state in {status['directory']})")
    else:
        click.echo(f"embedded server not running (state in {status['directory']})")


@server.command("stop")
def server_stop():
    """Stop the embedded server; its data stays in its state folder for next time.

    It is started again by the next command that needs Redis."""
    from scheduler.state.embedded import state_dir, stop_embedded

    if stop_embedded():
        click.echo(f"embedded server stopped (state kept in {state_dir()})")
    else:
        click.echo("embedded server was not running")

"""``sched server``: the embedded Redis server's status, and stopping it."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.cli.config import memory_lines
from scheduler.tools.render import print_json


@click.group()
def server():
    """The embedded Redis server: the one sched starts when no Redis URL is given."""


@server.command("status")
@json_option
@pass_app
def server_status(app, as_json):
    """Say whether the embedded server runs, and where (its socket and state folder); and
    the memory of the Redis in use (with --redis-url, that one): used, maxmemory, and
    what a live task, a job and a node of the namespace take."""
    from scheduler.state.connection import resolve_url
    from scheduler.state.embedded import embedded_status

    status = embedded_status()
    memory = app.memory() if resolve_url(app.app.redis_url) or status["running"] else None
    if as_json:
        return print_json({**status, "memory": memory})
    if status["running"]:
        click.echo(f"embedded server running: {status['url']} (pid {status['pid']}, state in {status['directory']})")
    else:
        click.echo(f"embedded server not running (state in {status['directory']})")
    if memory is not None:
        for line in memory_lines(memory):
            click.echo(line)


@server.command("stop")
def server_stop():
    """Stop the embedded server; its data stays in its state folder for next time.

    It is started again by the next command that needs Redis."""
    from scheduler.state.embedded import state_dir, stop_embedded

    if stop_embedded():
        click.echo(f"embedded server stopped (state kept in {state_dir()})")
    else:
        click.echo("embedded server was not running")

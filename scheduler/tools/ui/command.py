"""``sched ui``: serve the live dashboard (register with ``main.add_command(ui)``)."""

from __future__ import annotations

import click

from scheduler.client import Client

pass_client = click.make_pass_decorator(Client)


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback exposes the controls to that network.")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True, help="Port to listen on.")
@pass_client
def ui(client, host, port):
    """Serve a live web dashboard: nodes, jobs, tasks and queues, updated as events arrive.

    Pages take ?ns=NAME to show another namespace of the same Redis. Drain, pause,
    activate, scale and stop are buttons; they refuse requests from other sites.
    """
    from scheduler.tools.ui.server import serve

    app = client.app

    app.store.ping()  # connect (or start the embedded Redis) first: a Redis that cannot be reached stops here
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"sched ui: http://{shown}:{port}/?ns={app.keys.namespace} (Redis {app.display_url}); "
               f"Ctrl-C stops it")
    serve(app, host, port)

"""What the command modules share: the connection, the ``--json`` and
``--all-namespaces`` options, the options of the long-running commands, and the
formatting of quantities.

The group ``main`` puts one ``Client`` in the click context; it connects to Redis (or
starts the embedded server) only when a command first uses it, so ``--help``, and a
command that rejects its input first, never touch Redis. ``pass_app`` hands that client
to a command.
"""

from __future__ import annotations

import click

from scheduler.client import Client
from scheduler.model.quantities import format_quantity
from scheduler.state.app import App
from scheduler.tools import logs


pass_app = click.make_pass_decorator(Client)


def in_namespace(app: Client, namespace: str) -> Client:
    """A client of another namespace on the same Redis connection."""
    return Client(app=App(client=app.app.client, namespace=namespace))


def cells(app, every: bool) -> list:
    """(namespace, Client) for the namespace given, or for every registered namespace."""
    if not every:
        return [(app.namespace, app)]
    return [(ns, in_namespace(app, ns)) for ns in sorted(app.store.namespaces())]


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON only, for scripts.")(f)


def all_namespaces_option(f):
    return click.option("--all-namespaces", "-A", "every", is_flag=True,
                        help="Every namespace (cell) of this Redis, each record with its namespace.")(f)


def run_options(f):
    """--metrics-port, --log-level and --log-format, shared by `worker` and `agent`."""
    options = [
        click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
                     help="Serve Prometheus metrics on PORT/metrics (all interfaces). With --concurrency N, "
                          "worker process i serves on PORT+i."),
        click.option("--log-level", type=click.Choice(logs.LEVELS), default="info", show_default=True,
                     help="Least severe log records shown (on stderr)."),
        click.option("--log-format", type=click.Choice(logs.FORMATS), default="text", show_default=True,
                     help="text, or json: one JSON object per line (time, level, logger, message, fields)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def quantities(values: dict) -> str:
    """Quantities as one cell of a table, e.g. ``cpu=4,memory=8Gi,tasks=10``, or ``-``."""
    return ",".join(f"{k}={v if k == 'tasks' else format_quantity(k, v)}" for k, v in sorted(values.items())) or "-"

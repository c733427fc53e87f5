"""``sched api``: serve the HTTP API (register with ``main.add_command(api)``)."""

from __future__ import annotations

import click

from scheduler.client import Client
from scheduler.model.errors import SpecError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command("api")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8710, show_default=True, help="Port to listen on.")
@click.option("--no-auth", is_flag=True, help="Take requests without a token (loopback only): anyone on this "
                                               "machine may then do anything.")
@click.option("--forwarded-allow-ips", default="", metavar="IPS",
              help="Believe X-Forwarded-For and X-Forwarded-Proto only from these proxies (addresses or networks, "
                   "comma-separated, or *); by default from none: the peer is the client.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Processes serving the API on one port, each with its own event loop and Redis connections "
                   "(about one per core).")
@click.pass_context
def api(ctx, host, port, no_auth, forwarded_allow_ips, workers):
    """Serve the HTTP API: everything sched does, under /v1/, for programs in any language.

    Every request carries a token (sched token create NAME --namespace NS --role ROLE),
    as 'Authorization: Bearer TOKEN', and may act in its namespace as its role allows.
    Errors are JSON problem documents (RFC 9457) with the CLI's sentence. The OpenAPI
    document is GET /v1/openapi.json; docs/http-api.md has curl examples. sched ui
    serves the same routes beside the dashboard.
    """
    from scheduler.tools.ui.server import check_forwarded_allow_ips
    from scheduler.tools.web import serve, serve_workers

    if forwarded_allow_ips:
        check_forwarded_allow_ips(forwarded_allow_ips)

    if no_auth and host not in LOOPBACK:
        raise SpecError(f"sched api will not serve {host} without tokens: anyone who can reach it could submit jobs "
                        f"and drain nodes; drop --no-auth and make tokens with sched token create.")
    from scheduler.state.connection import wait_for_redis

    app = ctx.find_object(Client).app
    wait_for_redis(app.url)  # a long-running server waits for a Redis that is not there yet (one line per retry)
    shown = f"[{host}]" if ":" in host else host
    how = "no tokens (loopback only)" if no_auth else "tokens required (sched token create)"
    many = f"; {workers} worker processes" if workers > 1 else ""
    click.echo(f"sched api: http://{shown}:{port}/v1/ (Redis {app.display_url}; namespace {app.keys.namespace} by "
               f"default; {how}{many}); Ctrl-C stops it")
    if workers > 1:
        serve_workers(app, host, port, workers, forwarded_allow_ips, api_auth=not no_auth, dashboard=False)
    else:
        serve(app, host, port, api_auth=not no_auth, dashboard=False, forwarded_allow_ips=forwarded_allow_ips)

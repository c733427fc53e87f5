"""``sched ui``: serve the live dashboard, and ``sched ui user``: who may sign in to it
(register with ``main.add_command(ui)``)."""

from __future__ import annotations

import click

from scheduler.client import Client
from scheduler.model.errors import SpecError
from scheduler.tools.ui.user_command import user

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.group("ui", invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback needs sign-in (or --no-auth).")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True, help="Port to listen on.")
@click.option("--no-auth", is_flag=True, help="Serve without sign-in, even on a network address: anyone who can "
                                               "reach it may drain, pause, scale and stop.")
@click.option("--metrics-token", envvar="SCHED_METRICS_TOKEN", default=None, metavar="TOKEN",
              help="/metrics then needs 'Authorization: Bearer TOKEN' (also SCHED_METRICS_TOKEN).")
@click.option("--forwarded-allow-ips", default="", metavar="IPS",
              help="Believe X-Forwarded-For and X-Forwarded-Proto only from these proxies (addresses or networks, "
                   "comma-separated, or *); by default from none.")
@click.pass_context
def ui(ctx, host, port, no_auth, metrics_token, forwarded_allow_ips):
    """Serve a live web dashboard: nodes, jobs, tasks and queues, updated as events arrive.

    Pages take ?ns=NAME to show another namespace of the same Redis. Drain, pause,
    activate, scale and stop are buttons; they refuse requests from other sites. Once
    a user exists (sched ui user add), every page needs signing in: viewers look,
    operators act. The HTTP API (sched api) is served under /v1/ too, with tokens
    (sched token create), or without on loopback with --no-auth.
    """
    if ctx.invoked_subcommand is not None:
        return
    from scheduler.tools.ui.auth import AuthSettings
    from scheduler.tools.ui.server import check_forwarded_allow_ips
    from scheduler.tools.web import serve

    client = ctx.find_object(Client)
    app = client.app
    app.store.ping()  # connect (or start the embedded Redis) first: a Redis that cannot be reached stops here
    if forwarded_allow_ips:
        check_forwarded_allow_ips(forwarded_allow_ips)
    if metrics_token is not None and not metrics_token.strip():
        raise SpecError("--metrics-token is empty; give a token, or leave the option out.")
    sign_in = not no_auth and client.dashboard_users().any()
    if not sign_in and not no_auth and host not in LOOPBACK:
        raise SpecError(f"sched ui will not serve {host} without sign-in: anyone who can reach it could drain nodes "
                        f"and stop jobs; add a user with sched ui user add NAME --role operator, or pass --no-auth.")
    shown = f"[{host}]" if ":" in host else host
    how = "sign-in required" if sign_in else "no sign-in (sched ui user add makes one required)"
    api_auth = not (no_auth and host in LOOPBACK)
    click.echo(f"sched ui: http://{shown}:{port}/?ns={app.keys.namespace} (Redis {app.display_url}; {how}); "
               f"HTTP API under /v1/ ({'tokens required' if api_auth else 'no tokens'}); Ctrl-C stops it")
    serve(app, host, port, AuthSettings(sign_in=sign_in, metrics_token=metrics_token), api_auth=api_auth,
          forwarded_allow_ips=forwarded_allow_ips)


ui.add_command(user)

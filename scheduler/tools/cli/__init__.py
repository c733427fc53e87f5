"""``sched``: the command line.

One click group; global options pick the Redis and the namespace, and the connection is
made only when a command needs it. Every listing takes ``--json`` and then prints only
JSON on stdout. Errors a user can cause print one sentence and exit 2.

Each command, or group of subcommands, lives in the module of its noun (``sched node``
in ``nodes.py``, ``sched job`` in ``jobs.py``, ``sched upgrade`` in ``layout.py``: the
names of the Python API's and the HTTP API's modules; ``sched api`` and ``sched ui`` in
``api.py`` and ``ui.py``, above the servers they start); ``common.py`` holds what they share. A command's module is imported only when that command runs (or help
lists it): ``sched worker`` does not load the dashboard's web stack or the tables' renderer,
and every process start pays only for what it uses.
"""

from __future__ import annotations

import importlib
import os

import click
import redis

from scheduler.client import Client
from scheduler.model import SchedError
from scheduler.state.acl import is_refusal
from scheduler.state.app import App, default_namespace
# Command name -> the module that defines it (as an attribute of the same name). A noun's
# module is named as the Python API's (scheduler/client/) and the HTTP API's are.
COMMANDS = {name: f"scheduler.tools.cli.{module}" for name, module in (
    ("node", "nodes"), ("job", "jobs"), ("task", "tasks"), ("deployment", "deployments"), ("queue", "queues"),
    ("quota", "quotas"), ("tenant", "tenants"), ("events", "events"), ("config", "config"), ("gc", "gc"),
    ("upgrade", "layout"), ("snapshot", "snapshots"), ("acl", "users"), ("token", "tokens"), ("worker", "workers"),
    ("agent", "agent"), ("audit", "audit"), ("server", "server"), ("demo", "demo"), ("bench", "bench"),
    ("simulate", "simulate"), ("budget", "budgets"), ("rebalance", "rebalance"), ("pool", "pools"),
    ("capacity", "capacity"))}
COMMANDS["ui"] = "scheduler.tools.cli.ui"
COMMANDS["api"] = "scheduler.tools.cli.api"
COMMANDS["version"] = "scheduler.tools.cli.version"

_PATH = "sched.command_path"  # ctx.meta: the subcommands named, for a refusal's sentence


class SchedGroup(click.Group):
    """Turns the scheduler's own errors into one line on stderr and a non-zero exit, and
    imports each command's module when the command is first asked for (:data:`COMMANDS`)."""

    def list_commands(self, ctx):
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            self.add_command(getattr(importlib.import_module(COMMANDS[name]), name))
        return self.commands.get(name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SchedError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # one sentence, like our own errors
            message = " ".join(exc.format_message().split())  # click's did-you-mean comes on a line of its own
            click.echo(f"Error: {message if message.endswith(('.', '?', '!')) else message + '.'}", err=True)
            ctx.exit(2)
        except redis.ResponseError as exc:  # NOPERM: the Redis user's role does not allow it
            if not is_refusal(exc) or not isinstance(ctx.obj, Client):
                raise
            error = ctx.obj.refusal(exc, ctx.meta.get(_PATH, "sched"))
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)

    def resolve_command(self, ctx, args):
        """Note the subcommands named (``sched job submit``), for the sentence above."""
        words, command = ["sched"], self
        for arg in args:
            found = command.get_command(ctx, arg) if isinstance(command, click.Group) else None
            if found is None:
                break
            words.append(arg)
            command = found
        ctx.meta[_PATH] = " ".join(words)
        return super().resolve_command(ctx, args)


@click.group(cls=SchedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--redis-url", envvar="SCHED_REDIS_URL", default=None, metavar="URL",
              help="Redis to use (also SCHED_REDIS_URL, then REDIS_URL). Default: a private embedded "
                   "redis-server under ~/.local/state/sched (SCHED_HOME), started on first use.")
@click.option("--namespace", "-n", default=None, metavar="NS",
              help="Namespace: independent clusters in one Redis (also SCHED_NAMESPACE). Default: default.")
@click.option("--wait-replicas", type=click.IntRange(0, 64), envvar="SCHED_WAIT_REPLICAS", default=None, metavar="N",
              help="After each placement commit, submission and task end, WAIT until N replicas have it "
                   "(also SCHED_WAIT_REPLICAS; default 0 = off). See docs/reliability.md, Failover.")
@click.option("--on-missing-replicas", type=click.Choice(["write", "refuse"]), envvar="SCHED_ON_MISSING_REPLICAS",
              default=None, help="When the master has fewer replicas than --wait-replicas: write on without waiting "
                                 "(default) or refuse writes (also SCHED_ON_MISSING_REPLICAS).")
@click.version_option(package_name="redis-sched", prog_name="sched", message="%(prog)s %(version)s",
                      help="Print sched's version and exit (`sched version` says more).")
@click.pass_context
def main(ctx, redis_url, namespace, wait_replicas, on_missing_replicas):
    """A Redis-backed cluster scheduler.

    Register nodes, submit jobs of identical tasks, and run workers that place the tasks
    on nodes that fit, spread or pack them as asked, and explain what is still pending.

    \b
    Quick start (uses the embedded Redis):
      sched node add n1 --cpu 4 --memory 8GiB --label zone=eu-1
      sched job submit web.yaml
      sched worker --until-idle
      sched task ls
      sched task explain web.0
    """
    if wait_replicas is not None:  # child processes (workers, RQ work horses) follow it too
        os.environ["SCHED_WAIT_REPLICAS"] = str(wait_replicas)
    if on_missing_replicas is not None:
        os.environ["SCHED_ON_MISSING_REPLICAS"] = on_missing_replicas
    ctx.obj = Client(app=App(redis_url=redis_url, namespace=default_namespace() if namespace is None else namespace,
                             wait_replicas=wait_replicas, on_missing_replicas=on_missing_replicas))


def run():
    main(prog_name="sched")


"""``sched config``: the namespace's settings kept in Redis (retention, the event
stream's bound) and the memory they govern."""

from __future__ import annotations

import click

from scheduler.model.moves import HELP as REBALANCE_HELP
from scheduler.model.retention import HELP, format_duration
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table

_STREAM_HELP = "events kept in the namespace's stream (0: no stream)"


def size(n: int) -> str:
    """Bytes for people: ``512 B``, ``13.2 KiB``, ``1.5 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def memory_lines(memory: dict) -> list[str]:
    used, limit = memory["used_memory"], memory["maxmemory"]
    share = f" of {size(limit)} maxmemory ({100 * used / limit:.0f}%)" if limit else " (no maxmemory set)"
    return [f"redis memory: {size(used)} used{share}",
            f"  {memory['live_tasks']} live tasks, about {size(memory['bytes_per_live_task'])} each",
            f"  {memory['jobs']} jobs, about {size(memory['bytes_per_job'])} each (their tasks apart)",
            f"  {memory['nodes']} nodes, about {size(memory['bytes_per_node'])} each"]


@click.group()
def config():
    """The namespace's settings: how long ended work is kept, how many events, rebalancing.

    \b
    sched config show
    sched config set job_retention 6h
    sched config set rebalance_interval 10m
    sched config set task_retention 30m ended_tasks_per_job 20
    sched config unset job_retention
    """


def _value(name: str, value) -> str:
    durations = ("rebalance_interval", "rebalance_deadline")
    return format_duration(value) if name.endswith("_retention") or name in durations else str(value)


@config.command("show")
@json_option
@pass_app
def config_show(app, as_json):
    """Each setting (and whether it is the default), and Redis's memory."""
    settings = app.config()
    memory = app.memory()
    if as_json:
        return print_json({"namespace": app.namespace, "settings": settings, "memory": memory})
    print_table(["SETTING", "VALUE", "", "MEANING"],
                [[name, _value(name, s["value"]), "(default)" if s["default"] else "",
                  {**HELP, **REBALANCE_HELP}.get(name, _STREAM_HELP)] for name, s in settings.items()])
    click.echo()
    for line in memory_lines(memory):
        click.echo(line)


@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("pairs", nargs=-1, required=True, metavar="NAME VALUE [NAME VALUE]...")
@json_option
@pass_app
def config_set(app, pairs, as_json):
    """Set settings: durations as 90s, 30m, 6h, 7d (or seconds); counts as whole numbers.

    \b
    task_retention       how long an ended task of a job that still runs is kept (1h)
    ended_tasks_per_job  how many ended tasks of a job that still runs are kept (100)
    job_retention        how long a finished job is kept, unless it has ttl_after_finished (24h)
    stream_maxlen        events kept in the stream (100000)
    rebalance_interval   how often the workers rebalance on their own (0: never, the default)
    rebalance_strategy   what they rebalance with: spread or pack (spread)
    rebalance_deadline   how long a move waits for its new task to run healthy (5m)
    """
    if len(pairs) % 2:
        raise click.UsageError(f"setting {pairs[-1]} has no value; give each setting one, as in "
                               f"`sched config set {pairs[-1]} VALUE`")
    settings = app.set_config(**dict(zip(pairs[::2], pairs[1::2])))
    if as_json:
        return print_json(settings)
    for name in pairs[::2]:
        click.echo(f"{name} = {_value(name, settings[name]['value'])}")


@config.command("unset")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@pass_app
def config_unset(app, names):
    """Set settings back to their defaults."""
    settings = app.unset_config(*names)
    for name in names:
        click.echo(f"{name} = {_value(name, settings[name]['value'])} (default)")


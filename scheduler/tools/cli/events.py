"""``sched events``: follow the namespace's events (its stream), replay them, share them in a
consumer group; ``sched events keep N`` and ``sched events info`` for the stream itself."""

from __future__ import annotations

import sys
from datetime import datetime

import click
import orjson

from scheduler.client import Client
from scheduler.control.feed import EVENT_TYPES
from scheduler.tools.cli import complete

BATCH = 100  # events a consumer of a group takes per read (so that consumers share them)
from scheduler.tools.cli.common import json_option, pass_app

_SUBJECT = {"task": "id", "job": "id", "node": "name"}
_VERB = ("state", "event")


def describe(event: dict) -> str:
    """One event in words: type, subject, what happened, then its other fields as name=value
    (``task web.1 assigned node=n2``)."""
    kind = event.get("type", "?")
    subject = _SUBJECT.get(kind, "id")
    words = [str(kind), str(event.get(subject, ""))]
    words += [str(event[v]) for v in _VERB if v in event]
    skip = {"type", "ts", subject, *_VERB, *(("job",) if kind == "task" else ())}
    words += [f"{k}={_field(k, v)}" for k, v in event.items() if k not in skip]
    return " ".join(words)


def _field(name: str, value) -> str:
    """A field's value for people: an instant (``remove_at``, ``finished_at``: ms) as a time."""
    if value == "":
        return "-"
    if name.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return _time(value).replace(" ", "T")
    return str(value)


def _time(ts) -> str:
    try:
        return datetime.fromtimestamp(int(ts) / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"


@click.group(invoke_without_command=True)
@click.option("--since", default=None, metavar="ID|TIME|start",
              help="Replay from here, then follow: start (everything kept), an event id, a time "
                   "(2026-11-22T10:00:00) or an age (10m, 2h). Default: from now.")
@click.option("--group", default=None, metavar="NAME",
              help="Read as a consumer of this consumer group: each event goes to one consumer and is "
                   "acknowledged once printed. A new group starts at --since (default: now).")
@click.option("--consumer", default=None, metavar="NAME", help="This consumer's name in --group (keep it across restarts).")
@click.option("--claim-idle", type=click.FloatRange(min=0.001), default=60.0, show_default=True, metavar="SECONDS",
              help="With --group: take over events another consumer left unacknowledged this long (it died).")
@click.option("--type", "types", type=click.Choice(EVENT_TYPES), multiple=True, help="Only events of this type (repeatable).")
@click.option("--job", "jobs", multiple=True, metavar="ID", help="Only events about this job (repeatable).",
              shell_complete=complete.job_ids)
@click.option("--node", "nodes", multiple=True, metavar="NAME", help="Only events naming this node (repeatable).",
              shell_complete=complete.node_names)
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after this many events.")
@json_option
@click.pass_context
def events(ctx, since, group, consumer, claim_idle, types, jobs, nodes, count, as_json):
    """Follow the namespace's events: one line per task, node or job change, until Ctrl-C
    or --count events. With --json, one JSON object per line: the event with its
    "stream_id" first (give it to --since to carry on after it)."""
    if ctx.invoked_subcommand is not None:
        return
    if (group is None) != (consumer is None):
        raise click.UsageError("--group and --consumer go together.")
    client = ctx.find_object(Client)
    stream_on = client.store.stream.maxlen() > 0
    plain = since is None and group is None and not (types or jobs or nodes)
    seen = 0
    out = sys.stdout
    try:
        if plain and not stream_on:  # no stream kept: the channel, from now
            for event in client.events():
                out.write((orjson.dumps(event).decode() if as_json else f"{_time(event.get('ts'))}  {describe(event)}")
                          + "\n")
                out.flush()
                seen += 1
                if count is not None and seen >= count:
                    break
            return
        # With the stream on, the plain form reads it from now, so that each line carries
        # its stream id (give it to --since to carry on after it).
        with client.events(since="now" if since is None else since, group=group, consumer=consumer, types=types,
                           job=jobs, node=nodes, claim_idle=claim_idle, batch=min(count or BATCH, BATCH)) as feed:
            for stream_id, event in feed:
                if as_json:
                    line = orjson.dumps({"stream_id": stream_id, **event}).decode()
                else:
                    line = f"{_time(event.get('ts'))}  {describe(event)}  [{stream_id}]"
                out.write(line + "\n")
                out.flush()  # printed before acknowledged: a consumer killed here gets it again
                seen += 1
                if count is not None and seen >= count:
                    break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # the reader went away (`| head`)
        sys.stderr.close()


@events.command()
@click.argument("entries", type=click.IntRange(min=0))
@pass_app
def keep(app, entries):
    """Keep about ENTRIES events in the stream from now on (0: no stream; the default is 100000)."""
    app.keep_events(entries)
    click.echo(f"namespace {app.namespace}: the stream keeps about {entries} events." if entries else
               f"namespace {app.namespace}: no stream is kept; events go only to the channel.")


@events.command()
@json_option
@pass_app
def info(app, as_json):
    """The stream: entries kept, bound, memory, oldest and newest ids, consumer groups."""
    data = app.stream_info()
    if as_json:
        click.echo(orjson.dumps(data).decode())
        return
    click.echo(f"stream      {data['key']}")
    click.echo(f"entries     {data['entries']} (bound {data['maxlen']}{', off' if data['maxlen'] == 0 else ''})")
    click.echo(f"memory      {data['memory_bytes']} bytes")
    click.echo(f"oldest      {data['oldest'] or '-'}")
    click.echo(f"newest      {data['newest'] or '-'}")
    for g in data["groups"]:
        click.echo(f"group       {g['name']}: {g['consumers']} consumers, {g['pending']} pending, "
                   f"last delivered {g['last_delivered']}")

"""``sched snapshot save FILE`` and ``sched snapshot restore FILE [--namespace NEW]``: a
namespace's whole state in a file, and back (``scheduler/control/snapshot.py``)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from datetime import datetime

import click

from scheduler.client import Client
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json


@click.group()
def snapshot():
    """A namespace's whole state in one file, read as of one moment, and loaded back into
    an empty namespace (of this Redis or another: one server, a Cluster, Sentinel)."""


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


@snapshot.command()
@click.argument("file", metavar="FILE")
@click.option("--tries", type=click.IntRange(min=1), default=3, show_default=True,
              help="Reads while the namespace works on, before one with writes paused.")
@click.option("--max-pause", type=click.FloatRange(min=0), default=5.0, show_default=True, metavar="SECONDS",
              help="When each of those reads met a change: pause the server's writes for at most this long for one "
                   "more read (0: never; then save fails).")
@json_option
@pass_app
def save(app, file, tries, max_pause, as_json):
    """Write the namespace's whole state to FILE (gzip-compressed when it ends in .gz;
    - for stdout), as of one moment. The keys are read in short steps; when the namespace
    changed meanwhile the read starts again, and after --tries such reads it is read once
    with the server's writes paused (writers wait about as long as the read takes)."""
    target = sys.stdout.buffer if file == "-" else file
    summary = app.snapshot_save(target, tries, max_pause)
    if as_json:
        return print_json({**summary, "file": file})
    paused = f"; writes paused {summary['paused_ms']} ms for the read" if summary["paused_ms"] else ""
    click.echo(f"namespace {summary['namespace']}: {summary['keys']} keys saved to {file} as of "
               f"{_when(summary['saved_at'])} (key layout {summary['layout']}{paused})", err=file == "-")


@snapshot.command()
@click.argument("file", metavar="FILE")
@click.option("--namespace", "-n", "target", default=None, metavar="NEW",
              help="Load it into this namespace (empty). Default: sched's -n if given, else the namespace it was "
                   "saved from.")
@json_option
@click.pass_context
def restore(ctx, file, target, as_json):
    """Load a snapshot FILE (- for stdin) into an empty namespace: the keys are renamed
    with the namespace. A non-empty namespace is refused before anything is written; a
    restore cut short is finished by running it again."""
    app = ctx.find_object(Client)
    if target is None and (ctx.find_root().params.get("namespace") or os.environ.get("SCHED_NAMESPACE")):
        target = app.namespace
    if file == "-":
        with tempfile.NamedTemporaryFile(prefix="sched-snapshot-") as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
            spool.flush()
            summary = app.snapshot_restore(spool.name, namespace=target)
    else:
        summary = app.snapshot_restore(file, namespace=target)
    if as_json:
        return print_json({**summary, "file": file})
    renamed = f" (saved from {summary['source_namespace']})" if summary["source_namespace"] != summary["namespace"] else ""
    click.echo(f"namespace {summary['namespace']}: {summary['keys']} keys restored from {file}{renamed}, as of "
               f"{_when(summary['saved_at'])}")

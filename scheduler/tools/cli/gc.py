"""``sched gc``: remove ended work whose retention has passed, now."""

from __future__ import annotations

import click

from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json

SHOWN = 20  # job ids named in the summary


@click.command()
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@json_option
@pass_app
def gc(app, dry_run, as_json):
    """Remove now what retention would remove: finished jobs past their retention (with
    every key of them) and ended tasks of running jobs past task_retention or beyond
    ended_tasks_per_job. The workers do the same on their own every second or so;
    `sched config show` shows the settings.
    """
    report = app.gc(dry_run=dry_run)
    if as_json:
        return print_json(report)
    jobs = report["jobs_removed"]
    verb = "would remove" if dry_run else "removed"
    named = ", ".join(jobs[:SHOWN]) + (f" and {len(jobs) - SHOWN} more" if len(jobs) > SHOWN else "")
    click.echo(f"{verb} {len(jobs)} finished job(s){': ' + named if jobs else ''}")
    click.echo(f"  with {report['job_tasks_removed']} task(s) of theirs; and {report['tasks_removed']} ended task(s) "
               f"of jobs that still run")
    if report["kept"]:
        click.echo("  kept, due but still needed: " + ", ".join(f"{n} {why}" for why, n in report["kept"].items()))
    if dry_run and report["uncounted"]:
        click.echo(f"  ({report['uncounted']} task end(s) not counted yet: a real run counts them first)")

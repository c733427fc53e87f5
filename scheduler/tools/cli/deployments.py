"""``sched deployment``: list deployments, follow one, promote, pause, resume or fail it."""

from __future__ import annotations

import time

import click

from scheduler.tools.cli import complete
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table

FOLLOW_POLL_S = 0.5


@click.group()
def deployment():
    """Rolling updates of jobs: list, follow, promote, pause, resume, fail."""


def _counts(counts: dict) -> str:
    return f"{counts['healthy']}/{counts['desired']} healthy, {counts['placed']} placed, {counts['unhealthy']} unhealthy"


def status_lines(record: dict) -> list[str]:
    lines = [f"deployment {record['id']}: {record['state']} (job {record['job']}, version {record['from']} -> "
             f"{record['to']})"]
    if record.get("canary"):
        lines.append(f"  canary: {record['canary']} task(s), " + ("promoted" if record.get("promoted") else
                                                                  "not promoted"))
    lines.append(f"  version {record['to']}: {_counts(record['to_counts'])}")
    old = record["from_counts"]
    lines.append(f"  older versions: {old['placed']} placed, {old['healthy']} healthy")
    if record.get("message"):
        lines.append(f"  {record['message']}")
    return lines


@deployment.command("ls")
@click.option("--job", "job_id", default=None, help="Only this job's deployments.",
              shell_complete=complete.job_ids)
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
@pass_app
def deployment_ls(app, job_id, limit, as_json):
    """List deployments, newest first, each with its state."""
    records = app.deployments(job_id, limit)
    if as_json:
        return print_json(records)
    rows = [[r["id"], r["job"], f"{r['from']} -> {r['to']}", r["state"],
             f"{r['to_counts']['healthy']}/{r['to_counts']['desired']}", r.get("message", "")] for r in records]
    print_table(["ID", "JOB", "VERSIONS", "STATE", "HEALTHY", "MESSAGE"], rows)


@deployment.command("status")
@click.argument("deployment_id", metavar="ID")
@click.option("--follow", "-f", is_flag=True, help="Print each change until the deployment ends.")
@json_option
@pass_app
def deployment_status(app, deployment_id, follow, as_json):
    """Show a deployment: its state and the counts of each version."""
    record = app.deployment(deployment_id)
    if not follow:
        return print_json(record) if as_json else click.echo("\n".join(status_lines(record)))
    shown = None
    while True:
        view = {k: v for k, v in record.items() if k != "updated"}
        if view != shown:
            shown = view
            print_json(record) if as_json else click.echo("\n".join(status_lines(record)))
        if record["state"] not in ("running", "paused", "awaiting_promotion") and record.get("revert") != "pending":
            return
        time.sleep(FOLLOW_POLL_S)
        record = app.deployment(deployment_id)


def _action(name: str, method: str, help_text: str):
    @deployment.command(name, help=help_text)
    @click.argument("deployment_id", metavar="ID")
    @json_option
    @pass_app
    def command(app, deployment_id, as_json):
        record = getattr(app, method)(deployment_id)
        if as_json:
            return print_json(record)
        click.echo("\n".join(status_lines(record)))

    return command


deployment_promote = _action("promote", "promote", "Let a deployment waiting on its canary tasks roll the rest.")
deployment_pause = _action("pause", "pause_deployment", "Hold a deployment: nothing more is stopped or started.")
deployment_resume = _action("resume", "resume_deployment", "Carry on with a paused deployment.")
deployment_fail = _action("fail", "fail_deployment",
                          "End a deployment as failed now (with auto_revert the job goes back to its last healthy "
                          "version).")

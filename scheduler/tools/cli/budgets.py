"""``sched budget``: jobs' disruption budgets as last counted (kube's ``kubectl get pdb``)."""

from __future__ import annotations

import click

from scheduler.control.schedule import iso
from scheduler.model.errors import NotFound
from scheduler.tools.cli import complete
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table


def budget_words(record: dict) -> str:
    """``job web's budget (max_unavailable 1): 3 of 4 expected healthy, 3 desired; 0 disruptions allowed``."""
    return (f"job {record['job']}'s budget ({record['budget']}): {record['healthy']} of {record['expected']} expected "
            f"healthy, {record['desired_healthy']} desired; {record['allowed']} disruption(s) allowed")


@click.group()
def budget():
    """Jobs' disruption budgets: how many of a job's tasks a drain (or any voluntary
    disruption) may take down now.

    A job's `disruption_budget: {max_unavailable: 1}` (or "25%", or `min_available: 3`
    or "75%") is counted by the scheduler workers about once a second over its healthy
    running tasks (docs/job-spec.md).
    """


@budget.command("ls")
@json_option
@pass_app
def budget_ls(app, as_json):
    """List the jobs with a disruption budget: expected, healthy and desired healthy
    tasks, and the disruptions allowed now."""
    records = app.budgets()
    if as_json:
        return print_json(records)
    print_table(["JOB", "BUDGET", "EXPECTED", "HEALTHY", "DESIRED", "ALLOWED", "DISRUPTED", "COUNTED"],
                [[r["job"], r["budget"], r["expected"], r["healthy"], r["desired_healthy"], r["allowed"],
                  len(r["disrupted"]), iso(r["counted_at"]) if r["counted_at"] else "not yet"] for r in records])


@budget.command("show")
@click.argument("job_id", metavar="JOB", shell_complete=complete.job_ids)
@json_option
@pass_app
def budget_show(app, job_id, as_json):
    """A job's disruption budget, and the disruptions counted since its last count."""
    record = app.budget(job_id)
    if record is None:
        app.job(job_id)  # one sentence if there is no such job
        raise NotFound(f"job {job_id} has no disruption_budget; add one to its spec, such as "
                       f"disruption_budget: {{max_unavailable: 1}}.")
    if as_json:
        return print_json(record)
    click.echo(budget_words(record))
    click.echo(f"unavailable: {record['unavailable']} of {record['max_unavailable']}")
    click.echo(f"counted: {iso(record['counted_at']) if record['counted_at'] else 'not yet'}; "
               f"evictions granted: {record['evictions']}")
    for task_id, ms in sorted(record["disrupted"].items()):
        click.echo(f"disrupted since: {task_id} at {iso(ms)}")

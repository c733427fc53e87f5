"""``sched task``: list tasks, explain where one is and why, print what it printed."""

from __future__ import annotations

import click

from scheduler.client.tasks import task_record
from scheduler.model import TASK_STATES
from scheduler.tools.cli import complete
from scheduler.tools.cli.budgets import budget_words
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table


@click.group()
def task():
    """List tasks and explain why one is pending."""


@task.command("ls")
@click.option("--job", "job_id", default=None, help="Only this job's tasks.", shell_complete=complete.job_ids)
@click.option("--state", type=click.Choice(TASK_STATES), default=None, help="Only tasks in this state.")
@click.option("--node", "node_name", default=None, help="Only tasks on this node.",
              shell_complete=complete.node_names)
@json_option
@pass_app
def task_ls(app, job_id, state, node_name, as_json):
    """List tasks (id, job, version, state, health, node, priority)."""
    records = [task_record(t) for t in app.tasks(job=job_id, state=state, node=node_name)]
    if as_json:
        return print_json(records)
    print_table(["ID", "JOB", "VERSION", "STATE", "HEALTH", "NODE", "PRIORITY", "ATTEMPTS"],
                [[r["id"], r["job"], r["version"], r["state"], r["health"] or "-", r["node"] or "", r["priority"],
                  r["attempts"]] for r in records])


@task.command("explain")
@click.argument("task_id", metavar="ID", shell_complete=complete.task_ids)
@json_option
@pass_app
def task_explain(app, task_id, as_json):
    """Say why a task is where it is: for a pending task, what each node lacked."""
    record = app.explain(task_id)
    if as_json:
        return print_json(record)
    click.echo(f"{record['id']}: {record['state']}" + (f", {record['health']}" if record.get("health") else ""))
    if record.get("health_check"):
        click.echo(f"last health check: {record['health_check']}")
    gang = record.get("gang")
    if gang is not None:
        size = f"{gang['size']} tasks, all at once" if gang["size"] == gang["min_available"] else \
            f"{gang['size']} tasks, at least {gang['min_available']} at once"
        click.echo(f"gang {gang['job']} ({size})" + ("; it waits whole with its gang" if gang["waits"] else ""))
    if record.get("tenant"):
        click.echo(f"tenant {record['tenant']}")
    if record.get("budget"):
        click.echo(budget_words(record["budget"]))
    click.echo(record["message"])


@task.command("evict")
@click.argument("task_id", metavar="ID", shell_complete=complete.task_ids)
@click.option("--reason", default="evicted by hand", show_default=True, help="Said in the task's end and the event.")
@json_option
@pass_app
def task_evict(app, task_id, reason, as_json):
    """Stop a task and queue its replacement, if its job's disruption budget allows one
    more disruption now (kube's eviction API); else say what it waits for and exit 1."""
    done = app.evict(task_id, reason)
    if as_json:
        print_json(done)
    elif done["evicted"]:
        click.echo(f"task {task_id} evicted; replacement {done['replacement'] or 'none'} queued")
    elif done["verdict"] in ("gone", "elsewhere"):
        click.echo(f"task {task_id} is not live on a node: nothing to evict")
    else:
        click.echo(f"task {task_id} not evicted: waiting on {done['waiting']}")
    if not done["evicted"]:
        raise SystemExit(1)


@task.command("logs")
@click.argument("task_id", metavar="ID", shell_complete=complete.task_ids)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the task prints, until it ends.")
@json_option
@pass_app
def task_logs(app, task_id, follow, as_json):
    """Print what a task printed: its stdout here, its stderr on stderr (the last 64 KiB
    of each), and a Python function's return value or traceback."""
    if follow and not as_json:
        for stream, text in app.follow_logs(task_id):
            click.echo(text, nl=False, err=stream == "stderr")
        return
    record = app.logs(task_id)
    if as_json:
        return print_json(record)
    click.echo(record["stdout"], nl=False)
    click.echo(record["stderr"], nl=False, err=True)
    if "traceback" in record:
        click.echo(record["traceback"], nl=False, err=True)
    elif "result" in record:
        click.echo(f"returned {record['result']}")

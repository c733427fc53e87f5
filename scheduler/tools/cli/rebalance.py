"""``sched rebalance``: move running service tasks where they should be now, make before
break, and list the moves."""

from __future__ import annotations

import json

import click

from scheduler.client import Client
from scheduler.engine.rebalance import STRATEGIES
from scheduler.model import SpecError
from scheduler.model.moves import ENDED
from scheduler.tools.cli import complete
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table


@click.group(invoke_without_command=True)
@click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)), default="spread", show_default=True,
              help="spread: each service's spread back (after nodes joined or left), constraints and taints "
                   "that no longer hold, busy nodes' load onto idle ones; pack: the least used nodes emptied "
                   "onto the others; or one of kube's descheduler strategies alone.")
@click.option("--max-moves", type=click.IntRange(1, 1000), default=None, help="At most this many moves (1000).")
@click.option("--job", "job_id", default=None, help="Move only this job's tasks.", shell_complete=complete.job_ids)
@click.option("--plan", "plan_file", type=click.File("r"), default=None,
              help="Apply this plan (as `sched rebalance --dry-run --json` printed it; - for stdin) instead of "
                   "making one: refused, whole, if the cluster changed since it was made.")
@click.option("--wait", is_flag=True, help="Wait until the moves have ended, and say how each ended.")
@click.option("--timeout", type=click.FloatRange(1), default=600.0, show_default=True,
              help="With --wait: give up waiting after this many seconds (the moves go on).")
@json_option
@click.pass_context
def rebalance(ctx, dry_run, strategy, max_moves, job_id, plan_file, wait, timeout, as_json):
    """Move running service tasks where they should be now, make before break.

    The plan is made on a copy of the cluster with the placement engine the workers use:
    each move says its task, where from and to, and which score or rule it improves by
    how much. Applying it records the moves, all or none (a plan made on a cluster that
    has changed since is refused); the workers then carry each out: a new task of the job
    is placed on the target through the same commit as any placement, and once it runs
    (and is healthy, where the job has a check) the old task stops, as the job's
    disruption budget allows. A move whose new task does not run healthy within
    rebalance_deadline is abandoned: its new task stopped, the old one kept. Batch,
    global and sysbatch tasks never move.

    \b
    sched rebalance --dry-run                 # what would move, and why
    sched rebalance                           # move, and return (sched rebalance ls)
    sched rebalance --job web --max-moves 5 --wait
    sched rebalance --strategy pack --dry-run # which nodes could be emptied
    sched rebalance --dry-run --json > plan.json && sched rebalance --plan plan.json
    sched config set rebalance_interval 10m   # the workers rebalance on their own
    """
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(Client)
    if plan_file is not None:
        if dry_run:
            raise click.UsageError("--plan applies a plan; --dry-run makes one: give one of them.")
        try:
            planned = json.load(plan_file)
        except ValueError as exc:
            raise SpecError(f"the plan file is not JSON ({exc}); save one with `sched rebalance --dry-run --json`.")
        done = {**planned, "applied": app.apply_rebalance(planned)}
    else:
        done = app.rebalance(strategy, max_moves, job_id, dry_run=dry_run)
    ended = None
    applied = done.get("applied") or {}
    if wait and applied.get("moves"):
        ended = app.wait_moves(applied["moves"], timeout)
    if as_json:
        return print_json(done if ended is None else {**done, "ended": ended})
    _show_plan(done, dry_run)
    if ended is not None:
        click.echo()
        _show_moves(ended)


def _score(score: dict) -> str:
    if not score:
        return ""
    sign = "+" if score.get("gain", 0) >= 0 else ""
    return f"{score['name']}: {score['before']} -> {score['after']} ({sign}{score.get('gain', '')})"


def _budget(record: dict | None) -> str:
    if record is None:
        return "none"
    return f"{record['budget']}: {record['allowed']} disruption(s) allowed now"


def _show_plan(done: dict, dry_run: bool) -> None:
    moves = done.get("moves", [])
    strategy = done.get("strategy", "")
    took = f" in {done['planned_ms']:g} ms" if "planned_ms" in done else ""
    click.echo(f"{len(moves)} move(s) planned by {strategy or 'a saved plan'}{took}.")
    if moves:
        print_table(["TASK", "JOB", "FROM", "TO", "STRATEGY", "SCORE", "REASON"],
                    [[m["task"], m["job"], m["from"], m["to"], m["strategy"], _score(m.get("score", {})),
                      m.get("reason", "")] for m in moves])
    jobs = done.get("jobs") or {}
    if jobs:
        click.echo()
        print_table(["JOB", "MOVES", "SKEW", "BUDGET"],
                    [[job, j["moves"], f"{j['skew_before']} -> {j['skew_after']}", _budget(j.get("budget"))]
                     for job, j in sorted(jobs.items())])
    applied = done.get("applied") or {}
    if dry_run:
        click.echo("dry run: nothing was changed (apply this very plan with --dry-run --json and --plan).")
    elif applied.get("plan") is not None:
        click.echo(f"applied as plan {applied['plan']}: moves {', '.join(applied['moves'])}; the workers carry "
                   f"them out (sched rebalance ls).")
    else:
        click.echo("nothing to move.")
    held = done.get("held") or {}
    if held:
        said = ", ".join(f"{n} {why}" for why, n in sorted(held.items()))
        note = " (a node runs its tasks only under an agent: sched agent)" if "not running yet" in held else ""
        click.echo(f"tasks of services that may not move now: {said}{note}.")


def _show_moves(moves: list[dict]) -> None:
    print_table(["ID", "TASK", "FROM", "TO", "STATE", "NEW TASK", "MESSAGE"],
                [[m["id"], m["task"], m["from"], m["to"], m["state"], m.get("new_task", ""), m.get("message", "")]
                 for m in moves])


@rebalance.command("ls")
@click.option("--all", "every", is_flag=True, help="Moves that ended recently too, not only those in progress.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@pass_app
def rebalance_ls(app, every, limit, as_json):
    """The moves in progress (with --all, those that ended lately too), oldest first."""
    moves = app.moves(limit, active=not every)
    if as_json:
        return print_json(moves)
    if not moves:
        return click.echo("no moves in progress." if not every else "no moves.")
    _show_moves(moves)
    going = sum(m["state"] not in ENDED for m in moves)
    click.echo(f"{going} in progress, {len(moves) - going} ended.")

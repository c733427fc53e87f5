"""``sched capacity``: which pools and how many nodes the pending tasks need, and which
nodes could go, proven by the placement engine on a copy of the cluster; hooks that act
on it, once or in a loop (``scheduler/control/capacity.py``, ``capacity_hooks.py``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from scheduler.model import SpecError
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import print_json, print_table


@click.command()
@json_option
@click.option("--expander", default="least-waste", show_default=True, metavar="NAME[,NAME...]",
              help="How to choose among pools: least-waste, price (lowest cost per task placed), priority (the "
                   "pools' --priority), most-tasks; a chain such as priority,least-waste hands each one's best "
                   "to the next.")
@click.option("--threshold", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Scale-down: only nodes whose utilisation (the larger of cpu and memory held, GPUs on a GPU "
                   "node) is below this are considered (the autoscaler's --scale-down-utilization-threshold).")
@click.option("--max-remove", type=click.IntRange(min=0), default=None, metavar="N",
              help="Scale-down: at most N nodes.")
@click.option("--record", is_flag=True,
              help="Keep the answer for the dashboard's capacity panel and send its capacity event (done "
                   "whenever a hook or --watch is given).")
@click.option("--exec", "exec_cmd", default=None, metavar="CMD",
              help="Run CMD (with sh) when the decision is to scale up or down, the decision as JSON on its "
                   "standard input (SCHED_CAPACITY_ACTION is scale-up or scale-down); exit 0 means it acted.")
@click.option("--webhook", default=None, metavar="URL", help="POST the decision as JSON to URL; 2xx means it acted.")
@click.option("--hook-timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, metavar="SECONDS",
              help="How long --exec or --webhook may take.")
@click.option("--scale-up-cooldown", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS", help="No scale-up is acted on within this of the last one.")
@click.option("--scale-down-delay-after-add", type=click.FloatRange(min=0), default=600.0, show_default=True,
              metavar="SECONDS", help="No scale-down is acted on within this of the last scale-up (the autoscaler's).")
@click.option("--scale-down-cooldown", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS",
              help="No scale-down is acted on within this of the last one (--scale-down-delay-after-delete).")
@click.option("--unneeded-time", type=click.FloatRange(min=0), default=600.0, show_default=True, metavar="SECONDS",
              help="A node is handed to a scale-down hook once it has been removable this long, counted across "
                   "runs (the autoscaler's --scale-down-unneeded-time).")
@click.option("--watch", is_flag=True,
              help="Answer and act every --interval until stopped; a Redis outage is waited out.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True, metavar="SECONDS",
              help="With --watch: time between answers (the autoscaler's --scan-interval).")
@click.option("--trace", "traces", multiple=True, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Answer on the cluster a replayed trace leaves instead (sched simulate's formats; repeatable "
                   "for a trace's parts), with this namespace's pools.")
@click.option("--nodes", "nodes_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="With --trace: the cluster, when the trace has none.")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "jsonl", "google-2011", "google-2019", "alibaba-2018"]),
              help="With --trace: the trace's format.")
@click.option("--until", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="With --trace: answer at this trace time (default: the trace's last event).")
@click.option("--tick", type=click.FloatRange(min=0.001), default=1.0, show_default=True, metavar="SECONDS",
              help="With --trace: the replay's resolution.")
@pass_app
def capacity(app, as_json, expander, threshold, max_remove, record, exec_cmd, webhook, hook_timeout,
             scale_up_cooldown, scale_down_delay_after_add, scale_down_cooldown, unneeded_time, watch, interval,
             traces, nodes_files, fmt, until, tick):
    """How many nodes of which pools place every pending task, and which nodes can go now.

    Scale up: the pending tasks that fit on no node are packed per pool (`sched pool`) by
    the cluster-autoscaler's binpacking estimator, the estimate is proven by placing them
    with the workers' own engine (every hard rule) on a copy of the cluster with the new
    nodes, and --expander chooses among the pools. Scale down: nodes below --threshold,
    emptiest first, one at a time, can go when each of their tasks fits elsewhere on the
    copy, under every hard rule and disruption budget; the cost saved is their pools'.

    \b
      sched capacity                                  # a table
      sched capacity --json                           # for scripts
      sched capacity --expander price
      sched capacity --exec ./provision.sh --watch    # act, every 10 s
      sched capacity --webhook http://autoscaler.local/hook
      sched capacity --trace trace.jsonl              # at the end of a replayed trace

    Nothing changes in the cluster: a hook acts, and what it does goes through the
    commit like any change. docs/cli.md has the JSON's fields.
    """
    from scheduler.control.capacity import CapacityOptions
    from scheduler.control.capacity_hooks import Cooldowns, Hook

    if exec_cmd and webhook:
        raise SpecError("give --exec or --webhook, not both.")
    if traces and (exec_cmd or webhook or watch or record):
        raise SpecError("--trace answers on a replay: it takes no --exec, --webhook, --watch or --record.")
    options = CapacityOptions(expander=expander, threshold=threshold, max_remove=max_remove)
    if traces:
        return _on_trace(app, traces, nodes_files, fmt, until, tick, options, as_json)
    hook = Hook(exec_cmd, webhook, hook_timeout)
    cooldowns = Cooldowns(scale_up_cooldown, scale_down_delay_after_add, scale_down_cooldown, unneeded_time)
    if watch:
        return _watch(app, options, hook, cooldowns, interval, as_json)
    if hook.given or record:
        from scheduler.control.capacity_hooks import run_once

        result = run_once(app.store, app.namespace, options, hook, cooldowns)
    else:
        from scheduler.control.capacity import answer

        result = answer(app.store, options)
    _show(result, as_json)
    if "hook" in result and not result["hook"]["acted"]:
        sys.exit(1)


def _watch(app, options, hook, cooldowns, interval: float, as_json: bool) -> None:
    """Answer every ``interval`` seconds until interrupted; while Redis does not answer,
    say so once and try again each interval (an outage costs answers, never a hook call
    twice: a hook's call is recorded only once Redis takes it)."""
    from scheduler.control.capacity_hooks import run_once
    from scheduler.model.errors import RedisUnavailable
    from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeout

    away = False
    try:
        while True:
            started = time.monotonic()
            try:
                result = run_once(app.store, app.namespace, options, hook, cooldowns)
            except (RedisUnavailable, RedisConnectionError, RedisTimeout) as exc:
                if not away:
                    click.echo(f"capacity: Redis does not answer ({exc}); trying again every {interval:g} s",
                               err=True)
                away = True
            else:
                if away:
                    click.echo("capacity: Redis answers again", err=True)
                away = False
                if as_json:
                    print_json(result)
                else:
                    click.echo(_line(result))
                sys.stdout.flush()
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return


def _on_trace(app, traces, nodes_files, fmt, until, tick, options, as_json) -> None:
    import signal

    from scheduler.tools.simulate.capacity import capacity_after
    from scheduler.tools.simulate.formats import load
    from scheduler.tools.simulate.replay import Settings

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the private redis-server is stopped too
    for path in (*traces, *nodes_files):
        if not path.exists():
            raise SpecError(f"{path} does not exist.")
    loaded = load(list(traces), fmt, list(nodes_files) or None)
    pools = app.store.pools()
    result = capacity_after(loaded, pools, options, Settings(tick_s=tick, until_s=until))
    if as_json:
        return print_json(result)
    click.echo(f"After {result['simulated_s']:g} s of {traces[0]}: {result['report']['placed']} tasks placed, "
               f"{result['pending']} pending, {result['live']} live on {result['nodes']} nodes.")
    _show(result, False)


def _line(result: dict) -> str:
    """One line per answer, for --watch."""
    up, down = result.get("scale_up") or {}, result.get("scale_down") or {}
    adds = ", ".join(f"{a['nodes']} {a['pool']}" for a in up.get("add", [])) or "none"
    decision = result.get("decision") or {}
    hook = result.get("hook")
    acted = "" if hook is None else (" (acted)" if hook["acted"] else f" (hook failed: {hook['error']})")
    return (f"{time.strftime('%H:%M:%S')} pending {up.get('pending', 0)}, add {adds}; "
            f"can go {down.get('nodes', 0)}, saving {down.get('savings', 0):g}; "
            f"decision {decision.get('action') or 'none'}{acted}")


def _show(result: dict, as_json: bool) -> None:
    if as_json:
        return print_json(result)
    up, down = result.get("scale_up"), result.get("scale_down")
    if up is not None:
        click.echo(f"Scale up ({up['expander']}): {up['pending']} pending task(s), {up['fit_now']} fit on the nodes "
                   f"there are; {up['nodes']} node(s) to add, cost {up['cost']:g}.")
        if up["add"]:
            print_table(["POOL", "NODES", "TASKS PLACED", "COST"],
                        [[a["pool"], a["nodes"], a["tasks"], f"{a['cost']:g}"] for a in up["add"]])
        for entry in up["unplaceable"]:
            click.echo(f"  no pool places job {entry['job']} ({entry['tasks']} task(s)): "
                       + "; ".join(entry["reasons"]))
    if down is not None:
        click.echo(f"Scale down (utilisation below {down['threshold']:.0%}): {down['nodes']} of "
                   f"{down['candidates']} candidate node(s) can go, saving {down['savings']:g}"
                   + (f" (no pool prices {', '.join(down['unpriced'])})" if down["unpriced"] else "") + ".")
        if down["remove"]:
            print_table(["NODE", "POOL", "UTILISATION", "TASKS MOVED", "COST"],
                        [[r["node"], r["pool"] or "-", f"{r['utilisation']:.0%}", r["tasks"], f"{r['cost']:g}"]
                         for r in down["remove"]])
        for entry in down["kept"]:
            click.echo(f"  {entry['node']} stays ({entry['utilisation']:.0%}): {entry['reason']}")
    decision = result.get("decision")
    if decision is not None:
        waits = "; ".join(f"{w['action']} waits: {w['why']}" + (f" ({w['for_s']:g} s)" if w.get("for_s") else "")
                          for w in decision["waiting"])
        click.echo(f"Decision: {decision['action'] or 'nothing to do'}" + (f"; {waits}" if waits else "") + ".")
    hook = result.get("hook")
    if hook is not None:
        click.echo(f"Hook: {'acted' if hook['acted'] else 'failed: ' + hook['error']}.")

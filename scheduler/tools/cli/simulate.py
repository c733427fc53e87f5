"""``sched simulate``: replay a trace through the scheduler on a virtual clock and report how
well it placed (``scheduler/tools/simulate/``; docs/simulate.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from scheduler.model import SpecError
from scheduler.tools.cli.common import json_option
from scheduler.tools.render import print_json

SETTING_KEYS = ("strategy", "percentage-of-nodes", "nodes", "seed")


class SimulateGroup(click.Group):
    """``sched simulate TRACE... [OPTIONS]`` replays (the ``run`` command, whose options
    this group's help shows as its own); ``generate`` and ``convert`` are subcommands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "TRACE... [OPTIONS]")
        formatter.write_usage(ctx.command_path, "generate | convert ...", prefix=" " * len("Usage: "))

    def format_options(self, ctx, formatter):
        records = [param.get_help_record(ctx) for param in self.commands["run"].get_params(ctx)
                   if not isinstance(param, click.Argument)]
        with formatter.section("Options"):
            formatter.write_dl([record for record in records if record is not None])
        self.format_commands(ctx, formatter)


class _ReplayContext(click.Context):
    @property
    def command_path(self) -> str:
        """``sched simulate``, the form the docs give, in usage lines and hints."""
        return self.parent.command_path if self.parent is not None else super().command_path


class ReplayCommand(click.Command):
    context_class = _ReplayContext


@click.group(cls=SimulateGroup)
def simulate():
    """Replay a workload through the scheduler on a virtual clock and report how well it
    placed: utilisation, pending tasks, queueing delay per priority, preemptions, stranded
    resources, why tasks waited, tenants' shares; with --compact, the fewest nodes that
    still place it.

    \b
      sched simulate generate --kind batch --tasks 10000 --nodes 200 > trace.jsonl
      sched simulate trace.jsonl                        # a summary table
      sched simulate trace.jsonl --out report/          # report/index.html with plots
      sched simulate trace.jsonl --compare strategy=binpack --compare strategy=spread
      sched simulate trace.jsonl --compact --json       # nodes_needed and lower_bound
      sched simulate trace.jsonl --seed 7               # other tie-breaks
      sched simulate task_events.csv --nodes machine_events.csv   # Google's 2011 trace

    The replay runs the worker's own code (queue order, fair share, backoff, the commit's
    rules and quotas, preemption) against a private redis-server; nothing touches your
    cluster. The same trace, options and --seed give the same report, but for its wall
    times. The trace format is in docs/simulate.md."""


def _settings(text: str, base):
    """``strategy=binpack,nodes=200`` as Settings over ``base``."""
    import dataclasses

    changes = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in SETTING_KEYS:
            raise SpecError(f"--compare {text!r}: each setting is KEY=VALUE with KEY one of "
                            f"{', '.join(SETTING_KEYS)}.")
        if key == "strategy":
            if value not in ("binpack", "spread"):
                raise SpecError(f"--compare {text!r}: strategy is binpack or spread, not {value!r}.")
            changes["strategy"] = value
        else:
            try:
                number = int(value)
            except ValueError:
                raise SpecError(f"--compare {text!r}: {key} must be a whole number, not {value!r}.") from None
            if key == "nodes" and number < 1 or key == "percentage-of-nodes" and not 0 <= number <= 100:
                raise SpecError(f"--compare {text!r}: {key} {number} is out of range.")
            changes[key.replace("-", "_")] = number
    if not changes:
        raise SpecError(f"--compare {text!r} changes nothing; give KEY=VALUE ({', '.join(SETTING_KEYS)}).")
    return dataclasses.replace(base, **changes)


def _machine(text: str | None):
    if not text:
        return None
    from scheduler.model.quantities import parse_resources
    from scheduler.tools.simulate.google import Machine

    raw = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    parsed = parse_resources(raw, "--machine")
    if "cpu" not in parsed or "memory" not in parsed:
        raise SpecError("--machine needs cpu and memory, for example cpu=32,memory=128GiB.")
    return Machine(cpu=parsed["cpu"] / 1000, memory=parsed["memory"])


@simulate.command("run", cls=ReplayCommand, hidden=True)
@click.argument("trace", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--nodes", "nodes_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="The cluster: node events (JSON lines) or Google's 2011 machine_events CSV. "
                                   "Repeatable; needed when the trace has no nodes.")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "jsonl", "google-2011", "google-2019", "alibaba-2018"]),
              help="The trace's format; auto tells them apart by their first line.")
@click.option("--strategy", type=click.Choice(["binpack", "spread"]), default=None,
              help="Every job's strategy (default: each job's own, spread unless it says).")
@click.option("--percentage-of-nodes", type=click.IntRange(0, 100), default=None,
              help="The worker's percentage of nodes scored (0 = kube's adaptive default; unset = all).")
@click.option("--node-count", type=click.IntRange(1, 1_000_000), default=None, metavar="N",
              help="Replay on N nodes of the inventory's shape (its nodes at time 0, in turn) instead of the "
                   "traced cluster.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the placement's random tie-breaks: the same trace, options and seed give the same "
                   "report.")
@click.option("--compare", multiple=True, metavar="KEY=VALUE[,...]",
              help="A setting to run side by side (repeatable): strategy=binpack, percentage-of-nodes=50, "
                   "nodes=200, seed=1, or several joined by commas. The first run is the options as given.")
@click.option("--compact", is_flag=True,
              help="Also find the fewest nodes of the inventory's shape that place the trace (nothing left pending, "
                   "no wait over --max-wait), searched up from the lower bound for that wait, against it.")
@click.option("--max-wait", type=click.FloatRange(min=0), default=60.0, show_default=True, metavar="SECONDS",
              help="With --compact: the longest any task may wait.")
@click.option("--tick", type=click.FloatRange(min=0.001), default=1.0, show_default=True, metavar="SECONDS",
              help="The replay's resolution: events within one tick are scheduled together.")
@click.option("--until", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop the replay at this trace time.")
@click.option("--machine", default=None, metavar="cpu=N,memory=Q",
              help="What 1.0 is in a public trace's normalised requests (Google: cpu=32,memory=128GiB; "
                   "Alibaba: cpu=96,memory=512GiB).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write report.json, PNG plots and index.html there.")
@json_option
def run(trace, nodes_files, fmt, strategy, percentage_of_nodes, node_count, seed, compare, compact, max_wait, tick,
        until, machine, out, as_json):
    """Replay TRACE (one or more files of one format) and report how well it placed."""
    from scheduler.tools.simulate import Simulator, private_redis
    from scheduler.tools.simulate.compact import compact as find_fewest
    from scheduler.tools.simulate.formats import load
    from scheduler.tools.simulate.replay import Settings

    import signal

    # A TERM ends the replay as an interrupt does, so its private redis-server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for path in (*trace, *nodes_files):
        if not path.exists():
            raise SpecError(f"{path} does not exist.")
    base = Settings(strategy=strategy, percentage_of_nodes=percentage_of_nodes, nodes=node_count, tick_s=tick,
                    until_s=until, seed=seed)
    settings = [base, *(_settings(text, base) for text in compare)]
    loaded = load(list(trace), fmt, list(nodes_files) or None, _machine(machine))
    reports = []
    with private_redis() as url:
        simulator = Simulator(url, progress=_progress if sys.stderr.isatty() else None)
        for setting in settings:
            if compact:
                found = find_fewest(simulator.replay, loaded, setting, max_wait)
                report = dict(simulator.replay(loaded, setting))
                report.update(nodes_needed=found["nodes_needed"], lower_bound=found["lower_bound"],
                              lower_bound_per_resource=found["lower_bound_per_resource"],
                              peak_demand_nodes=found["peak_demand_nodes"], max_wait_s=max_wait,
                              compaction=found["tries"])
            else:
                report = simulator.replay(loaded, setting)
            reports.append(report)
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")  # the progress line goes
    if out is not None:
        from scheduler.tools.simulate.page import write

        index = write(out, reports)
        if not as_json:
            click.echo(f"Wrote {index}", err=True)
    if as_json:
        shown = [{k: v for k, v in r.items() if k not in ("series", "tenant_series")} for r in reports]
        print_json(shown[0] if len(shown) == 1 else {"runs": shown})
        return
    _print_summary(reports)


def _progress(now_ms: int, end_ms: int, recorder) -> None:
    """One line on a terminal, rewritten in place, while a replay runs."""
    sys.stderr.write(f"\rsimulating: {now_ms / 1000:,.0f} of {end_ms / 1000:,.0f} s of trace, "
                     f"{recorder.placed:,} placed, {len(recorder.pending):,} waiting   ")
    sys.stderr.flush()


def _print_summary(reports: list[dict]) -> None:
    from scheduler.tools.render import print_table

    resources = list(reports[0]["utilisation"])
    rows = [["tasks", *(r["tasks"] for r in reports)],
            ["placed", *(r["placed"] for r in reports)],
            ["pending at the end", *(r["pending_at_end"] for r in reports)]]
    rows += [[f"utilisation {res}, whole replay", *(f"{r['utilisation'][res]:.1%}" for r in reports)]
             for res in resources]
    rows += [[f"utilisation {res}, arrival window", *(f"{r['utilisation_arrival_window'][res]:.1%}" for r in reports)]
             for res in resources]
    rows += [[f"stranded {res}", *(f"{r['stranded'][res]:.1%}" for r in reports)] for res in resources]
    priorities = sorted({int(p) for r in reports for p in r["queueing_delay_s"]}, reverse=True)
    for p in priorities:
        rows.append([f"wait p50/p95/p99 (s), priority {p}",
                     *("/".join(str(r["queueing_delay_s"].get(str(p), {}).get(q, "-")) for q in ("p50", "p95", "p99"))
                       for r in reports)])
    rows.append(["preemptions", *(r["preemptions"] for r in reports)])
    if "nodes_needed" in reports[0]:
        rows.append([f"nodes needed, wait <= {reports[0]['max_wait_s']:g} s", *(r["nodes_needed"] for r in reports)])
        rows.append(["lower bound", *(r["lower_bound"] for r in reports)])
        rows.append(["peak demand (nodes)", *(r["peak_demand_nodes"] for r in reports)])
    rows.append(["simulated (s) / wall (s)", *(f"{r['simulated_s']:g} / {r['wall_s']:g}" for r in reports)])
    print_table(["", *(r["settings"] for r in reports)], rows)


@simulate.command("generate")
@click.option("--kind", type=click.Choice(["batch", "service"]), required=True,
              help="batch: 90% batch tasks (short, heavy-tailed); service: 60% long-running service tasks.")
@click.option("--tasks", type=click.IntRange(0, 100_000_000), required=True, help="Tasks to generate (0: nodes only).")
@click.option("--nodes", type=click.IntRange(1, 1_000_000), required=True,
              help="Nodes, in the machine mix of Google's 2011 trace.")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same trace.")
@click.option("--span", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Spread the arrivals over this many seconds (e.g. 86400: a day) instead of the window that "
                   "offers 75% of the cluster's cpu.")
def generate(kind, tasks, nodes, seed, span):
    """Print a synthetic trace (JSON lines) drawn from published distributions (docs/simulate.md)."""
    from scheduler.tools.simulate.generate import generate as make
    from scheduler.tools.simulate.trace import dump_event

    out = sys.stdout
    for record in make(kind, tasks, nodes, seed, span_s=span):
        out.write(dump_event(record) + "\n")


@simulate.command("convert")
@click.argument("trace", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "google-2011", "google-2019", "alibaba-2018", "google-2011-machines"]),
              help="The files' format.")
@click.option("--machine", default=None, metavar="cpu=N,memory=Q", help="What 1.0 is in normalised requests.")
def convert(trace, fmt, machine):
    """Print a public trace's events in the simulator's JSON-lines format (to edit, or to read faster)."""
    from scheduler.tools.simulate.formats import events_of
    from scheduler.tools.simulate.trace import dump_event

    for _where, _unit, _number, record in events_of(list(trace), fmt, _machine(machine)):
        sys.stdout.write(dump_event({k: v for k, v in record.items() if v is not None}) + "\n")

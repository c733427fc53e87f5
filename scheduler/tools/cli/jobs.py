"""``sched job``: submit, list, show, scale, plan and stop jobs."""

from __future__ import annotations

import click

from scheduler.model.spec_text import load_specs
from scheduler.control import changes
from scheduler.model import SpecError
from scheduler.model.parameterized import MAX_PAYLOAD_BYTES, oversized_payload
from scheduler.model.quantities import parse_memory
from scheduler.tools.cli import complete
from scheduler.tools.cli.common import json_option, pass_app
from scheduler.tools.render import history_text, job_text, print_json, print_table


@click.group()
def job():
    """Submit, list, scale and stop jobs."""


def load_spec(file) -> dict:
    """The one job spec in ``file`` (YAML or JSON)."""
    documents = load_specs(file.read())
    if len(documents) != 1:
        raise SpecError(f"expected one job spec, found {len(documents)}.")
    return documents[0]


def unoffered_warnings(results: list[dict], namespace: str) -> list[str]:
    """One sentence per set of resources that submitted jobs ask for and no node of the
    namespace has offered (a bulk submit of like jobs says it once)."""
    jobs: dict[tuple, list[str]] = {}
    for result in results:
        if result.get("unoffered"):
            jobs.setdefault(tuple(result["unoffered"]), []).append(result["id"])
    lines = []
    for names, ids in jobs.items():
        if len(ids) == 1:
            who = f"job {ids[0]} asks"
        else:
            who = f"jobs {_listed(ids)} ask" if len(ids) <= 3 else f"{len(ids)} jobs ({ids[0]}, {ids[1]}, ...) ask"
        lines.append(f"{who} for {_listed(names)}, which no node of namespace {namespace} has offered; "
                     f"{'its' if len(ids) == 1 else 'their'} tasks wait until a node does.")
    return lines


def decimal_notes(results: list[dict]) -> list[str]:
    """One sentence per decimal memory amount that submitted jobs ask for (``10G`` is
    10,000,000,000 bytes, as in Kubernetes; Docker's ``10g`` is 10 GiB)."""
    jobs: dict[str, list[str]] = {}
    for result in results:
        if result.get("decimal_memory"):
            jobs.setdefault(result["decimal_memory"], []).append(result["id"])
    lines = []
    for amount, ids in jobs.items():
        number, unit = amount[:-1], amount[-1]
        exact = parse_memory(amount)
        who = f"job {ids[0]} asks" if len(ids) == 1 else (
            f"jobs {_listed(ids)} ask" if len(ids) <= 3 else f"{len(ids)} jobs ({ids[0]}, {ids[1]}, ...) ask")
        binary = exact / {"M": 2**20, "G": 2**30, "T": 2**40}[unit]
        lines.append(f"{who} for {amount} of memory, a decimal unit: {exact:,} bytes ({binary:.2f}{unit}i); "
                     f"write {number}{unit}i for {number} {unit}iB.")
    return lines


def _listed(names) -> str:
    return " and ".join(", ".join(names).rsplit(", ", 1))


@job.command("submit")
@click.argument("file", type=click.File("r"))
@json_option
@pass_app
def job_submit(app, file, as_json):
    """Submit job specs (YAML or JSON; - reads stdin) and print their ids.

    FILE holds one spec, several YAML documents (separated by ---) or JSON lines
    (one spec per line). All are checked first: if one is not valid, nothing is
    submitted and the error names it. With --json: one spec prints its result,
    several a list of results.

    \b
    id: web                  # optional
    type: service            # service | batch | global | sysbatch
    priority: 50             # 0..1000, higher goes first
    replicas: 3
    resources: {cpu: 0.5, memory: 256MiB}
    constraints: ["node.labels.zone==eu-1"]
    preferences: [{spread: node.labels.zone}]
    ports: [8080]
    strategy: spread         # spread | binpack
    max_per_node: 2
    run: {command: ["sleep", "1"]}
    health: {command: ["true"], interval: 1}
    update: {max_parallel: 2, min_healthy_time: 5}   # roll a new version out
    after: [{job: extract, state: complete}]        # wait for other jobs
    periodic: {cron: "0 2 * * *", time_zone: Europe/Berlin}   # batch: launched on a schedule
    parameterized: {meta_required: [customer]}      # batch: launched by sched job dispatch
    parallelism: 50          # batch: at most 50 live tasks at once
    reschedule: {delay: 5, delay_function: exponential, max_delay: 300}

    A changed job prints, after its id, what changed (see `sched job plan`).
    """
    results = app.submit_text(file.read())
    for line in unoffered_warnings(results, app.namespace):
        click.echo(f"Warning: {line}", err=True)
    for line in decimal_notes(results):
        click.echo(f"Note: {line}", err=True)
    if len(results) == 1:
        if as_json:
            return print_json(results[0])
        click.echo(results[0]["id"])
        return _echo_changes(results[0])
    if as_json:
        return print_json(results)
    click.echo("\n".join(result["id"] for result in results))


def _echo_changes(result: dict) -> None:
    """Below a changed job's id: what the submit changed (nothing for a new job)."""
    change = result.get("changes")
    if change and change["action"] not in (changes.CREATE, changes.NONE):
        click.echo("\n".join(changes.lines(change, result["id"])))
        if result.get("deployment"):
            click.echo(f"  follow it: sched deployment status -f {result['deployment']}")


@job.command("ls")
@json_option
@pass_app
def job_ls(app, as_json):
    """List jobs with their task counts by state."""
    records = app.jobs()
    if as_json:
        return print_json(records)
    rows = [[r["id"], r["type"], r["status"], r["priority"], "per node" if r["replicas"] is None else r["replicas"],
             r["version"],
             " ".join(f"{s}={n}" for s, n in sorted(r["tasks"].items()))] for r in records]
    headers = ["ID", "TYPE", "STATUS", "PRIORITY", "REPLICAS", "VERSION", "TASKS"]
    if any("next_launch" in r for r in records):  # periodic jobs: when each launches next
        headers.append("NEXT LAUNCH")
        for row, r in zip(rows, records):
            row.append(r.get("next_launch") or ("" if "next_launch" not in r else
                                                "suspended" if r.get("suspended") else "none"))
    print_table(headers, rows)


@job.command("show")
@click.argument("job_id", metavar="ID", shell_complete=complete.job_ids)
@json_option
@pass_app
def job_show(app, job_id, as_json):
    """Show a job's spec and status, and who did what to it (its history)."""
    job = {**app.job(job_id), "history": app.audit_trail(job=job_id)}
    if as_json:
        return print_json(job)
    click.echo(job_text(job))
    click.echo(history_text(job["history"]))


class _ScaleCommand(click.Command):
    """``sched job scale web -1``: a negative count is a wrong number of replicas, not an
    option click does not know."""

    def parse_args(self, ctx, args):
        for arg in args:
            if arg[:1] == "-" and arg[1:].isdigit():
                raise SpecError(f"replicas must be a whole number from 0 to 1000000, not {arg}; 0 stops every task "
                                f"of the job.")
        return super().parse_args(ctx, args)


@job.command("scale", cls=_ScaleCommand)
@click.argument("job_id", metavar="ID", shell_complete=complete.job_ids)
@click.argument("replicas", type=click.IntRange(0, 1_000_000))
@json_option
@pass_app
def job_scale(app, job_id, replicas, as_json):
    """Set a job's replicas: add tasks, or stop the newest."""
    result = app.scale(job_id, replicas)
    if as_json:
        return print_json(result)
    click.echo(f"job {job_id}: {len(result['added'])} added, {len(result['stopped'])} stopped")


@job.command("plan")
@click.argument("file", type=click.File("r"))
@json_option
@pass_app
def job_plan(app, file, as_json):
    """Dry run: where a job spec's tasks would go now, what they would preempt, and why
    any would wait. Changes nothing."""
    result = app.plan(load_spec(file))
    if as_json:
        return print_json(result)
    if result["changes"]["action"] not in (changes.CREATE, changes.NONE):
        click.echo("\n".join(changes.lines(result["changes"], result["job"])))
    if result.get("unchanged"):
        return click.echo(f"job {result['job']}: the spec is the running job's; nothing changes")
    if result.get("stopping"):
        return click.echo(f"job {result['job']}: {result['stopping']} task(s) would stop; nothing to place")
    rows = [[p["task"], p["node"], ""] for p in result["placements"]]
    rows += [[p["task"], p["node"], "preempts " + ", ".join(f"{v['id']} (priority {v['priority']})"
                                                            for v in p["victims"])] for p in result["preemptions"]]
    gang = result.get("gang")
    if gang is not None and not gang["fits"]:  # the gang waits whole: one explanation for all its members
        rows += [[p["task"], "-", "waits with its gang"] for p in result["pending"]]
    else:
        rows += [[p["task"], "-", p["message"]] for p in result["pending"]]
    print_table(["TASK", "NODE", "NOTE"], rows, title=f"plan for job {result['job']}")
    if gang is not None:  # one line for the gang as a unit
        whole = f"gang {result['job']} (gang of {gang['size']}): " + ("placed whole" if gang["fits"] else "waits whole")
        click.echo(whole + (f": {gang['message']}" if gang["message"] else ""))


@job.command("history")
@click.argument("job_id", metavar="ID", shell_complete=complete.job_ids)
@json_option
@pass_app
def job_history(app, job_id, as_json):
    """A job's versions, with what each changed and how its deployment went."""
    versions = app.history(job_id)
    if as_json:
        return print_json(versions)
    for v in versions:
        marks = [word for word, on in (("current", v["current"]), ("last healthy", v["stable"])) if on]
        deployed = f"deployment {v['deployment']}: {v['deployment_state']}" if v["deployment"] else "no deployment"
        click.echo(f"version {v['version']}" + (f" ({', '.join(marks)})" if marks else "") + f": {deployed}")
        for item in v["changes"]:
            click.echo(f"  ~ {item['field']}: {changes.show(item['old'])} -> {changes.show(item['new'])}")


@job.command("revert")
@click.argument("job_id", metavar="ID", shell_complete=complete.job_ids)
@click.argument("version", type=click.IntRange(1, None))
@json_option
@pass_app
def job_revert(app, job_id, version, as_json):
    """Run an earlier version's spec again, as a new version (rolled out as that spec says)."""
    result = app.revert(job_id, version)
    if as_json:
        return print_json(result)
    click.echo(result["id"])
    _echo_changes(result)


@job.command("stop")
@click.argument("job_id", metavar="ID", shell_complete=complete.job_ids)
@pass_app
def job_stop(app, job_id):
    """Stop every task of a job and release what they hold."""
    result = app.stop(job_id)
    click.echo(f"job {job_id} stopped ({len(result['stopped'])} task(s))")


@job.command("launch")
@click.argument("job_id", metavar="ID", shell_complete=complete.periodic_job_ids)
@json_option
@pass_app
def job_launch(app, job_id, as_json):
    """Launch a periodic job now, outside its schedule (Nomad's `periodic force`), and print
    the launch's job id (ID/periodic-<unix time>). Its overlap policy applies: with
    `overlap: forbid` a launch still running refuses it; `replace` stops it first."""
    result = app.launch(job_id)
    if as_json:
        return print_json(result)
    click.echo(result["launched"])


@job.command("suspend")
@click.argument("job_id", metavar="ID", shell_complete=complete.periodic_job_ids)
@json_option
@pass_app
def job_suspend(app, job_id, as_json):
    """Launch no tick of a periodic job until `sched job resume` (kube's suspend). Its
    running launches go on."""
    result = app.suspend(job_id)
    if as_json:
        return print_json(result)
    if not result["changed"]:
        return click.echo(f"job {job_id} is already suspended: no tick is launched until `sched job resume {job_id}`")
    click.echo(f"job {job_id} suspended: no tick is launched until `sched job resume {job_id}`")


@job.command("resume")
@click.argument("job_id", metavar="ID", shell_complete=complete.periodic_job_ids)
@json_option
@pass_app
def job_resume(app, job_id, as_json):
    """Launch a suspended periodic job's ticks again, from the next one on (the ticks in
    between are not run)."""
    result = app.resume(job_id)
    if as_json:
        return print_json(result)
    nxt = result["next_launch"] or "none (its schedule has ended)"
    click.echo(f"job {job_id} resumed: next launch {nxt}" if result["changed"]
               else f"job {job_id} is not suspended: next launch {nxt}")


@job.command("dispatch")
@click.argument("job_id", metavar="ID", shell_complete=complete.parameterized_job_ids)
@click.option("--meta", "metas", multiple=True, metavar="KEY=VALUE",
              help="A meta value the job takes (repeat for each); its commands see SCHED_META_<KEY>.")
@click.option("--payload", type=click.File("rb"), default=None, metavar="FILE|-",
              help="A file (- for stdin) of at most 16 KiB; its commands read it from the file SCHED_PAYLOAD names.")
@click.option("--idempotency-token", "token", default=None, metavar="T",
              help="A dispatch with a token the job has seen prints the launch that dispatch made instead.")
@json_option
@pass_app
def job_dispatch(app, job_id, metas, payload, token, as_json):
    """Launch a parameterized job with its input (Nomad's `job dispatch`) and print the
    launch's job id (ID/dispatch-<unix time>-<8 hex digits>).

    \b
    sched job dispatch render --meta customer=acme --payload order.json
    sched job dispatch render --meta customer=acme --idempotency-token order-1234
    """
    meta = {}
    for item in metas:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SpecError(f"--meta {item!r} must look like KEY=VALUE.")
        meta[key] = value
    data = None
    if payload is not None:
        data = payload.read(MAX_PAYLOAD_BYTES + 1)
        if len(data) > MAX_PAYLOAD_BYTES:  # count the rest without keeping it: the sentence gives the whole size
            size = len(data)
            while chunk := payload.read(1 << 16):
                size += len(chunk)
            raise oversized_payload(job_id, size)
    result = app.dispatch(job_id, meta, data, token)
    if as_json:
        return print_json(result)
    click.echo(result["dispatched"])

"""``sched``: the command line.

One click group; global options pick the Redis and the namespace, and the connection is
made only when a command needs it. Every listing takes ``--json`` and then prints only
JSON on stdout. Errors a user can cause print one sentence and exit 2.
"""

from __future__ import annotations

import os
import sys

import click
import yaml

from scheduler.client import Client, load_specs
from scheduler.control.processes import process
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.model import TASK_STATES, SchedError, SpecError, Task, make_node
from scheduler.state.app import App, default_namespace
from scheduler.tools import logs
from scheduler.tools.render import print_json, print_table, usage
from scheduler.tools.ui.command import ui


class SchedGroup(click.Group):
    """Turns the scheduler's own errors into one line on stderr and a non-zero exit."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SchedError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # one sentence, like our own errors
            message = exc.format_message().rstrip(".")
            click.echo(f"Error: {message}.", err=True)
            ctx.exit(2)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON only, for scripts.")(f)


pass_app = click.make_pass_decorator(Client)


@click.group(cls=SchedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--redis-url", envvar="SCHED_REDIS_URL", default=None, metavar="URL",
              help="Redis to use (also SCHED_REDIS_URL, then REDIS_URL). Default: a private embedded "
                   "redis-server under ~/.local/state/sched (SCHED_HOME), started on first use.")
@click.option("--namespace", "-n", default=None, metavar="NS",
              help="Namespace: independent clusters in one Redis (also SCHED_NAMESPACE). Default: default.")
@click.option("--wait-replicas", type=click.IntRange(0, 64), envvar="SCHED_WAIT_REPLICAS", default=None, metavar="N",
              help="After each placement commit, submission and task end, WAIT until N replicas have it "
                   "(also SCHED_WAIT_REPLICAS; default 0 = off). See docs/reliability.md, Failover.")
@click.pass_context
def main(ctx, redis_url, namespace, wait_replicas):
    """A Redis-backed cluster scheduler.

    Register nodes, submit jobs of identical tasks, and run workers that place the tasks
    on nodes that fit, spread or pack them as asked, and explain what is still pending.

    \b
    Quick start (uses the embedded Redis):
      sched node add n1 --cpu 4 --memory 8GiB --label zone=eu-1
      sched job submit web.yaml
      sched worker --until-idle
      sched task ls
      sched task explain web.0
    """
    if wait_replicas is not None:  # child processes (workers, RQ work horses) follow it too
        os.environ["SCHED_WAIT_REPLICAS"] = str(wait_replicas)
    ctx.obj = Client(app=App(redis_url=redis_url, namespace=default_namespace() if namespace is None else namespace,
                             wait_replicas=wait_replicas))


# ----------------------------------------------------------------------------- nodes
@main.group()
def node():
    """Register, list and change nodes."""


def node_options(f):
    """The options that describe a node, shared by `node add` and `agent`."""
    options = [
        click.option("--cpu", required=True, help="Cores, e.g. 4, 0.5 or 500m."),
        click.option("--memory", required=True, help="Memory, e.g. 8GiB, 512Mi or 2G."),
        click.option("--gpu", default=None, help="GPUs (a generic resource)."),
        click.option("--resource", "resources", multiple=True, metavar="NAME=N", help="Another generic resource."),
        click.option("--label", "labels", multiple=True, metavar="K=V", help="Node label (node.labels.K)."),
        click.option("--engine-label", "engine_labels", multiple=True, metavar="K=V",
                     help="Engine label (engine.labels.K)."),
        click.option("--os", "os_", default="linux", show_default=True, help="node.platform.os"),
        click.option("--arch", default="amd64", show_default=True, help="node.platform.arch"),
        click.option("--role", default="worker", show_default=True, help="node.role"),
        click.option("--plugin", "plugins", multiple=True, help="A plugin the node provides (jobs may require it)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def node_from_options(name, cpu, memory, gpu, resources, labels, engine_labels, os_, arch, role, plugins):
    extra = {}
    for item in resources:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--resource {item!r} must look like NAME=N.")
        extra[key.strip()] = value.strip()
    if gpu is not None:
        extra["gpu"] = gpu
    return make_node(name, cpu=cpu, memory=memory, resources=extra, labels=list(labels),
                     engine_labels=list(engine_labels), os=os_, arch=arch, role=role, plugins=list(plugins))


@node.command("add")
@click.argument("name")
@node_options
@pass_app
def node_add(app, name, **options):
    """Register a node, or update an existing one (what runs on it is kept).

    A node added this way has no agent: it stays ready until changed, which is what
    simulations and benchmarks want. `sched agent NAME` registers a node that runs work.
    """
    described = node_from_options(name, **options)  # validate before connecting to (or starting) Redis
    created = app.put_node(described)
    click.echo(f"node {name} {'added' if created else 'updated'}")


def node_record(n, tasks: int) -> dict:
    return {"name": n.name, "capacity": n.capacity, "allocated": {r: n.allocated.get(r, 0) for r in n.capacity},
            "labels": n.labels, "availability": n.availability, "status": n.status, "tasks": tasks,
            "platform": {"os": n.os, "arch": n.arch}, "role": n.role, "plugins": sorted(n.plugins)}


def all_namespaces_option(f):
    return click.option("--all-namespaces", "-A", "every", is_flag=True,
                        help="Every namespace (cell) of this Redis, each record with its namespace.")(f)


def cells(app, every: bool) -> list:
    """(namespace, Client) for the namespace given, or for every registered namespace."""
    if not every:
        return [(app.namespace, app)]
    return [(ns, Client(app=App(client=app.app.client, namespace=ns))) for ns in sorted(app.store.namespaces())]


@node.command("ls")
@all_namespaces_option
@json_option
@pass_app
def node_ls(app, every, as_json):
    """List nodes with their capacity, allocation and task count.

    In --json, cpu is in millicores, memory in bytes, other resources in units.
    """
    records = [{**node_record(n, n.tasks), **({"namespace": ns} if every else {})}
               for ns, client in cells(app, every) for n in client.nodes()]
    if as_json:
        return print_json(records)
    rows = [[*([r["namespace"]] if every else []), r["name"], r["status"], r["availability"], r["tasks"],
             usage(r["capacity"], r["allocated"]),
             ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items()))] for r in records]
    print_table([*(["NAMESPACE"] if every else []), "NAME", "STATUS", "AVAILABILITY", "TASKS", "ALLOCATED/CAPACITY",
                 "LABELS"], rows)


def _availability_command(name: str, value: str, doc: str):
    @node.command(name, help=doc)
    @click.argument("node_name", metavar="NAME")
    @pass_app
    def command(app, node_name):
        if value == "drain":
            report = app.drain_report(node_name)
            stopped, queued = len(report["stopped"]), len(report["replacements"])
            if report["before"] == "drain" and not stopped:
                click.echo(f"node {node_name} is already drained")
            else:
                click.echo(f"node {node_name} drained: {stopped} task(s) stopped; "
                           f"{queued} replacement(s) queued")
        else:
            before = app.pause(node_name) if value == "pause" else app.activate(node_name)
            if before == value:
                click.echo(f"node {node_name} is already {'paused' if value == 'pause' else value}")
            else:
                click.echo(f"node {node_name}: {before} -> {value}")
    return command


_availability_command("drain", "drain", "Stop placing tasks on a node and move its tasks elsewhere.")
_availability_command("pause", "pause", "Stop placing new tasks on a node; what runs there stays.")
_availability_command("activate", "active", "Let the scheduler place tasks on a node again.")


@node.command("rm")
@click.argument("name")
@pass_app
def node_rm(app, name):
    """Remove a node that runs no tasks (drain it first)."""
    app.remove_node(name)
    click.echo(f"node {name} removed")


# ----------------------------------------------------------------------------- jobs
@main.group()
def job():
    """Submit, list, scale and stop jobs."""


def load_spec(file) -> dict:
    """The one job spec in ``file`` (YAML or JSON)."""
    documents = load_specs(file.read())
    if len(documents) != 1:
        raise SpecError(f"expected one job spec, found {len(documents)}.")
    return documents[0]


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
    type: service            # service | batch | global
    priority: 50             # 0..1000, higher goes first
    replicas: 3
    resources: {cpu: 0.5, memory: 256MiB}
    constraints: ["node.labels.zone==eu-1"]
    preferences: [{spread: node.labels.zone}]
    ports: [8080]
    strategy: spread         # spread | binpack
    max_per_node: 2
    run: {command: ["sleep", "1"]}
    """
    results = app.submit_text(file.read())
    if len(results) == 1:
        if as_json:
            return print_json(results[0])
        return click.echo(results[0]["id"])
    if as_json:
        return print_json(results)
    click.echo("\n".join(result["id"] for result in results))


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
    print_table(["ID", "TYPE", "STATUS", "PRIORITY", "REPLICAS", "VERSION", "TASKS"], rows)


@job.command("show")
@click.argument("job_id", metavar="ID")
@json_option
@pass_app
def job_show(app, job_id, as_json):
    """Show a job's spec and status."""
    job = app.job(job_id)
    if as_json:
        return print_json(job)
    click.echo(yaml.safe_dump({"status": job["status"], "version": job["version"], **job["spec"]},
                              sort_keys=False).rstrip())


@job.command("scale")
@click.argument("job_id", metavar="ID")
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


@job.command("stop")
@click.argument("job_id", metavar="ID")
@pass_app
def job_stop(app, job_id):
    """Stop every task of a job and release what they hold."""
    result = app.stop(job_id)
    click.echo(f"job {job_id} stopped ({len(result['stopped'])} task(s))")


# ----------------------------------------------------------------------------- tasks
@main.group()
def task():
    """List tasks and explain why one is pending."""


def task_record(t: Task) -> dict:
    return {"id": t.id, "job": t.job, "state": t.state, "node": t.node or None, "priority": t.priority,
            "attempts": t.attempts}


@task.command("ls")
@click.option("--job", "job_id", default=None, help="Only this job's tasks.")
@click.option("--state", type=click.Choice(TASK_STATES), default=None, help="Only tasks in this state.")
@click.option("--node", "node_name", default=None, help="Only tasks on this node.")
@json_option
@pass_app
def task_ls(app, job_id, state, node_name, as_json):
    """List tasks (id, job, state, node, priority)."""
    records = [task_record(t) for t in app.tasks(job=job_id, state=state, node=node_name)]
    if as_json:
        return print_json(records)
    print_table(["ID", "JOB", "STATE", "NODE", "PRIORITY", "ATTEMPTS"],
                [[r["id"], r["job"], r["state"], r["node"] or "", r["priority"], r["attempts"]] for r in records])


@task.command("explain")
@click.argument("task_id", metavar="ID")
@json_option
@pass_app
def task_explain(app, task_id, as_json):
    """Say why a task is where it is: for a pending task, what each node lacked."""
    record = app.explain(task_id)
    if as_json:
        return print_json(record)
    click.echo(f"{record['id']}: {record['state']}")
    gang = record.get("gang")
    if gang is not None:
        size = f"{gang['size']} tasks, all at once" if gang["size"] == gang["min_available"] else \
            f"{gang['size']} tasks, at least {gang['min_available']} at once"
        click.echo(f"gang {gang['job']} ({size})" + ("; it waits whole with its gang" if gang["waits"] else ""))
    if record.get("tenant"):
        click.echo(f"tenant {record['tenant']}")
    click.echo(record["message"])


@task.command("logs")
@click.argument("task_id", metavar="ID")
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


# ----------------------------------------------------------------------------- queue
@main.group()
def queue():
    """Inspect the scheduling queue."""


@queue.command("ls")
@all_namespaces_option
@json_option
@pass_app
def queue_ls(app, every, as_json):
    """Count the tasks in each queue: active, backoff, unschedulable, inflight.

    With --all-namespaces, --json prints one record per namespace: {"namespace", and the
    same counts}."""
    if every:
        records = [{"namespace": ns, **client.queue_counts()} for ns, client in cells(app, True)]
        if as_json:
            return print_json(records)
        names = ["active", "backoff", "unschedulable", "inflight"]
        return print_table(["NAMESPACE", *(n.upper() for n in names)], [[r["namespace"], *(r.get(n, 0) for n in names)]
                                                                         for r in records])
    counts = app.queue_counts()
    if as_json:
        return print_json(counts)
    keys = app.app.keys
    print_table(["QUEUE", "TASKS", "KEY"], [[name, count, getattr(keys, name)] for name, count in counts.items()])


# ----------------------------------------------------------------------------- quotas and tenants
@main.group()
def quota():
    """Per-namespace quotas: what the namespace's live tasks may hold at most."""


@quota.command("set")
@click.argument("namespace_name", metavar="NS")
@click.option("--cpu", default=None, help="cores, e.g. 100 or 500m")
@click.option("--memory", default=None, help="bytes, e.g. 200GiB")
@click.option("--tasks", type=int, default=None, help="live tasks")
@json_option
@pass_app
def quota_set(app, namespace_name, cpu, memory, tasks, as_json):
    """Set NS's quota; a task that would exceed it stays pending with the reason."""
    client = Client(app=App(client=app.app.client, namespace=namespace_name))
    record = client.set_quota(cpu=cpu, memory=memory, tasks=tasks)
    if as_json:
        return print_json(record)
    click.echo(f"quota of {namespace_name}: {_quantities(record['quota'])}")


@quota.command("rm")
@click.argument("namespace_name", metavar="NS")
@pass_app
def quota_rm(app, namespace_name):
    """Remove NS's quota."""
    removed = Client(app=App(client=app.app.client, namespace=namespace_name)).remove_quota()
    click.echo(f"quota of {namespace_name} {'removed' if removed else 'was not set'}")


@quota.command("ls")
@json_option
@pass_app
def quota_ls(app, as_json):
    """Every namespace with a quota: its limits and what its live tasks hold."""
    records = app.quotas()
    if as_json:
        return print_json(records)
    print_table(["NAMESPACE", "QUOTA", "USED"],
                [[r["namespace"], _quantities(r["quota"]), _quantities(r["used"])] for r in records])


@main.group()
def tenant():
    """Tenants sharing the namespace's nodes by dominant resource fairness."""


@tenant.command("set")
@click.argument("name")
@click.option("--weight", type=float, required=True, help="share relative to other tenants (default 1)")
@json_option
@pass_app
def tenant_set(app, name, weight, as_json):
    """Set a tenant's weight: a tenant of weight 2 gets twice the dominant share of weight 1."""
    record = app.set_tenant(name, weight)
    if as_json:
        return print_json(record)
    click.echo(f"tenant {name}: weight {record['weight']:g}")


@tenant.command("ls")
@json_option
@pass_app
def tenant_ls(app, as_json):
    """Each tenant's weight, usage and dominant share."""
    records = app.tenants()
    if as_json:
        return print_json(records)
    print_table(["TENANT", "WEIGHT", "USED", "DOMINANT SHARE"],
                [[r["name"], f"{r['weight']:g}", _quantities(r["used"]), f"{r['dominant_share']:.3f}"] for r in records])


def _quantities(values: dict) -> str:
    from scheduler.model.quantities import format_quantity
    return ",".join(f"{k}={v if k == 'tasks' else format_quantity(k, v)}" for k, v in sorted(values.items())) or "-"


# ----------------------------------------------------------------------------- events
@main.command()
@click.option("--count", type=int, default=None, help="Stop after this many events.")
@pass_app
def events(app, count):
    """Follow the events channel: one JSON object per line (task and node changes)."""
    seen = 0
    with app.store.subscribe() as subscription:
        try:
            for line in subscription.lines():
                click.echo(line)
                seen += 1
                if count is not None and seen >= count:
                    break
        except KeyboardInterrupt:
            pass


# ----------------------------------------------------------------------------- worker
def run_options(f):
    """--metrics-port, --log-level and --log-format, shared by `worker` and `agent`."""
    options = [
        click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
                     help="Serve Prometheus metrics on PORT/metrics (all interfaces). With --concurrency N, "
                          "worker process i serves on PORT+i."),
        click.option("--log-level", type=click.Choice(logs.LEVELS), default="info", show_default=True,
                     help="Least severe log records shown (on stderr)."),
        click.option("--log-format", type=click.Choice(logs.FORMATS), default="text", show_default=True,
                     help="text, or json: one JSON object per line (time, level, logger, message, fields)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@main.command()
@click.option("--concurrency", "-c", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker loops to run, each in its own process (placement is CPU-bound).")
@click.option("--batch-size", "-b", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Tasks claimed per batch; identical tasks in a batch are placed together.")
@click.option("--lease", "lease_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds a claim is held before other workers may take the tasks back.")
@click.option("--until-idle", is_flag=True, help="Exit once nothing is left that could be scheduled.")
@click.option("--percentage-of-nodes", type=click.IntRange(0, 100), default=None,
              help="Score only this share of nodes per task (0 = kube's adaptive default; unset = all).")
@click.option("--seed", type=int, default=None, help="Seed for tie-breaking, to replay a run.")
@click.option("--namespace", "-n", "cells_", multiple=True, metavar="NS",
              help="Serve this cell (namespace); repeat for several, served in turn, one batch each "
                   "(instead of the global -n).")
@click.option("--all-namespaces", "every", is_flag=True,
              help="Serve every cell of the registry sched:namespaces, and those created later.")
@click.option("--repair-on-start", is_flag=True,
              help="Make each cell's bookkeeping agree with its tasks before serving it (sched audit --repair); "
                   "for a restart after a failover, with no other worker running.")
@run_options
@json_option
@pass_app
def worker(app, concurrency, batch_size, lease_s, until_idle, percentage_of_nodes, seed, cells_, every,
           repair_on_start, metrics_port, log_level, log_format, as_json):
    """Run scheduler workers: claim pending tasks, place them, commit atomically.

    Run as many as you like, on as many machines as you like, against the same Redis:
    they coordinate only through it. SIGTERM (or Ctrl-C) lets each finish or hand back
    its current batch, then exits 0.
    """
    logs.configure(log_level, log_format)
    config = WorkerConfig(batch_size=batch_size, lease_ms=int(lease_s * 1000), until_idle=until_idle,
                          placement=PlacementOptions(percentage_of_nodes_to_score=percentage_of_nodes, seed=seed),
                          metrics_port=metrics_port, wait_replicas=app.app.wait_replicas,
                          repair_on_start=repair_on_start)
    if every and cells_:
        raise SpecError("give --namespace or --all-namespaces, not both.")
    totals = app.run_workers(concurrency, config=config,
                             namespaces=[] if every else (list(dict.fromkeys(cells_)) if cells_ else None))
    if as_json:
        print_json(totals)
    else:
        click.echo("workers stopped: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    if totals.get("crashed"):
        click.echo(f"Error: {totals['crashed']} worker process(es) exited abnormally.", err=True)
        sys.exit(1)


# ----------------------------------------------------------------------------- audit
@main.command()
@click.option("--repair", is_flag=True, help="Make the bookkeeping agree with the tasks (the truth), then check again.")
@all_namespaces_option
@json_option
@pass_app
def audit(app, repair, every, as_json):
    """Check the namespace's invariants: no node over capacity, allocations, task sets,
    tallies and free sets equal to what the tasks hold, every pending task in one queue.

    With --repair, rewrite what disagrees from the task hashes: a pending task in no queue
    is queued again, a live task on a node that is gone is marked lost and replaced. Run
    it with no worker placing (after a failover, before restarting the workers). Exits 1
    if problems remain."""
    from scheduler.control import audit as checks

    records = []
    for ns, client in cells(app, every):
        record = {"namespace": ns}
        if repair:
            done = checks.repair(client.store)
            record.update(repaired=done["problems"], requeued=done["requeued"], lost=done["lost"],
                          replacements=done["replacements"])
        report = checks.audit(client.store)
        record.update(ok=report.ok, tasks=report.tasks, overcommits=report.overcommits, problems=report.problems)
        records.append(record)
    if as_json:
        print_json(records if every else records[0])
    else:
        for r in records:
            if r.get("repaired"):
                click.echo(f"{r['namespace']}: repaired {len(r['repaired'])} problem(s); requeued {r['requeued']}, "
                           f"lost {len(r['lost'])}")
            click.echo(f"{r['namespace']}: {'ok' if r['ok'] else 'PROBLEMS'} ({r['tasks']} tasks)")
            for problem in r["problems"]:
                click.echo(f"  {problem}")
    if not all(r["ok"] for r in records):
        sys.exit(1)


# ----------------------------------------------------------------------------- agent
@main.command()
@click.argument("name")
@node_options
@click.option("--heartbeat", "interval", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              help="Seconds between heartbeats; 3 missed ones mark the node down.")
@click.option("--slots", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Tasks this agent runs at the same time (RQ worker processes).")
@click.option("--rq-url", envvar="SCHED_RQ_URL", default=None, metavar="URL",
              help="The execution Redis RQ runs on (plain or Sentinel; also SCHED_RQ_URL). Default: the "
                   "scheduler's Redis, which must then not be a cluster (RQ cannot run on one).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Where the agent keeps the node's journal of what it runs (keep it across restarts). "
                   "Default: agents/NAMESPACE/NAME in sched's state folder ($SCHED_HOME).")
@run_options
@pass_app
def agent(app, name, interval, slots, rq_url, state_dir, metrics_port, log_level, log_format, **options):
    """Run a node agent: register NAME, heartbeat, and run the tasks placed on it (via RQ).

    Tasks go assigned -> running -> completed or failed. If the agent stops
    heartbeating for 3 intervals, the node goes down and its tasks are replaced
    elsewhere; when it comes back, it stops any task that was replaced meanwhile.
    """
    node = node_from_options(name, **options)
    logs.configure(log_level, log_format)
    app.app.url  # start the embedded server if there is no URL; the agent waits for a real one
    agent_app = App(redis_url=app.app.url, namespace=app.namespace, rq_url=rq_url,
                    wait_replicas=app.app.wait_replicas)
    agent_app.rq_client  # a cluster given as the RQ Redis is one sentence, before anything starts
    process("node-agent")(agent_app, node, interval_s=interval, slots=slots, metrics_port=metrics_port,
                          state_dir=state_dir)


# ----------------------------------------------------------------------------- server
@main.group()
def server():
    """The embedded Redis server: the one sched starts when no Redis URL is given."""


@server.command("status")
@json_option
def server_status(as_json):
    """Say whether the embedded server runs, and where (its socket and state folder)."""
    from scheduler.state.embedded import embedded_status

    status = embedded_status()
    if as_json:
        return print_json(status)
    if status["running"]:
        click.echo(f"embedded server running: {status['url']} (pid {status['pid']}, state in {status['directory']})")
    else:
        click.echo(f"embedded server not running (state in {status['directory']})")


@server.command("stop")
def server_stop():
    """Stop the embedded server; its data stays in its state folder for next time.

    It is started again by the next command that needs Redis."""
    from scheduler.state.embedded import state_dir, stop_embedded

    if stop_embedded():
        click.echo(f"embedded server stopped (state kept in {state_dir()})")
    else:
        click.echo("embedded server was not running")


# ----------------------------------------------------------------------------- demo
@main.command()
@click.option("--seconds", type=click.FloatRange(1, 3600), default=12.0, show_default=True,
              help="How long to watch the cluster run before the summary.")
@click.pass_context
def demo(ctx, seconds):
    """Run a small live cluster end to end: 4 agents, 2 workers, a mix of jobs.

    Uses the namespace 'demo' unless --namespace is given, and clears it first.
    Ctrl-C stops everything the demo started.
    """
    from scheduler.tools.demo import run_demo

    app = ctx.obj.app
    if ctx.parent.params.get("namespace") is None and "SCHED_NAMESPACE" not in os.environ:
        app = App(redis_url=app.redis_url, namespace="demo")
    ctx.exit(run_demo(app, seconds))


# ----------------------------------------------------------------------------- bench
@main.command()
@click.option("--nodes", type=click.IntRange(1, 1_000_000), default=5000, show_default=True,
              help="Static nodes to register, across 4 zones and 40 racks, mixed sizes.")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=100, show_default=True,
              help="Jobs to submit (a third zone-constrained, a third zone-spread, 1 in 20 bin-packed).")
@click.option("--replicas", type=click.IntRange(1, 1_000_000), default=None,
              help="Tasks per job.  [default: 100; 1 with --rate]")
@click.option("--workers", type=click.IntRange(1, 256), default=2, show_default=True,
              help="Worker processes.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Tasks a worker claims per batch.")
@click.option("--distinct", is_flag=True, help="Every task is its own job (no batching possible).")
@click.option("--small", is_flag=True,
              help="Tiny requests (cpu 0.05-0.2, memory 32-128 MiB; same constraints, spread and bin-packing), "
                   "so every task fits even on a small cluster.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed of the scenario (nodes, jobs, tie-breaks).")
@click.option("--percentage-of-nodes", type=click.IntRange(0, 100), default=None,
              help="The workers' --percentage-of-nodes (0 = kube's adaptive default; unset = score all nodes).")
@click.option("--redis-url", "bench_url", default=None, metavar="URL",
              help="Run against this Redis (also `sched --redis-url URL bench`; SCHED_REDIS_URL is ignored). "
                   "Default: a private redis-server in a temporary folder, stopped at the end.")
@click.option("--sweep", is_flag=True, help="Run the scenario at 1k, 5k, 20k and 100k nodes (same load per node) "
                                            "and report how the time per placement grows.")
@click.option("--sweep-nodes", default="1000,5000,20000,100000", show_default=True, metavar="N,N,...",
              help="Cluster sizes for --sweep.")
@click.option("--rate", type=click.FloatRange(min=1), default=None, metavar="TASKS_PER_S",
              help="Steady offered-load mode: submit this many tasks/s while the workers run; report p50/p99 "
                   "submit-to-assigned. The load is sent in ticks of 5 ms: each tick submits every job due "
                   "by then in one call.")
@click.option("--duration", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds of offered load measured with --rate.")
@click.option("--warmup", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds of offered load before the measured part, with --rate.")
@click.option("--gang", type=click.IntRange(0, 1_000_000), default=0, show_default=True, metavar="N",
              help="Jobs as gangs of N (each job's tasks split into gang: true jobs of N; the same tasks in all).")
@click.option("--tenants", type=click.IntRange(0, 1000), default=0, show_default=True, metavar="N",
              help="Jobs spread over N tenants t1..tN with weights 1..N (fair share between them).")
@click.option("--fair-window", type=click.IntRange(0, 1_000_000), default=None, metavar="N",
              help="The workers' fair-share window (0 = off).  [default: the workers' 2048]")
@click.option("--cells", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Run N cells (namespaces, on different masters of a cluster) at once, each with the scenario "
                   "and its own --workers; report aggregate and per-cell placements/s.")
@json_option
@click.pass_context
def bench(ctx, nodes, jobs, replicas, workers, batch_size, distinct, small, seed, percentage_of_nodes, bench_url, sweep,
          sweep_nodes, rate, duration, warmup, gang, tenants, fair_window, cells, as_json):
    """Measure scheduling throughput and latency on a synthetic cluster.

    \b
    Default scenario (fixed, seeded): 5,000 nodes (cpu 4/8/16/32, memory 8-64 GiB,
    4 zones, 40 racks); 100 jobs x 100 tasks (cpu 0.5-12, 1-3 GiB per core; a third
    constrained to a zone, a third spreading over zones, 1 in 20 bin-packed), all
    submitted before 2 worker processes start; they run until nothing is schedulable.
    Then the invariants are checked (exit 1 if any fails) and the results printed:
    placements_per_s (first claim to last commit; placements_per_s_from_start counts
    from the start of the worker processes), p50_ms/p99_ms (submit to assigned),
    commit_rejections, overcommits, unplaced, spread_skew, redis_bytes_per_task,
    worker_cpu_s, redis_cpu_s.

    Uses the namespace 'bench' (cleared first) unless one is given with the group's
    option, `sched -n NS bench`; that namespace must then be empty.
    """
    from scheduler.tools import bench as b

    group = ctx.parent
    url = bench_url
    if url is None and group.get_parameter_source("redis_url") == click.core.ParameterSource.COMMANDLINE:
        url = group.params["redis_url"]
    namespace = group.params.get("namespace") or b.DEFAULT_NAMESPACE
    clear = namespace == b.DEFAULT_NAMESPACE
    progress = not as_json
    if cells is not None:
        if sweep or rate is not None:
            raise SpecError("--cells cannot be combined with --sweep or --rate.")
        scenario = b.Scenario(nodes=nodes, jobs=jobs, replicas=replicas or b.DEFAULT_REPLICAS, workers=workers,
                              batch_size=batch_size, distinct=distinct, seed=seed,
                              percentage_of_nodes=percentage_of_nodes, gang=gang, tenants=tenants,
                              fair_window=fair_window, small=small)
        report = b.run_cells(scenario, cells, redis_url=url, progress=progress)
        print_json(report)
        ctx.exit(0 if report["invariants_ok"] else 1)
    if rate is not None:
        if sweep or distinct or gang or tenants or small:
            raise SpecError("--rate cannot be combined with --sweep, --distinct, --gang, --tenants or --small "
                            "(its requests are small already).")
        report = b.run_rate(rate, duration, warmup, nodes=nodes, replicas=replicas or 1, workers=workers,
                            batch_size=batch_size, seed=seed, redis_url=url, namespace=namespace, clear=clear,
                            progress=progress, percentage_of_nodes=percentage_of_nodes)
    else:
        scenario = b.Scenario(nodes=nodes, jobs=jobs, replicas=replicas or b.DEFAULT_REPLICAS, workers=workers,
                              batch_size=batch_size, distinct=distinct, seed=seed,
                              percentage_of_nodes=percentage_of_nodes, gang=gang, tenants=tenants,
                              fair_window=fair_window, small=small)
        if sweep:
            try:
                sizes = [int(part) for part in sweep_nodes.split(",") if part.strip()]
            except ValueError:
                raise SpecError(f"--sweep-nodes {sweep_nodes!r} must be numbers separated by commas.") from None
            if not sizes or min(sizes) < 1:
                raise SpecError("--sweep-nodes needs at least one positive node count.")
            report = b.run_sweep(scenario, sizes, redis_url=url, namespace=namespace, clear=clear,
                                 progress=progress)
        else:
            report = b.run_batch(scenario, redis_url=url, namespace=namespace, clear=clear, progress=progress)
    if as_json:
        print_json(report)
    else:
        b.print_report(report)
    if not report["invariants_ok"] or report["overcommits"]:
        ctx.exit(1)


main.add_command(ui)


def run():
    main(prog_name="sched")


if __name__ == "__main__":
    sys.exit(run())

"""``sched node``: register, list and change nodes; also the node options ``sched agent`` shares."""

from __future__ import annotations

import click

from scheduler.client.nodes import node_record
from scheduler.model import SpecError, make_node
from scheduler.model.taints import EFFECTS, parse_taint
from scheduler.tools.cli import complete
from scheduler.tools.cli.common import all_namespaces_option, cells, json_option, pass_app
from scheduler.tools.cli.drains import drain, drain_line
from scheduler.tools.render import history_text, print_json, print_table, usage


@click.group()
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
        click.option("--taint", "taints", multiple=True, metavar="KEY[=VALUE]:EFFECT",
                     help="A taint (NoSchedule, PreferNoSchedule or NoExecute): only jobs that tolerate it go "
                          "there. Repeat for several; given, they replace the node's taints."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def node_from_options(name, cpu, memory, gpu, resources, labels, engine_labels, os_, arch, role, plugins, taints=()):
    extra = {}
    for item in resources:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--resource {item!r} must look like NAME=N.")
        extra[key.strip()] = value.strip()
    if gpu is not None:
        extra["gpu"] = gpu
    return make_node(name, cpu=cpu, memory=memory, resources=extra, labels=list(labels),
                     engine_labels=list(engine_labels), os=os_, arch=arch, role=role, plugins=list(plugins),
                     taints=list(taints))


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


@node.command("ls")
@all_namespaces_option
@json_option
@pass_app
def node_ls(app, every, as_json):
    """List nodes with their capacity, allocation and live tasks (TASKS 3/4: 3 of an agent's 4 task slots).

    In --json, cpu is in millicores, memory in bytes, other resources in units.
    """
    records = []
    for ns, client in cells(app, every):
        draining = {d["node"]: d for d in client.drains()}
        records += [{**node_record(n, n.tasks, draining.get(n.name)), **({"namespace": ns} if every else {})}
                    for n in client.nodes()]
    if as_json:
        return print_json(records)
    shown = any("drain" in r for r in records)  # a column only while some drain is in progress
    rows = [[*([r["namespace"]] if every else []), r["name"], r["status"], r["availability"],
             f"{r['tasks']}/{r['slots']}" if r["slots"] else r["tasks"],
             usage(r["capacity"], r["allocated"]),
             ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())), ",".join(r["taints"]),
             *([r["drain"]["message"] if "drain" in r else ""] if shown else [])] for r in records]
    print_table([*(["NAMESPACE"] if every else []), "NAME", "STATUS", "AVAILABILITY", "TASKS", "ALLOCATED/CAPACITY",
                 "LABELS", "TAINTS", *(["DRAIN"] if shown else [])], rows)


@node.command("show")
@click.argument("name", shell_complete=complete.node_names)
@json_option
@pass_app
def node_show(app, name, as_json):
    """A node: status, availability, capacity and allocation, labels, taints, and its
    drain (in progress: what it waits for; else how the last one ended)."""
    n = app.node(name)
    last = app.drain_status(name)
    record = node_record(n, n.tasks, last if last["state"] else None)
    if as_json:
        return print_json(record)
    lines = [f"name: {n.name}", f"status: {n.status}", f"availability: {n.availability}", f"tasks: {n.tasks}",
             f"allocated/capacity: {usage(record['capacity'], record['allocated'])}",
             f"labels: {','.join(f'{k}={v}' for k, v in sorted(n.labels.items())) or '-'}",
             f"taints: {','.join(record['taints']) or '-'}"]
    if last["state"] == "draining":
        lines.append(drain_line(last))
    elif last["state"]:
        lines.append(f"last drain: {last['state']}: {last['message']}")
    click.echo("\n".join(lines))


@node.command("history")
@click.argument("name", shell_complete=complete.node_names)
@json_option
@pass_app
def node_history(app, name, as_json):
    """Who paused, drained or activated a node, and when (oldest first)."""
    app.node(name)  # one sentence if there is no such node
    entries = app.audit_trail(node=name)
    if as_json:
        return print_json(entries)
    click.echo(history_text(entries))


def _availability_command(name: str, value: str, doc: str):
    @node.command(name, help=doc)
    @click.argument("node_name", metavar="NAME", shell_complete=complete.node_names)
    @pass_app
    def command(app, node_name):
        before = app.pause(node_name) if value == "pause" else app.activate(node_name)
        if before == value:
            click.echo(f"node {node_name} is already {'paused' if value == 'pause' else value}")
        else:
            click.echo(f"node {node_name}: {before} -> {value}")
    return command


node.add_command(drain, "drain")
_availability_command("pause", "pause", "Stop placing new tasks on a node; what runs there stays (a drain in "
                                        "progress is cancelled).")
_availability_command("activate", "active", "Let the scheduler place tasks on a node again (a drain in progress is "
                                            "cancelled).")


@node.command("taint")
@click.argument("name", shell_complete=complete.node_names)
@click.argument("taint", metavar="KEY[=VALUE]:EFFECT")
@json_option
@pass_app
def node_taint(app, name, taint, as_json):
    """Taint a node: only tasks of jobs that tolerate the taint go there (kube's taints).

    EFFECT is NoSchedule (no new task that does not tolerate it), PreferNoSchedule (such
    tasks go there last) or NoExecute (as NoSchedule, and running tasks that do not
    tolerate it are stopped and replaced elsewhere, after their toleration_seconds).
    A taint of the same KEY and EFFECT is replaced. Example:
    `sched node taint gpu-1 dedicated=gpu:NoSchedule`.
    """
    parsed = parse_taint(taint)  # before connecting: bad input is one sentence
    result = app.taint(name, parsed)
    if as_json:
        return print_json(result)
    click.echo(f"node {name} tainted {parsed}" if result["after"] != result["before"]
               else f"node {name} already has taint {parsed}")


@node.command("untaint")
@click.argument("name", shell_complete=complete.node_names)
@click.argument("key", metavar="KEY[:EFFECT]")
@json_option
@pass_app
def node_untaint(app, name, key, as_json):
    """Remove a node's taints of KEY (of one EFFECT only, if given): `sched node untaint gpu-1 dedicated`."""
    key, _, effect = key.partition(":")
    if effect and effect not in EFFECTS:
        raise SpecError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}.")
    result = app.untaint(name, key, effect)
    if as_json:
        return print_json(result)
    click.echo(f"node {name} untainted {key}{':' + effect if effect else ''}" if result["after"] != result["before"]
               else f"node {name} has no taint {key}{':' + effect if effect else ''}")


@node.command("rm")
@click.argument("name", shell_complete=complete.node_names)
@pass_app
def node_rm(app, name):
    """Remove a node that runs no tasks (drain it first)."""
    app.remove_node(name)
    click.echo(f"node {name} removed")

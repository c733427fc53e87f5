"""``sched pool``: the catalogue of node shapes ``sched capacity`` scales by."""

from __future__ import annotations

import click

from scheduler.model import SpecError
from scheduler.tools.cli.common import json_option, pass_app, quantities
from scheduler.tools.render import print_json, print_table


@click.group()
def pool():
    """The node shapes the cluster can grow by (the cluster-autoscaler's node groups).

    \b
      sched pool add general --cpu 8 --memory 32GiB --cost 0.40
      sched pool add gpu --cpu 16 --memory 64GiB --gpu 2 --label accel=gpu \\
          --taint dedicated=gpu:NoSchedule --cost 2.50 --max-nodes 10
      sched pool ls
      sched capacity                 # how many of which to add, which nodes could go
    """


@pool.command("add")
@click.argument("name")
@click.option("--cpu", required=True, help="Cores of one node, e.g. 8 or 0.5.")
@click.option("--memory", required=True, help="Memory of one node, e.g. 32GiB.")
@click.option("--gpu", default=None, help="GPUs of one node (a generic resource).")
@click.option("--resource", "resources", multiple=True, metavar="NAME=N", help="Another generic resource.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="A label its nodes carry (node.labels.K).")
@click.option("--engine-label", "engine_labels", multiple=True, metavar="K=V", help="An engine label.")
@click.option("--taint", "taints", multiple=True, metavar="KEY[=VALUE]:EFFECT",
              help="A taint its nodes carry (NoSchedule, PreferNoSchedule or NoExecute).")
@click.option("--os", "os_", default="linux", show_default=True, help="node.platform.os")
@click.option("--arch", default="amd64", show_default=True, help="node.platform.arch")
@click.option("--role", default="worker", show_default=True, help="node.role")
@click.option("--plugin", "plugins", multiple=True, help="A plugin its nodes provide.")
@click.option("--cost", type=float, default=0.0, show_default=True,
              help="What one node costs (an hour's price, in any unit the pools share): the price expander "
                   "and the savings of a scale-down count it.")
@click.option("--min-nodes", type=int, default=0, show_default=True,
              help="Scale-down leaves at least this many of its nodes.")
@click.option("--max-nodes", type=int, default=None, help="Scale-up adds none beyond this many of its nodes.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="The priority expander prefers the pool of the highest priority.")
@json_option
@pass_app
def pool_add(app, name, cpu, memory, gpu, resources, labels, engine_labels, taints, os_, arch, role, plugins, cost,
             min_nodes, max_nodes, priority, as_json):
    """Add a pool, or replace the one of that name.

    A node added with `sched node add NAME --pool POOL` (or `sched agent NAME --pool POOL`)
    belongs to it and carries the label sched.pool=POOL; a node without that label belongs
    to the first pool, by name, whose shape it has.
    """
    extra = {}
    for item in resources:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--resource {item!r} must look like NAME=N.")
        extra[key.strip()] = value.strip()
    record = app.add_pool(name, cpu=cpu, memory=memory, gpu=gpu, resources=extra, labels=list(labels),
                          engine_labels=list(engine_labels), taints=list(taints), os=os_, arch=arch, role=role,
                          plugins=list(plugins) or None, cost=cost, min_nodes=min_nodes, max_nodes=max_nodes,
                          priority=priority)
    if as_json:
        return print_json(record)
    click.echo(f"pool {name} {'added' if record['created'] else 'updated'}")


@pool.command("ls")
@json_option
@pass_app
def pool_ls(app, as_json):
    """List the pools: each node's shape, cost, bounds, priority, and how many nodes of the
    cluster belong to it.

    In --json, cpu is in millicores, memory in bytes, other resources in units.
    """
    records = app.pools()
    if as_json:
        return print_json(records)
    print_table(["POOL", "NODE", "LABELS", "TAINTS", "COST", "NODES", "MIN", "MAX", "PRIORITY"],
                [[r["name"], quantities(r["capacity"]), ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items()))
                  or "-", ",".join(r["taints"]) or "-", f"{r['cost']:g}", r["nodes"], r["min_nodes"],
                  "-" if r["max_nodes"] is None else r["max_nodes"], r["priority"]] for r in records])


@pool.command("rm")
@click.argument("name")
@json_option
@pass_app
def pool_rm(app, name, as_json):
    """Remove a pool from the catalogue (its nodes stay)."""
    removed = app.remove_pool(name)
    if not removed:
        from difflib import get_close_matches

        from scheduler.model.errors import NotFound

        close = get_close_matches(name, [p["name"] for p in app.pools()], n=1)
        raise NotFound(f"pool {name!r} does not exist" + (f" (did you mean {close[0]!r}?)." if close else "."))
    if as_json:
        return print_json({"name": name, "removed": True})
    click.echo(f"pool {name} removed")

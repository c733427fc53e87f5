"""Empty the least used nodes onto the others: kube's HighNodeUtilization (``--strategy
pack``), for a cluster that could run on fewer machines. A node with every resource under
``THRESHOLD`` of its capacity is emptied, least used first, if every task on it may move
and the engine, ranking by binpack (Nomad's fit: the fullest node first) under every
rule, finds a place for each on the nodes not being emptied; otherwise none of its tasks
moves (a node half emptied saves nothing). A global or sysbatch task belongs to its node
and stays; a batch task keeps its node. A Balance step over the whole cluster."""

from __future__ import annotations

from dataclasses import replace

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.engine.rebalance.utilisation import below, fullest, percent
from scheduler.engine.scoring import BinPack, Context

NAME = "high-utilization"
THRESHOLD = 0.5


def balance(mover: Mover, eligible: Eligible, threshold: float = THRESHOLD) -> None:
    cluster = mover.cluster
    emptied: list[str] = []
    # Least used first. A node that takes tasks meanwhile only gets fuller, and holds a
    # task that may not move again in this plan: the order need not be worked out again.
    order = sorted((node for node in cluster.order if cluster.usable(node) and cluster.on_node.get(node.name)),
                   key=lambda n: (fullest(n), n.tasks, n.name))
    busy = {node.name for node in cluster.order if _holds_work(cluster, node.name)}
    for node in order:
        if mover.full:
            return
        if not below(node, threshold):
            continue
        residents = [r for r in cluster.on_node[node.name].values() if not cluster.specs.get(r.job) or
                     not cluster.specs[r.job].per_node]  # a global job's task belongs to its node
        if not residents or len(mover.candidates(residents)) < len(residents):
            continue  # something here may not move (or arrived in this plan): the node cannot be emptied
        if mover.limit is not None and len(mover.moves) + len(residents) > mover.limit:
            continue
        was = fullest(node)
        trials = []
        for resident in sorted(residents, key=lambda r: (-sum(r.resources.values()), r.id)):
            spec = cluster.binpacked(mover.spec(resident))
            trial = mover.trial(resident, spec=spec, away=emptied)
            if trial is None:
                break
            trials.append((trial, _fit(cluster.nodes[trial.target], spec)))
        if len(trials) < len(residents):
            for trial, _ in trials:
                mover.undo(trial)
            continue
        after = (busy - {node.name}) | {trial.target for trial, _ in trials}
        if len(after) >= len(busy):  # its tasks would only open other nodes: nothing is saved
            for trial, _ in trials:
                mover.undo(trial)
            continue
        before, busy = len(busy), after
        for trial, fit in trials:
            mover.keep(trial, NAME, "nodes in use", before, len(busy),
                       f"{node.name} is {percent(was)} used (under {percent(threshold)}): emptied, its "
                       f"{len(residents)} task(s) packed onto fuller nodes; {trial.target} goes to "
                       f"{percent(fullest(cluster.nodes[trial.target]))} (binpack fit {fit})")
        emptied.append(node.name)


def _holds_work(cluster, name: str) -> bool:
    """Whether the node holds a task other than one of a global or sysbatch job."""
    return any(not cluster.specs.get(r.job) or not cluster.specs[r.job].per_node
               for r in cluster.on_node.get(name, {}).values())


def _fit(node, spec) -> float:
    """Nomad's fit score (0..100) of the node as it is now (binpack's score, for a task
    that asks for nothing more)."""
    return round(BinPack().bind(Context(replace(spec, resources={})))(node, 0), 1)

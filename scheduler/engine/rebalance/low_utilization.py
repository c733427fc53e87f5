"""Busy nodes give tasks to idle ones: kube's LowNodeUtilization. A node with every
resource under ``LOW`` of its capacity is underutilised, one with some resource over
``HIGH`` overutilised; tasks of the overutilised nodes (lowest priority first, then the
job with the most tasks there) are placed again with the engine on the underutilised
ones only, while the busy node stays over ``HIGH`` and the idle one it gets stays at or
under it. A move never makes its job's spread worse (the target holds fewer of the job's
tasks than the source). A Balance step over the whole cluster."""

from __future__ import annotations

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.engine.rebalance.utilisation import above, below, fullest, percent

NAME = "low-utilization"
LOW, HIGH = 0.2, 0.5  # the descheduler's usual thresholds and targetThresholds (20, 50)


def balance(mover: Mover, eligible: Eligible, low: float = LOW, high: float = HIGH) -> None:
    cluster = mover.cluster
    usable = [node for node in cluster.order if cluster.usable(node)]
    idle = {node.name for node in usable if below(node, low)}
    busy = sorted((node for node in usable if above(node, high)), key=lambda n: (-fullest(n), n.name))
    if not idle or not busy:
        return
    with cluster.cordoned([node.name for node in cluster.order if node.name not in idle]):
        for node in busy:
            on = cluster.on_node.get(node.name, {})
            order = sorted(mover.candidates(list(on.values())),
                           key=lambda r: (r.priority, -cluster.count(r.job, node.name), -r.started_ms, r.id))
            for resident in order:
                if mover.full or not above(node, high):
                    break
                was = fullest(node)
                trial = mover.trial(resident)
                if trial is None:
                    continue
                target = cluster.nodes[trial.target]
                if above(target, high) or cluster.count(resident.job, target.name) > cluster.count(resident.job,
                                                                                                   node.name):
                    mover.undo(trial)
                    continue
                move = mover.keep(trial, NAME, "source node's utilisation", 100 * was, 0, "")
                move.after = round(100 * fullest(node), 1)
                move.reason = (f"{node.name} is {percent(was)} used (over {percent(high)}) and {target.name} was "
                               f"under {percent(low)}: they become {percent(fullest(node))} and "
                               f"{percent(fullest(target))}")

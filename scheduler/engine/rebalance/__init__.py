"""Planning ``sched rebalance``: moves of running service tasks, found by the descheduler's
strategies on a copy of the cluster (:class:`scheduler.engine.cluster.Cluster`) and placed
by the engine the workers place with, so every move is one the commit would accept.

One strategy per module, each pure: a Deschedule step looks at tasks one at a time
(``node_affinity``, ``node_taints``), a Balance step at a job's tasks or the nodes
together (``duplicates``, ``topology_spread``, ``job_spread``, ``low_utilization``,
``high_utilization``). A plan runs the steps of its strategy in order on one copy, each
seeing the moves of those before it:

- ``spread`` restores where tasks should be after the cluster changed shape: constraints
  and taints that no longer hold, topology spread, each job's spread over the nodes
  (which leaves no duplicates above a job's share, for the duplicates step to find
  beyond the jobs the spread leaves alone), then busy nodes' load onto idle ones;
- ``pack`` empties the least used nodes onto the others, after the same two checks.

Each single strategy may be asked for by its name too.
"""

from __future__ import annotations

from typing import Callable

from scheduler.engine.cluster import Cluster
from scheduler.engine.rebalance import (duplicates, high_utilization, job_spread, low_utilization, node_affinity,
                                        node_taints, topology_spread)
from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Move, Mover

Step = Callable[[Mover, Eligible], None]

STEPS: dict[str, Step] = {
    node_affinity.NAME: node_affinity.deschedule,
    node_taints.NAME: node_taints.deschedule,
    duplicates.NAME: duplicates.balance,
    topology_spread.NAME: topology_spread.balance,
    job_spread.NAME: job_spread.balance,
    low_utilization.NAME: low_utilization.balance,
    high_utilization.NAME: high_utilization.balance,
}
SPREAD, PACK = "spread", "pack"
STRATEGIES: dict[str, tuple[str, ...]] = {
    SPREAD: (node_affinity.NAME, node_taints.NAME, topology_spread.NAME, job_spread.NAME, duplicates.NAME,
             low_utilization.NAME),
    PACK: (node_affinity.NAME, node_taints.NAME, high_utilization.NAME),
    **{name: (name,) for name in STEPS},
}

__all__ = ["Move", "PACK", "SPREAD", "STRATEGIES", "plan"]


def plan(cluster: Cluster, strategy: str = SPREAD, max_moves: int | None = None, job: str | None = None) -> list[Move]:
    """The moves of ``strategy`` on ``cluster`` (changed in place: it ends as the plan
    leaves it), at most ``max_moves``, only of ``job``'s tasks when given."""
    mover = Mover(cluster, max_moves, job)
    eligible = Eligible(cluster)
    for name in STRATEGIES[strategy]:
        if mover.full:
            break
        STEPS[name](mover, eligible)
    return mover.moves

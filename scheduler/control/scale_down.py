"""Scale down: which nodes can go now (the cluster-autoscaler's scale-down simulation).

On a :class:`~scheduler.control.capacity_copy.CapacityCopy` of the cluster:

1. Candidates are the ready, active nodes whose utilisation is below the threshold
   (0.5 by default, the autoscaler's ``--scale-down-utilization-threshold``): the larger
   of the cpu and memory that tasks hold over the node's capacity, or, on a node with
   GPUs, the GPUs' (as the autoscaler counts GPU nodes). They are tried in one of two
   orders (``ORDERS``): the emptiest first, or the smallest machine first (the emptiest
   within a size), which leaves the room of the larger ones to the tasks moved; the
   caller tries both, each on a copy of its own, and keeps the answer that saves more
   (:func:`better`).
2. One node at a time, the node is taken out of the copy and its tasks are placed on the
   rest of the copy with the real engine, every hard rule held (constraints, taints,
   spreads, anti-affinity, host ports, ``max_per_node``): the nodes already taken away
   take nothing, and the room a moved task takes is taken for the nodes after it, so no
   room is counted twice. A node whose tasks all find a place can go, and stays gone in
   the copy; one where some task finds none is given back, with the engine's reason.
3. Every task moved is a voluntary disruption of its job: a node goes only if each job
   it holds tasks of may lose that many more now (its disruption budget's allowance,
   spent across the whole answer, as the autoscaler's PodDisruptionBudget tracker does).
   A global job's task goes with its node and is not moved (a DaemonSet's pod).
4. A pool's ``min_nodes`` is kept: a node of a pool at its minimum does not go.

The saving is the cost of each node's pool (``scheduler/model/pools.py`` says which pool a
node belongs to); a node of no pool saves an unknown cost, counted as 0 and said so.
"""

from __future__ import annotations

from collections import Counter

from scheduler.control.capacity_copy import CapacityCopy
from scheduler.engine.cluster import Resident
from scheduler.model import PER_NODE_TYPES, Node
from scheduler.model.pools import Pool, pool_of

THRESHOLD = 0.5  # the autoscaler's default --scale-down-utilization-threshold


def utilisation(node: Node) -> float:
    """What tasks hold of the node: its GPUs' share on a GPU node, else the larger of its
    cpu's and memory's."""
    def share(resource: str) -> float:
        capacity = node.capacity.get(resource, 0)
        return node.allocated.get(resource, 0) / capacity if capacity > 0 else 0.0

    if node.capacity.get("gpu", 0) > 0:
        return share("gpu")
    return max(share("cpu"), share("memory"))


def _size(node: Node) -> tuple:
    return tuple(node.capacity.get(resource, 0) for resource in ("gpu", "cpu", "memory"))


ORDERS = {  # name -> the order candidates are tried in, given (utilisation, node)
    "emptiest": lambda used, node: (used, node.name),
    "smallest": lambda used, node: (_size(node), used, node.name),
}


def better(one: dict, other: dict) -> bool:
    """Whether answer ``one`` beats ``other``: it saves more, then removes more nodes."""
    return (one["savings"], one["nodes"]) > (other["savings"], other["nodes"])


def scale_down(copy: CapacityCopy, pools: list[Pool], threshold: float = THRESHOLD,
               allowance: dict[str, int] | None = None, limit: int | None = None,
               order: str = "emptiest") -> dict:
    """Which nodes can go now, one at a time on ``copy`` (which keeps them gone), tried in
    ``order`` (a name of ``ORDERS``). ``allowance``: job -> voluntary disruptions its
    budget allows now (jobs not named: no limit). ``limit``: at most this many nodes."""
    allowance = dict(allowance or {})
    pools = sorted(pools, key=lambda p: p.name)
    belongs = {node.name: pool_of(node, pools) for node in copy.nodes}
    left_in_pool = Counter(pool.name for pool in belongs.values() if pool is not None)
    rank = ORDERS[order]
    candidates = sorted(((utilisation(node), node) for node in copy.usable()), key=lambda pair: rank(*pair))
    considered = [(u, node.name) for u, node in candidates if u < threshold]
    remove, kept = [], []
    for used, name in considered:
        if limit is not None and len(remove) >= limit:
            break
        pool = belongs.get(name)
        if pool is not None and left_in_pool[pool.name] <= pool.min_nodes:
            kept.append({"node": name, "utilisation": round(used, 4),
                         "reason": f"pool {pool.name} is at its min_nodes ({pool.min_nodes})"})
            continue
        moving = [r for r in copy.residents_on(name) if not _goes_with_node(copy, r)]
        spend = Counter(t.job for t in moving)
        short = next((job for job, n in sorted(spend.items()) if job in allowance and allowance[job] < n), None)
        if short is not None:
            kept.append({"node": name, "utilisation": round(used, 4),
                         "reason": f"job {short}'s disruption budget allows {allowance[short]} more disruption(s) now, "
                                   f"moving its tasks here needs {spend[short]}"})
            continue
        moves, reason = _move_all(copy, name, moving)
        if reason is not None:
            kept.append({"node": name, "utilisation": round(used, 4), "reason": reason})
            continue
        for job, n in spend.items():
            if job in allowance:
                allowance[job] -= n
        if pool is not None:
            left_in_pool[pool.name] -= 1
        remove.append({"node": name, "pool": pool.name if pool is not None else None,
                       "cost": pool.cost if pool is not None else 0.0, "utilisation": round(used, 4),
                       "tasks": len(moving), "moves": moves})
    unpriced = [r["node"] for r in remove if r["pool"] is None]
    return {"threshold": threshold, "order": order, "candidates": len(considered), "remove": remove, "kept": kept,
            "nodes": len(remove), "savings": round(sum(r["cost"] for r in remove), 6), "unpriced": unpriced}


def _goes_with_node(copy: CapacityCopy, resident: Resident) -> bool:
    spec = copy.current(resident.job)
    return spec is None or spec.type in PER_NODE_TYPES


def _move_all(copy: CapacityCopy, name: str, moving: list[Resident]) -> tuple[list[dict], str | None]:
    """Take the node away and place its tasks elsewhere on the copy (as their jobs'
    current version: a drained task's replacement is); on failure give the node back as
    it was and say why."""
    taken = copy.take_away(name)
    by_job: dict[str, list[str]] = {}
    for resident in moving:
        by_job.setdefault(resident.job, []).append(resident.id)
    done: list[tuple[str, list[tuple[str, str]]]] = []
    for job, ids in sorted(by_job.items()):
        # Ranked by binpack, every hard rule kept: the autoscaler's simulation asks only
        # whether the tasks fit somewhere, and the fullest node first leaves the emptier
        # ones to go next.
        spec = copy.cluster.binpacked(copy.current(job))
        result = copy.place(spec, ids)
        done.append((job, result.assignments))
        if result.unplaced:
            for _, assignments in done:
                copy.unplace(assignments)
            copy.give_back(taken)
            message = result.explanation.message() if result.explanation is not None else "it fits nowhere else"
            return [], f"task {result.unplaced[0]} of job {job} fits on no other node: {message}"
    return [{"task": task_id, "job": job, "to": to} for job, assignments in done for task_id, to in assignments], None

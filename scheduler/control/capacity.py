"""``sched capacity``: how many nodes of which pools the pending work needs, and which
nodes could go, from one reading of the cluster, proven by the placement engine.

The reading (the shared copy of the cluster, ``cluster_read.py``, and the pending work,
``scheduler/state/capacity.py``) is copied twice (``capacity_copy.py``): the
scale-up (``scale_up.py``) places the pending tasks on one, with new nodes of the pools;
the scale-down (``scale_down.py``) first places the pending tasks that fit on the nodes
there are (room pending work is about to take is not room to remove), then takes nodes
away one at a time on the other, once in each of its orders (a copy each), keeping the
answer that saves more. Nothing is written to Redis here: recording the answer,
the hooks that act on it and their cooldowns are ``capacity_hooks.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import orjson

from scheduler.control import cluster_read
from scheduler.control.capacity_budgets import allowance_of
from scheduler.control.capacity_copy import CapacityCopy
from scheduler.control.cluster_read import Copy
from scheduler.control.scale_down import ORDERS, THRESHOLD, better, scale_down
from scheduler.control.scale_up import ScaleUp, groups_of, place_groups
from scheduler.engine.expanders import DEFAULT, parse_chain
from scheduler.model.errors import SpecError
from scheduler.model.pools import Pool
from scheduler.state.capacity import PendingWork


@dataclass
class CapacityOptions:
    """What an answer considers: the expanders' chain, the scale-down's utilisation
    threshold and most nodes to remove, and which halves to work out."""

    expander: list[str] = field(default_factory=lambda: [DEFAULT])
    threshold: float = THRESHOLD
    max_remove: int | None = None
    scale_up: bool = True
    scale_down: bool = True

    def __post_init__(self) -> None:
        self.expander = parse_chain(self.expander)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not 0 <= self.threshold <= 1:
            raise SpecError(f"the utilisation threshold must be from 0 to 1, not {self.threshold!r}.")
        if self.max_remove is not None and (isinstance(self.max_remove, bool) or not isinstance(self.max_remove, int)
                                            or self.max_remove < 0):
            raise SpecError(f"max_remove must be a whole number of 0 or more, not {self.max_remove!r}.")


def answer(store, options: CapacityOptions | None = None) -> dict:
    """The capacity answer on the cluster as it is now (see :func:`answer_on`), within
    every job's disruption budget."""
    return answer_on(cluster_read.read(store), store.pending_work(), store.pools(), options,
                     lambda read: allowance_of(read, store))


def answer_on(read: Copy, pending: PendingWork, pools: list[Pool], options: CapacityOptions | None = None,
              allowance=None) -> dict:
    """``{scale_up, scale_down, nodes, pending, live, pools}`` for one reading of the
    cluster. ``allowance(read)`` gives job -> voluntary disruptions its budget allows now."""
    options = options or CapacityOptions()
    out: dict = {"nodes": len(read.cluster.order), "pending": len(pending.tasks), "live": len(read.cluster.tasks),
                 "pools": [pool.name for pool in pools]}
    if options.scale_up:  # on a copy of its own: the scale-down may place on the one read
        out["scale_up"] = ScaleUp(CapacityCopy(read, pending), pools, options.expander).run(pending.tasks)
    if options.scale_down:
        allowed = allowance(read) if allowance is not None else None
        last = list(ORDERS)[-1]
        for order in ORDERS:  # each order on a copy of its own; the last one uses the read itself
            copy = CapacityCopy(read, pending, fresh=order != last)
            place_groups(copy, groups_of(copy, pending.tasks))  # room pending work is about to take is not spare
            found = scale_down(copy, pools, options.threshold, allowed, options.max_remove, order)
            if "scale_down" not in out or better(found, out["scale_down"]):
                out["scale_down"] = found
    return out


def digest(result: dict) -> str:
    """What an answer decided (pools and counts to add, nodes to remove), as a short
    hash: two answers with the same digest ask for the same change."""
    up = result.get("scale_up") or {}
    down = result.get("scale_down") or {}
    decided = {"up": sorted((a["pool"], a["nodes"]) for a in up.get("add", [])),
               "down": sorted(r["node"] for r in down.get("remove", []))}
    return hashlib.sha256(orjson.dumps(decided)).hexdigest()[:16]

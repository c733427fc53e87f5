"""A pool: a shape of node the cluster can grow by (the cluster-autoscaler's node group).

A pool describes the node one more machine of it would be (capacity, labels, taints,
platform, plugins: what ``sched node add`` takes), what such a node costs, and the
cluster-autoscaler's node-group bounds (``min_nodes``, ``max_nodes``) and the priority
its ``priority`` expander reads. ``sched capacity`` places pending tasks on nodes made
from it (:meth:`Pool.node`) with the real placement engine.

A node belongs to a pool when it carries the label ``sched.pool=<name>`` (``sched node
add NAME --pool POOL`` and ``sched agent NAME --pool POOL`` put it there); a node without
that label belongs to the first pool, by name, whose shape it has (the same capacity,
platform and taints, and every label of the pool).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from scheduler.model.errors import SpecError
from scheduler.model.node import Node, make_node
from scheduler.model.quantities import format_quantity
from scheduler.model.taints import parse_taints

POOL_LABEL = "sched.pool"  # the label naming the pool a node was added from
_POOL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
MOST_NODES = 100_000  # the largest max_nodes a pool may say


def check_pool_name(name) -> str:
    if not isinstance(name, str) or not _POOL_NAME_RE.fullmatch(name):
        raise SpecError(f"pool name {name!r} is not valid; use up to 63 letters, digits, '.', '-' and '_', "
                        "starting with a letter or digit.")
    return name


@dataclass(frozen=True)
class Pool:
    """A node shape to scale by, and what one node of it costs."""

    name: str
    capacity: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    engine_labels: dict[str, str] = field(default_factory=dict)
    taints: tuple = ()
    os: str = "linux"
    arch: str = "amd64"
    role: str = "worker"
    plugins: frozenset[str] = frozenset()
    cost: float = 0.0  # per node, in whatever unit the catalogue's costs share (an hour's price)
    min_nodes: int = 0  # scale-down leaves at least this many of its nodes
    max_nodes: int | None = None  # scale-up adds none beyond this many of its nodes (None: no bound)
    priority: int = 0  # the priority expander takes the pool of the highest priority

    def node(self, name: str) -> Node:
        """A new, empty node of this pool's shape, labelled with the pool's name."""
        return Node(name=name, capacity=dict(self.capacity), labels={**self.labels, POOL_LABEL: self.name},
                    engine_labels=dict(self.engine_labels), role=self.role, os=self.os, arch=self.arch,
                    plugins=self.plugins, taints=self.taints)

    def has_shape_of(self, node: Node) -> bool:
        """Whether ``node`` looks like one of this pool's: its capacity, platform and
        taints, and every label the pool gives."""
        return (node.capacity == self.capacity and (node.os, node.arch, node.role) == (self.os, self.arch, self.role)
                and {str(t) for t in node.taints} == {str(t) for t in self.taints}
                and all(node.labels.get(k) == v for k, v in self.labels.items()))

    def to_dict(self) -> dict:
        """The pool as stored and as ``--json`` shows it (cpu in millicores, memory in bytes)."""
        return {"name": self.name, "capacity": dict(self.capacity), "labels": dict(self.labels),
                "engine_labels": dict(self.engine_labels), "taints": [str(t) for t in self.taints],
                "os": self.os, "arch": self.arch, "role": self.role, "plugins": sorted(self.plugins),
                "cost": self.cost, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "priority": self.priority}

    def shape_text(self) -> str:
        """``cpu=8 memory=32Gi gpu=1``, for tables."""
        return " ".join(f"{r}={format_quantity(r, a)}" for r, a in sorted(self.capacity.items()))


def pool_of(node: Node, pools: list[Pool]) -> Pool | None:
    """The pool ``node`` belongs to: the one its ``sched.pool`` label names, else the first
    (by name) whose shape it has, else None."""
    named = node.labels.get(POOL_LABEL)
    if named is not None:
        return next((p for p in pools if p.name == named), None)
    return next((p for p in sorted(pools, key=lambda p: p.name) if p.has_shape_of(node)), None)


def _whole(value, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(f"{what} must be a whole number from {low} to {high}, not {value!r}.")
    return value


def make_pool(name, *, cpu=None, memory=None, gpu=None, resources=None, labels=None, engine_labels=None,
              taints=None, os="linux", arch="amd64", role="worker", plugins=None, cost=0.0, min_nodes=0,
              max_nodes=None, priority=0) -> Pool:
    """Validate a pool (from ``sched pool add`` flags, the Python API or the HTTP API): the
    node fields as ``sched node add`` checks them, and the pool's own."""
    check_pool_name(name)
    extra = dict(resources or {})
    if gpu is not None:
        extra["gpu"] = gpu
    labels = dict(labels or {}) if isinstance(labels, dict) else labels
    template = make_node(name, cpu=cpu, memory=memory, resources=extra,
                         labels=labels, engine_labels=engine_labels, os=os, arch=arch, role=role, plugins=plugins,
                         taints=taints if isinstance(taints, (list, tuple)) else None)
    if POOL_LABEL in template.labels:
        raise SpecError(f"pool {name}: the label {POOL_LABEL} is the pool's own name; leave it out.")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        raise SpecError(f"pool {name}: cost must be a number of 0 or more, not {cost!r}.")
    min_nodes = _whole(min_nodes, f"pool {name}: min_nodes", 0, MOST_NODES)
    if max_nodes is not None:
        max_nodes = _whole(max_nodes, f"pool {name}: max_nodes", 0, MOST_NODES)
        if max_nodes < min_nodes:
            raise SpecError(f"pool {name}: max_nodes {max_nodes} is below min_nodes {min_nodes}.")
    priority = _whole(priority, f"pool {name}: priority", -1_000_000, 1_000_000)
    return Pool(name=name, capacity=template.capacity, labels=template.labels, engine_labels=template.engine_labels,
                taints=parse_taints([str(t) for t in template.taints]), os=template.os, arch=template.arch,
                role=template.role, plugins=template.plugins, cost=float(cost), min_nodes=min_nodes,
                max_nodes=max_nodes, priority=priority)


def pool_from_dict(raw: dict) -> Pool:
    """A pool as :meth:`Pool.to_dict` stored it (validated when it was added)."""
    return Pool(name=raw["name"], capacity={k: int(v) for k, v in raw["capacity"].items()},
                labels=dict(raw.get("labels") or {}), engine_labels=dict(raw.get("engine_labels") or {}),
                taints=parse_taints(raw.get("taints") or ()), os=raw.get("os", "linux"),
                arch=raw.get("arch", "amd64"), role=raw.get("role", "worker"),
                plugins=frozenset(raw.get("plugins") or ()), cost=float(raw.get("cost", 0.0)),
                min_nodes=int(raw.get("min_nodes", 0)), max_nodes=raw.get("max_nodes"),
                priority=int(raw.get("priority", 0)))

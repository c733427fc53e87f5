"""How full a node is, as the utilisation strategies read it: each of cpu and memory
allocated over its capacity (kube's descheduler counts requests, not use, the same way)."""

from __future__ import annotations

from scheduler.model import Node
from scheduler.model.quantities import CPU, MEMORY

RESOURCES = (CPU, MEMORY)


def shares(node: Node) -> dict[str, float]:
    """cpu and memory allocated, each as a share (0..1) of the node's capacity."""
    return {r: node.allocated.get(r, 0) / node.capacity[r] for r in RESOURCES if node.capacity.get(r, 0) > 0}


def fullest(node: Node) -> float:
    """The larger of the node's cpu and memory shares."""
    return max(shares(node).values(), default=0.0)


def below(node: Node, threshold: float) -> bool:
    """Every resource under ``threshold`` (kube's underutilized)."""
    return all(share < threshold for share in shares(node).values())


def above(node: Node, threshold: float) -> bool:
    """Some resource over ``threshold`` (kube's overutilized)."""
    return any(share > threshold for share in shares(node).values())


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"

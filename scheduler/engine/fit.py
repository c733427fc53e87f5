"""The one rule that decides whether a task still fits on a node *now*.

It covers everything that changes while tasks come and go: node readiness and
availability, free capacity in every resource, host ports, and ``max_per_node``.
Room nominated for a preemptor of the same or higher priority (of another job) counts
as taken, as kube-scheduler's filters count nominated pods. Static properties
(constraints, platform, plugins) are checked by the filters only.

``lua/commit.lua`` enforces exactly this rule, in this order, when a placement is
committed; ``tests/test_fit_agreement.py`` checks the two agree on random cases.
"""

from __future__ import annotations

from scheduler.model import reasons
from scheduler.model import ACTIVE, DRAIN, READY, Node


def misfit(node: Node, resources: dict[str, int], ports, max_per_node: int, job_on_node: int,
           priority: int | None = None, job: str = "") -> str | None:
    """The reason ``node`` cannot take one more task with these needs, or None if it fits.

    ``priority`` and ``job`` say whose task it is, for nominated room: with no priority,
    nominations are not considered."""
    if node.status != READY:
        return reasons.NODE_DOWN
    if node.availability != ACTIVE:
        return reasons.NODE_DRAINED if node.availability == DRAIN else reasons.NODE_PAUSED
    capacity, allocated = node.capacity, node.allocated
    held: dict[str, int] = {}
    held_ports: set[int] = set()
    if node.nominations and priority is not None:
        for nomination in node.nominations.values():
            if nomination.priority >= priority and nomination.job != job:
                for resource, amount in nomination.resources.items():
                    held[resource] = held.get(resource, 0) + amount
                held_ports.update(nomination.ports)
    for resource, amount in resources.items():
        if amount > 0 and allocated.get(resource, 0) + held.get(resource, 0) + amount > capacity.get(resource, 0):
            return reasons.insufficient(resource)
    for port in ports:
        if port in node.ports or port in held_ports:
            return reasons.port_in_use(port)
    if max_per_node and job_on_node >= max_per_node:
        return reasons.MAX_PER_NODE
    return None

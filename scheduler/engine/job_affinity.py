"""Job affinity and anti-affinity (kube's InterPodAffinity): required entries as hard
rules, preferred ones as a score, over the counts of the jobs each selector matched.

Required affinity: every entry needs a node with the attribute whose domain holds a live
task of a matched job, except that when none of them has a live task anywhere and the
job meets all its own selectors, its first task may go anywhere with the attributes.
Required anti-affinity: no live task of a matched job in the node's domain (a node
without the attribute meets it). ``lua/commit.lua`` holds the same rules.
"""

from __future__ import annotations

import numpy as np

from scheduler.engine.domains import DomainCounts
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import AffinityRule, AntiRule


def first_anywhere(rules: tuple[AffinityRule, ...], counts: DomainCounts) -> bool:
    """kube's exception for the first task of a group with affinity to itself: no matched
    job has a live task, and the job meets every one of its selectors."""
    return all(rule.self_matches and counts.total(rule.jobs) == 0 for rule in rules)


def affinity_misfit(node, rule: AffinityRule, counts: DomainCounts, first: bool) -> str | None:
    value = attribute_getter(rule.attribute)(node)
    if not value:
        return rule.reason
    if not first and counts.of(rule.jobs, f"{rule.attribute}={value}") <= 0:
        return rule.reason
    return None


def anti_misfit(node, rule: AntiRule, counts: DomainCounts) -> str | None:
    value = attribute_getter(rule.attribute)(node)
    if value and counts.of(rule.jobs, f"{rule.attribute}={value}") > 0:
        return rule.reason
    return None


def affinity_allowed(codes: np.ndarray, has: np.ndarray, in_domain: np.ndarray, first: bool) -> np.ndarray:
    """The rows a required affinity allows (``codes``: their domains; ``has``: in one at all)."""
    return has if first else has & (in_domain > 0)[codes]


def anti_allowed(codes: np.ndarray, has: np.ndarray, in_domain: np.ndarray) -> np.ndarray:
    """The rows a required anti-affinity allows."""
    return ~(has & (in_domain > 0)[codes])

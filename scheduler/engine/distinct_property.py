"""``distinct_property`` (Nomad's): at most ``limit`` live tasks of the job per value of an
attribute; a node without the attribute takes none. ``lua/commit.lua`` holds the same
rule (``tests/test_fit_agreement.py``)."""

from __future__ import annotations

import numpy as np

from scheduler.engine.domains import DomainCounts
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import DistinctRule


def misfit(node, rule: DistinctRule, job: str, counts: DomainCounts) -> str | None:
    value = attribute_getter(rule.attribute)(node)
    if not value:
        return rule.missing
    if counts.of((job,), f"{rule.attribute}={value}") >= rule.limit:
        return rule.reached
    return None


def allowed(rule: DistinctRule, codes: np.ndarray, has: np.ndarray, in_domain: np.ndarray) -> np.ndarray:
    """The rows whose domain (``codes``; ``has``: in one at all) holds fewer than the limit."""
    return has & (in_domain < rule.limit)[codes]

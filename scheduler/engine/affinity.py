"""Soft node affinities, scored as Nomad's node affinity: the sum of the weights of the
entries a node matches over the sum of their sizes (-1 to 1), times 100."""

from __future__ import annotations


def score(node, affinities) -> float:
    total = sum(abs(a.weight) for a in affinities)
    if not total:
        return 0.0
    return 100.0 * sum(a.weight for a in affinities if a.constraint.matches(node)) / total

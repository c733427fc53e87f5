"""Topology spread constraints a job's tasks break now (nodes joined, left or were
relabelled since they were placed): kube's RemovePodsViolatingTopologySpreadConstraint,
for ``DoNotSchedule`` spreads (kube's default). A Balance step per spread: while the
domain holding the most counted tasks exceeds the fewest (over the eligible domains; 0
with fewer than ``min_domains``) by more than ``max_skew``, a task of the job in a
fullest domain is placed again with the engine, which holds the spread, and the move is
kept when the task lands in a domain holding at least two fewer."""

from __future__ import annotations

from scheduler.engine.rebalance.eligible import Eligible
from scheduler.engine.rebalance.moves import Mover
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import SpreadRule

NAME = "topology-spread"


def domain_counts(mover: Mover, spread: SpreadRule) -> dict[str, int]:
    """Counted tasks (of the jobs the spread counts) in each eligible domain."""
    of = mover.cluster.domains.of
    return {value: of(spread.jobs, f"{spread.attribute}={value}") for value in spread.domains}


def spread_skew(spread: SpreadRule, counts: dict[str, int]) -> int:
    if not counts:
        return 0
    fewest = 0 if len(counts) < spread.min_domains else min(counts.values())
    return max(counts.values()) - fewest


def balance(mover: Mover, eligible: Eligible) -> None:
    cluster = mover.cluster
    for job, movable in sorted(mover.jobs().items()):
        spec = cluster.specs[job]
        if not spec.topology_spread:
            continue
        rules = cluster.rules(spec)
        for spread in (rules.spreads if rules is not None else ()):
            if not spread.hard or not spread.self_matches:
                continue
            get = attribute_getter(spread.attribute)
            while not mover.full:
                counts = domain_counts(mover, spread)
                before = spread_skew(spread, counts)
                if before <= spread.max_skew:
                    break
                most = max(counts.values())
                pending = sorted((r for r in movable if mover.movable(r)
                                  and counts.get(get(cluster.nodes[r.node])) == most), key=lambda r: r.id)
                if not pending:
                    break
                resident = pending[0]
                source = get(cluster.nodes[resident.node])
                trial = mover.trial(resident)
                if trial is None:
                    break
                value = get(cluster.nodes[trial.target])
                if value not in counts or counts[value] + 1 >= counts[source]:
                    mover.undo(trial)
                    break
                mover.keep(trial, NAME, f"skew of {spread.attribute}", before, 0, "")
                after = spread_skew(spread, domain_counts(mover, spread))
                move = mover.moves[-1]
                move.after = after
                move.reason = (f"job {job}'s spread over {spread.attribute} is broken: {source} holds "
                               f"{counts[source]} counted tasks and {value} {counts[value]}, a skew of {before} "
                               f"over max_skew {spread.max_skew}; it becomes {after}")

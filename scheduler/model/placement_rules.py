"""A job's domain rules as one placement resolves them: the jobs each selector matched,
the eligible domains of each spread, and the words of each refusal.

Workers resolve them (``scheduler/engine/rules.py``) and send them with the job's
placements to the commit (``scheduler/state/commit.py``, ``lua/commit.lua``), which holds
every hard one against the counts in ``tally:dom:<job>`` (:mod:`scheduler.model.domains`).
``gen`` and ``epoch`` say what the resolution read: the commit refuses a placement when
job labels or rules (``rules:gen``) or the nodes (``nodes:epoch``) changed since.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpreadRule:
    attribute: str
    max_skew: int
    min_domains: int
    jobs: tuple[str, ...]  # whose counted tasks it counts
    self_matches: bool  # the task counts toward its own domain once placed (kube's selfMatchNum)
    domains: tuple[str, ...]  # the eligible domains (values of the attribute)
    hard: bool  # DoNotSchedule
    missing: str  # the refusal on a node without the attribute
    skew: str  # the refusal when max_skew would be exceeded


@dataclass(frozen=True, slots=True)
class DistinctRule:
    attribute: str
    limit: int
    missing: str
    reached: str


@dataclass(frozen=True, slots=True)
class AffinityRule:
    """Required job affinity: a domain holding a live task of ``jobs``."""

    attribute: str
    jobs: tuple[str, ...]
    self_matches: bool  # the job meets its own selector (its first task may go anywhere)
    reason: str


@dataclass(frozen=True, slots=True)
class AntiRule:
    """Required job anti-affinity (the job's own, or a running job's that matches it)."""

    attribute: str
    jobs: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class SoftTerm:
    """Preferred job affinity (weight > 0) or anti-affinity (weight < 0)."""

    attribute: str
    jobs: tuple[str, ...]
    weight: int


@dataclass(frozen=True, slots=True)
class Rules:
    job: str
    counted: bool  # its tasks are counted by domain (tally:dom:<job>)
    spreads: tuple[SpreadRule, ...] = ()
    distinct: tuple[DistinctRule, ...] = ()
    affinity: tuple[AffinityRule, ...] = ()
    anti: tuple[AntiRule, ...] = ()
    soft: tuple[SoftTerm, ...] = ()
    gen: str | None = None  # rules:gen its selectors were resolved at (None: none to check)
    epoch: str | None = None  # nodes:epoch its spreads' eligible domains were read at

    @property
    def hard(self) -> bool:
        """Whether any rule can refuse a node."""
        return bool(self.distinct or self.affinity or self.anti or any(s.hard for s in self.spreads))

    def jobs(self) -> set[str]:
        """Every job whose counts the rules read."""
        out = {self.job} if self.distinct else set()  # a job's own counts only where a rule reads them
        for rule in (*self.spreads, *self.affinity, *self.anti, *self.soft):
            out.update(rule.jobs)
        return out

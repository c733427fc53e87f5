"""A job's domain rules, resolved for one placement, and the one scalar check of them.

:func:`resolve` turns a spec's ``topology_spread``, ``job_affinity``,
``job_anti_affinity`` and ``distinct_property`` into :class:`Rules`: each selector
matched against the labels of the namespace's jobs (``jobs:labels``, read with its
generation ``rules:gen``), the required anti-affinity of running jobs whose selectors
match this job added (kube's symmetry), and each spread's eligible domains taken from the
nodes in view. :func:`domain_misfit` is the rule the commit holds, in its order: spreads,
``distinct_property``, affinity, anti-affinity (``lua/commit.lua``,
``tests/test_fit_agreement.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.engine import distinct_property, job_affinity, topology_spread
from scheduler.engine.domains import DomainCounts
from scheduler.model import reasons
from scheduler.model.domains import domain_attribute
from scheduler.model.job import JobSpec
from scheduler.model.job_affinity import JobAffinity
from scheduler.model.placement_rules import AffinityRule, AntiRule, DistinctRule, Rules, SoftTerm, SpreadRule


@dataclass
class RuleIndex:
    """The namespace's job labels and the required anti-affinity of its jobs, as read at
    ``gen`` (``rules:gen``)."""

    gen: str = ""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    anti: dict[str, tuple[JobAffinity, ...]] = field(default_factory=dict)


def resolve(spec: JobSpec, index: RuleIndex, domains=None, epoch: str | None = None) -> Rules | None:
    """The rules of ``spec`` (None when it has none). ``domains(attribute)`` gives the
    eligible domains of a spread: the attribute's values on the nodes in view that pass
    the job's constraints, platform and plugins."""
    if not spec.rules:
        return None
    own = spec.id
    labels = dict(index.labels)
    if spec.labels:
        labels[own] = spec.labels
    else:
        labels.pop(own, None)

    def matched(selector) -> tuple[str, ...]:
        return tuple(sorted(job for job, job_labels in labels.items() if selector.matches(job_labels)))

    selectors = bool(spec.labels)
    spreads = []
    for t in spec.topology_spread:
        selectors |= t.selector is not None
        spreads.append(SpreadRule(
            attribute=t.attribute, max_skew=t.max_skew, min_domains=t.min_domains,
            jobs=(own,) if t.selector is None else matched(t.selector),
            self_matches=t.selector is None or t.selector.matches(spec.labels),
            domains=tuple(domains(t.attribute)) if domains is not None else (), hard=t.hard,
            missing=reasons.spread_missing(t.written), skew=reasons.spread_skew(t.written, t.max_skew)))
    distinct = tuple(DistinctRule(domain_attribute(c.key), c.limit, reasons.distinct_missing(c.key),
                                  reasons.distinct_reached(c.key, c.limit))
                     for c in spec.constraints if c.dynamic)
    affinity, soft = [], []
    for t in spec.job_affinity:
        selectors = True
        if t.required:
            affinity.append(AffinityRule(t.attribute, matched(t.selector), t.selector.matches(spec.labels),
                                         reasons.job_affinity_not_met(str(t.selector), t.written)))
        else:
            soft.append(SoftTerm(t.attribute, matched(t.selector), t.weight))
    anti = []
    for t in spec.job_anti_affinity:
        selectors = True
        if t.required:
            anti.append(AntiRule(t.attribute, matched(t.selector), reasons.job_anti_affinity(str(t.selector),
                                                                                              t.written)))
        else:
            soft.append(SoftTerm(t.attribute, matched(t.selector), -t.weight))
    if spec.labels:  # running jobs whose required anti-affinity matches this one keep it away too
        for job, terms in sorted(index.anti.items()):
            if job == own:
                continue
            for t in terms:
                if t.selector.matches(spec.labels):
                    anti.append(AntiRule(t.attribute, (job,), reasons.job_anti_affinity_of(job, t.written)))
    hard_spread = any(s.hard for s in spreads)
    return Rules(job=own, counted=spec.counted, spreads=tuple(spreads), distinct=distinct, affinity=tuple(affinity),
                 anti=tuple(anti), soft=tuple(soft), gen=index.gen if selectors else None,
                 epoch=epoch if hard_spread else None)


def domain_misfit(node, rules: Rules, counts: DomainCounts) -> str | None:
    """Why one more task may not go to ``node`` under the hard domain rules, or None."""
    for spread in rules.spreads:
        if spread.hard:
            reason = topology_spread.misfit(node, spread, counts)
            if reason is not None:
                return reason
    for rule in rules.distinct:
        reason = distinct_property.misfit(node, rule, rules.job, counts)
        if reason is not None:
            return reason
    if rules.affinity:
        first = job_affinity.first_anywhere(rules.affinity, counts)
        for rule in rules.affinity:
            reason = job_affinity.affinity_misfit(node, rule, counts, first)
            if reason is not None:
                return reason
    for anti in rules.anti:
        reason = job_affinity.anti_misfit(node, anti, counts)
        if reason is not None:
            return reason
    return None

"""Placing tasks whose rules depend on where tasks are: the placer's exact, simpler path.

Groups with topology spread, job (anti-)affinity, ``distinct_property``, soft affinities,
spread targets, labels, or nodes with ``PreferNoSchedule`` taints they do not tolerate,
are placed here one task at a time, each against every node that passes the job's static
filters, with numpy over the placer's node table: the rules and the room decide which
nodes may take the task, then, in order,

1. faulty nodes last (as the ranking's first tier);
2. each preference level: the group with the fewest tasks of the job (with ``targets``,
   the fewest against its share: ``(tasks + 1) / percentage``), SwarmKit's tree as a key;
3. one normalised score, kube's way (each part scaled to 0..100 over the nodes that may
   take the task, weighted and summed): the strategy (1: spread, fewest tasks of the
   job; binpack, Nomad's fit), soft affinities (2: Nomad's node affinity, -100..100),
   untolerated ``PreferNoSchedule`` taints (3, fewer is better), ``ScheduleAnyway``
   spreads (2, fewer counted tasks in the domain is better) and preferred job
   (anti-)affinity (2: the weighted counts of the matched jobs' tasks in the domain);
4. fewest tasks of the job, fewest tasks, then the random tie-break.

The node chosen is confirmed with :func:`scheduler.engine.fit.misfit` (host ports,
nominations, ``max_per_node``), the placement is applied to the node, the job's counts
and the domain counts, and the next task sees it. O(tasks x nodes) in numpy: exact rather
than the tree of heaps, which cannot follow a rule that changes with every placement.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from scheduler.engine import affinity, job_affinity, topology_spread, distinct_property
from scheduler.engine.domains import DomainCounts
from scheduler.engine.fill import apply
from scheduler.engine.fit import misfit
from scheduler.engine.scoring import BinPack, Context
from scheduler.engine.taints import discouraged
from scheduler.model import BINPACK, JobSpec, Node
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import Rules

WEIGHTS = {"strategy": 1, "affinity": 2, "taints": 3, "spread": 2, "jobs": 2}
_BINPACK = BinPack()


class _Domains:
    """One attribute's domain code per row (-1 without the attribute), and the values by code."""

    def __init__(self, table, attribute: str, rows: np.ndarray):
        get = attribute_getter(attribute)
        codes, paths = table.groups(("domain", attribute), lambda node: (get(node),))
        self.values = [path[0] for path in paths]
        codes = codes.copy()
        empty = [code for code, value in enumerate(self.values) if value == ""]
        if empty:
            codes[codes == empty[0]] = -1
        self.all = codes  # every row of the table
        self.codes = codes[rows]  # the candidate rows
        self.attribute = attribute

    def counted(self, counts: DomainCounts, jobs) -> np.ndarray:
        """The counted tasks of ``jobs`` in each domain, by code."""
        attribute = self.attribute
        return np.array([counts.of(jobs, f"{attribute}={value}") for value in self.values] or [0], dtype=np.int64)


def place(table, rows: np.ndarray, job: JobSpec, task_ids: Sequence[str], job_counts: dict[str, int], counted: bool,
          ctx: Context, bad: frozenset[str], rules: Rules | None, counts: DomainCounts | None,
          noise: np.ndarray) -> list[tuple[str, str]]:
    """Place ``task_ids`` on the ``rows`` of ``table`` (those passing the static filters).
    Returns the assignments; the placed nodes' objects and rows (and ``job_counts``, if
    ``counted``, and ``counts``) are updated."""
    if not rows.size or not task_ids:
        return []
    nodes: list[Node] = [table.nodes[row] for row in rows.tolist()]
    needs = {r: a for r, a in job.resources.items() if a > 0}
    if any(r not in table.capacity for r in needs):
        return []
    job_on = np.array([job_counts.get(node.name, 0) for node in nodes], dtype=np.int64)
    faulty = np.array([node.name in bad for node in nodes]) if bad else None
    dead = np.zeros(rows.size, dtype=bool)
    counts = counts if counts is not None else DomainCounts()

    # Preference levels: each row's group, and the job's tasks per group (over every row).
    levels = []
    on_all = np.zeros(len(table.nodes), dtype=np.int64)
    for name, n in job_counts.items():
        row = table.rows.get(name)
        if row is not None:
            on_all[row] = n
    getters = [p.get for p in job.preferences]
    for depth, preference in enumerate(job.preferences, 1):
        codes, by_code = table.groups(("level", *(p.spread for p in job.preferences[:depth])),
                                      lambda node, d=depth: tuple(get(node) for get in getters[:d]))
        per_group = np.bincount(codes, weights=on_all, minlength=len(by_code)).astype(np.float64)
        share = None
        if preference.targets:
            named = dict(preference.targets)
            others = [code for code, path in enumerate(by_code) if path[-1] not in named]
            rest = (100 - sum(named.values())) / len(others) if others else 0.0
            share = np.array([named.get(path[-1], rest if code in others else 0.0)
                              for code, path in enumerate(by_code)], dtype=np.float64)
        levels.append((codes[rows], per_group, share))

    # Scores that do not change while placing.
    static_score = np.zeros(rows.size)
    scored = False
    if job.affinities:
        static_score += WEIGHTS["affinity"] * np.array([affinity.score(node, job.affinities) for node in nodes])
        scored = True
    prefer = np.array([discouraged(node, job.tolerations) for node in nodes], dtype=np.float64)
    if not prefer.any():
        prefer = None

    # Domain rules: each attribute's codes, each rule's counted tasks by domain.
    domains: dict[str, _Domains] = {}

    def domain(attribute: str) -> _Domains:
        if attribute not in domains:
            domains[attribute] = _Domains(table, attribute, rows)
        return domains[attribute]

    own = job.id
    tracked = []  # (jobs of a rule, its domains, its counts by code): kept current as the job places
    hard_spreads, soft_spreads, distinct, affinities, anti, soft = [], [], [], [], [], []
    if rules is not None:
        for spread in rules.spreads:
            d = domain(spread.attribute)
            in_domain = d.counted(counts, spread.jobs)
            entry = (spread, d, in_domain)
            (hard_spreads if spread.hard else soft_spreads).append(entry)
            tracked.append((spread.jobs, d, in_domain))
        for rule in rules.distinct:
            d = domain(rule.attribute)
            in_domain = d.counted(counts, (own,))
            distinct.append((rule, d, in_domain))
            tracked.append(((own,), d, in_domain))
        for rule in rules.affinity:
            d = domain(rule.attribute)
            in_domain = d.counted(counts, rule.jobs)
            affinities.append((rule, d, in_domain))
            tracked.append((rule.jobs, d, in_domain))
        for rule in rules.anti:
            d = domain(rule.attribute)
            in_domain = d.counted(counts, rule.jobs)
            anti.append((d, in_domain))
            tracked.append((rule.jobs, d, in_domain))
        for term in rules.soft:
            d = domain(term.attribute)
            in_domain = d.counted(counts, term.jobs)
            soft.append((term, d, in_domain))
            tracked.append((term.jobs, d, in_domain))
    tracked = [(d, in_domain) for jobs, d, in_domain in tracked if own in jobs]
    scored = scored or prefer is not None or bool(soft_spreads) or bool(soft)

    assignments: list[tuple[str, str]] = []
    key_of = _noise_of(noise, rows)
    task = 0
    while task < len(task_ids):
        # The table's rows follow each placement (table.write), so its columns are current.
        valid = table.usable[rows] & ~dead
        for resource, amount in needs.items():
            valid &= table.capacity[resource][rows] - table.allocated[resource][rows] >= amount
        for spread, d, in_domain in hard_spreads:
            valid &= topology_spread.allowed(spread, d.codes, in_domain, counts)
        for rule, d, in_domain in distinct:
            valid &= distinct_property.allowed(rule, d.codes, in_domain)
        if affinities:
            first = job_affinity.first_anywhere(tuple(rule for rule, _, _ in affinities), counts)
            for rule, d, in_domain in affinities:
                valid &= job_affinity.affinity_allowed(d.codes, in_domain, first)
        for d, in_domain in anti:
            valid &= job_affinity.anti_allowed(d.codes, in_domain)
        if not valid.any():
            break
        best = valid
        if faulty is not None:
            best = _lowest(best, faulty.astype(np.int64))
        for codes, per_group, share in levels:
            level = per_group[codes]
            if share is not None:
                with np.errstate(divide="ignore"):
                    level = np.where(share[codes] > 0, (level + 1) / np.maximum(share[codes], 1e-300), np.inf)
            best = _lowest(best, level)
        if scored:
            score = static_score + WEIGHTS["strategy"] * _strategy(job, ctx, table, rows, job_on, best)
            if prefer is not None:
                score += WEIGHTS["taints"] * _reversed(prefer, best)
            if soft_spreads:
                raw = sum(topology_spread.score(d.codes, in_domain) for _, d, in_domain in soft_spreads)
                score += WEIGHTS["spread"] * _reversed(raw, best)
            if soft:
                raw = sum(term.weight * np.where(d.codes >= 0, in_domain[np.maximum(d.codes, 0)], 0)
                          for term, d, in_domain in soft)
                score += WEIGHTS["jobs"] * _normalised(np.asarray(raw, dtype=np.float64), best)
            best = _lowest(best, -score)
        elif job.strategy == BINPACK:
            best = _lowest(best, -_BINPACK.vector(ctx, table, rows, job_on))
        best = _lowest(best, job_on)
        best = _lowest(best, table.tasks[rows])
        i = int(np.flatnonzero(best)[np.argmin(key_of[best])])
        node = nodes[i]
        if misfit(node, job.resources, job.ports, job.max_per_node, job_counts.get(node.name, 0) if counted else 0,
                  job.priority, job.id) is not None:
            dead[i] = True  # ports, nominations or max_per_node: they stay so while placing
            continue
        task_id = task_ids[task]
        apply(node, job, task_id, job_counts if counted else None)
        assignments.append((task_id, node.name))
        table.write(int(rows[i]))
        task += 1
        if counted:
            job_on[i] += 1
            for codes, per_group, _ in levels:
                per_group[codes[i]] += 1
        if rules is not None and rules.counted:
            counts.add(own, node)
            for d, in_domain in tracked:
                if d.codes[i] >= 0:
                    in_domain[d.codes[i]] += 1
    return assignments


def _noise_of(noise: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return noise[rows] if noise.size else np.zeros(rows.size)


def _lowest(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``mask`` narrowed to the rows where ``values`` is lowest among them."""
    return mask & (values == values[mask].min())


def _reversed(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """0..100, fewer is better, over the rows of ``mask`` (kube's reversed normalisation)."""
    low, high = values[mask].min(), values[mask].max()
    if high == low:
        return np.full(values.size, 100.0)
    return 100.0 * (high - values) / (high - low)


def _normalised(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """0..100, more is better, over the rows of ``mask``."""
    low, high = values[mask].min(), values[mask].max()
    if high == low:
        return np.zeros(values.size)
    return 100.0 * (values - low) / (high - low)


def _strategy(job: JobSpec, ctx: Context, table, rows: np.ndarray, job_on: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if job.strategy == BINPACK:
        return _BINPACK.vector(ctx, table, rows, job_on)
    return _reversed(job_on.astype(np.float64), mask)


def domain_values(table, attribute: str, mask: np.ndarray) -> list[str]:
    """The values of ``attribute`` on the rows of ``mask`` (its eligible domains)."""
    get = attribute_getter(attribute)
    codes, paths = table.groups(("domain", attribute), lambda node: (get(node),))
    present = np.unique(codes[mask]).tolist() if mask.any() else []
    return sorted(value for value in (paths[code][0] for code in present) if value != "")


Getter = Callable[[Node], str]

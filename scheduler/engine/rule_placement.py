"""Placing tasks whose rules depend on where tasks are: the placer's exact, simpler path.

Groups with topology spread, job (anti-)affinity, ``distinct_property``, soft affinities,
spread targets, labels, or nodes with ``PreferNoSchedule`` taints they do not tolerate
(or ``NoExecute`` taints they tolerate only for a while), are placed here one task at a
time, each against every node that passes the job's static filters, with numpy over the
placer's node table: the rules and the room decide which nodes may take the task, then,
in order,

0. nodes whose ``NoExecute`` taint would evict the task after its ``toleration_seconds``
   last: a task evicted by a taint is replaced on another node whenever one fits;
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

from typing import Sequence

import numpy as np

from scheduler.engine import affinity, job_affinity, topology_spread, distinct_property
from scheduler.engine.domains import DomainCounts
from scheduler.engine.fill import apply
from scheduler.engine.fit import misfit
from scheduler.engine.scoring import MAX_NODE_SCORE, Context
from scheduler.engine.taints import discouraged, evicts
from scheduler.model import BINPACK, JobSpec, Node
from scheduler.model.quantities import CPU, MEMORY
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import Rules

WEIGHTS = {"strategy": 1, "affinity": 2, "taints": 3, "spread": 2, "jobs": 2}


class _Domains:
    """One attribute's domain code per candidate row (-1 without the attribute), and the
    values by code."""

    def __init__(self, table, attribute: str, rows: np.ndarray):
        get = attribute_getter(attribute)
        codes, paths = table.groups(("domain", attribute), lambda node: (get(node),))
        self.values = [path[0] for path in paths]
        codes = codes[rows]
        empty = [code for code, value in enumerate(self.values) if value == ""]
        self.has = codes != empty[0] if empty else np.ones(rows.size, dtype=bool)  # in a domain
        self.codes = codes  # the candidate rows' codes (the empty value's is ignored through has)
        self.attribute = attribute
        self.code_of = {value: code for code, value in enumerate(self.values)}

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
    needs = {r: a for r, a in job.resources.items() if a > 0}
    if any(r not in table.capacity for r in needs) or not task_ids:
        return []
    rows = rows[table.room(needs)[rows]]  # a node without room now gets none while this group places
    if not rows.size:
        return []
    nodes: list[Node] = [table.nodes[row] for row in rows.tolist()]
    free = {r: table.capacity[r][rows] - table.allocated[r][rows] for r in needs}
    tasks = table.tasks[rows].astype(np.float64)
    slots = table.slots[rows] if table.limited else None  # a node whose slots fill up takes no more
    job_on = np.array([job_counts.get(node.name, 0) for node in nodes], dtype=np.float64)
    valid = np.ones(rows.size, dtype=bool)  # room, and no misfit found (ports, nominations, max_per_node)
    faulty = np.array([node.name in bad for node in nodes], dtype=np.float64) if bad else None
    leaving = None
    if job.tolerations:
        leaving = table.column(("evicts", job.tolerations), lambda node: float(evicts(node, job.tolerations)))[rows]
        if not leaving.any():
            leaving = None
    counts = counts if counts is not None else DomainCounts()
    tie = noise[rows] * 0.5 if noise.size else np.zeros(rows.size)
    binpack = job.strategy == BINPACK
    fit = _Fit(table, rows, job) if binpack else None

    # Preference levels: each row's group, and the job's tasks per group (over every row).
    levels = []
    if job.preferences:
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
                share = np.array([named.get(path[-1], rest) for path in by_code], dtype=np.float64)
            levels.append((codes[rows], per_group, share))

    # Scores that do not change while placing, cached per node description.
    static_score = None
    if job.affinities:
        key = ("affinity", tuple((a.constraint.text, a.weight) for a in job.affinities))
        static_score = WEIGHTS["affinity"] * table.column(key, lambda node: affinity.score(node, job.affinities))[rows]
    prefer = table.column(("prefer", job.tolerations), lambda node: float(discouraged(node, job.tolerations)))[rows]
    if not prefer.any():
        prefer = None

    # Domain rules: each attribute's codes, each rule's counted tasks by domain.
    domains: dict[str, _Domains] = {}

    def domain(attribute: str) -> _Domains:
        if attribute not in domains:
            domains[attribute] = _Domains(table, attribute, rows)
        return domains[attribute]

    own = job.id
    tracked = []  # (its domains, its counts by code) of every rule counting the job's own tasks
    hard_spreads, soft_spreads, distinct, affinities, anti, soft = [], [], [], [], [], []
    if rules is not None:
        for spread in rules.spreads:
            d = domain(spread.attribute)
            in_domain = d.counted(counts, spread.jobs)
            eligible = np.array([d.code_of[v] for v in spread.domains if v in d.code_of], dtype=np.int64)
            (hard_spreads if spread.hard else soft_spreads).append((spread, d, in_domain, eligible))
            tracked.append((spread.jobs, d, in_domain))
        for rule in rules.distinct:
            d = domain(rule.attribute)
            distinct.append((rule, d, d.counted(counts, (own,))))
            tracked.append(((own,), d, distinct[-1][2]))
        for rule in rules.affinity:
            d = domain(rule.attribute)
            affinities.append((rule, d, d.counted(counts, rule.jobs)))
            tracked.append((rule.jobs, d, affinities[-1][2]))
        for rule in rules.anti:
            d = domain(rule.attribute)
            anti.append((d, d.counted(counts, rule.jobs)))
            tracked.append((rule.jobs, d, anti[-1][1]))
        for term in rules.soft:
            d = domain(term.attribute)
            soft.append((term, d, d.counted(counts, term.jobs)))
            tracked.append((term.jobs, d, soft[-1][2]))
    tracked = [(d, in_domain) for jobs, d, in_domain in tracked if own in jobs]
    first_rules = tuple(rule for rule, _, _ in affinities)
    scored = static_score is not None or prefer is not None or bool(soft_spreads) or bool(soft)
    for resource, left in free.items():
        valid &= left >= needs[resource]
    valid &= table.usable[rows]

    assignments: list[tuple[str, str]] = []
    task = 0
    while task < len(task_ids):
        m = valid
        for spread, d, in_domain, eligible in hard_spreads:
            m = m & topology_spread.allowed(spread, d.codes, d.has, in_domain, eligible)
        for rule, d, in_domain in distinct:
            m = m & distinct_property.allowed(rule, d.codes, d.has, in_domain)
        if affinities:
            first = job_affinity.first_anywhere(first_rules, counts)
            for rule, d, in_domain in affinities:
                m = m & job_affinity.affinity_allowed(d.codes, d.has, in_domain, first)
        for d, in_domain in anti:
            m = m & job_affinity.anti_allowed(d.codes, d.has, in_domain)
        if not m.any():
            break
        if leaving is not None:
            m = _lowest(m, leaving)
        if faulty is not None:
            m = _lowest(m, faulty)
        for codes, per_group, share in levels:
            level = per_group[codes]
            if share is not None:
                shares = share[codes]
                level = np.where(shares > 0, (level + 1) / np.where(shares > 0, shares, 1.0), np.inf)
            m = _lowest(m, level)
        if scored:
            score = WEIGHTS["strategy"] * (fit.scores() if fit is not None else _reversed(job_on, m))
            if static_score is not None:
                score = score + static_score
            if prefer is not None:
                score = score + WEIGHTS["taints"] * _reversed(prefer, m)
            if soft_spreads:
                raw = sum(topology_spread.score(d.codes, d.has, in_domain) for _, d, in_domain, _ in soft_spreads)
                score = score + WEIGHTS["spread"] * _reversed(raw, m)
            if soft:
                raw = sum(term.weight * np.where(d.has, in_domain[d.codes], 0) for term, d, in_domain in soft)
                score = score + WEIGHTS["jobs"] * _normalised(np.asarray(raw, dtype=np.float64), m)
            m = _lowest(m, -score)
        elif fit is not None:
            m = _lowest(m, -fit.scores())
        # Then fewest tasks of the job, fewest tasks, the random tie-break: one key.
        i = int(np.argmin(np.where(m, job_on * 1e6 + tasks + tie, np.inf)))
        node = nodes[i]
        if misfit(node, job.resources, job.ports, job.max_per_node, job_counts.get(node.name, 0) if counted else 0,
                  job.priority, job.id) is not None:
            valid[i] = False  # ports, nominations or max_per_node: they stay so while placing
            continue
        task_id = task_ids[task]
        apply(node, job, task_id, job_counts if counted else None)
        assignments.append((task_id, node.name))
        table.write(int(rows[i]))
        task += 1
        for resource, left in free.items():
            left[i] -= needs[resource]
            if left[i] < needs[resource]:
                valid[i] = False
        tasks[i] += 1
        if slots is not None and slots[i] and tasks[i] >= slots[i]:
            valid[i] = False
        if fit is not None:
            fit.placed(i)
        if counted:
            job_on[i] += 1
            for codes, per_group, _ in levels:
                per_group[codes[i]] += 1
        if rules is not None and rules.counted:
            counts.add(own, node)
            for d, in_domain in tracked:
                if d.has[i]:
                    in_domain[d.codes[i]] += 1
    return assignments


class _Fit:
    """Nomad's ScoreFit (the binpack scorer) of the candidate rows, kept as they fill."""

    def __init__(self, table, rows: np.ndarray, job: JobSpec):
        self.parts = []
        for resource in (CPU, MEMORY):
            if resource in table.capacity:
                capacity = table.capacity[resource][rows].astype(np.float64)
                used = table.allocated[resource][rows].astype(np.float64)
                self.parts.append((capacity, used, float(job.resources.get(resource, 0))))

    def scores(self) -> np.ndarray:
        free = []
        for capacity, used, need in self.parts:
            with np.errstate(divide="ignore", invalid="ignore"):
                fraction = np.where(capacity > 0, 1 - (used + need) / capacity, 0.0)
            free.append(np.clip(fraction, 0.0, 1.0))
        while len(free) < 2:
            free.append(np.zeros_like(free[0]) if free else np.zeros(0))
        return (20 - np.power(10.0, free[0]) - np.power(10.0, free[1])) * (MAX_NODE_SCORE / 18)

    def placed(self, i: int) -> None:
        for _, used, need in self.parts:
            used[i] += need


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


def domain_values(table, attribute: str, mask: np.ndarray) -> list[str]:
    """The values of ``attribute`` on the rows of ``mask`` (its eligible domains)."""
    get = attribute_getter(attribute)
    codes, paths = table.groups(("domain", attribute), lambda node: (get(node),))
    present = np.unique(codes[mask]).tolist() if mask.any() else []
    return sorted(value for value in (paths[code][0] for code in present) if value != "")


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

from scheduler.engine import job_affinity, topology_spread, distinct_property
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


def preference_levels(table, job: JobSpec, job_counts: dict[str, int],
                      rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Per preference depth: each of ``rows``' group, the job's tasks per group (over every
    row of the table), and each group's share where the preference names targets."""
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    if not job.preferences:
        return levels
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
    return levels


def static_columns(table, job: JobSpec, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The job's scores over ``rows`` that do not change while it places (each cached per
    node description): its soft node affinities, and the taints it would rather avoid;
    None where nothing counts."""
    static_score = WEIGHTS["affinity"] * affinity_column(table, job.affinities)[rows] if job.affinities else None
    prefer = prefer_column(table, job.tolerations)[rows]
    return static_score, (prefer if prefer.any() else None)


class DomainLookup:
    """Each attribute's :class:`DomainCodes` over ``rows``, made when first asked for."""

    def __init__(self, table, rows: np.ndarray):
        self.table, self.rows = table, rows
        self.made: dict[str, DomainCodes] = {}

    def __call__(self, attribute: str) -> DomainCodes:
        if attribute not in self.made:
            self.made[attribute] = DomainCodes(self.table, attribute, self.rows)
        return self.made[attribute]


class DomainCodes:
    """One attribute's domain code per candidate row (-1 without the attribute), and the
    values by code."""

    def __init__(self, table, attribute: str, rows: np.ndarray):
        get = attribute_getter(attribute)
        codes, paths = table.groups(("domain", attribute), lambda node: (get(node),))
        self.values, self.code_of, empty = _values_of(paths)
        codes = codes[rows]
        self.has = codes != empty if empty is not None else np.ones(rows.size, dtype=bool)  # in a domain
        self.codes = codes  # the candidate rows' codes (the empty value's is ignored through has)
        self.attribute = attribute

    def counted(self, counts: DomainCounts, jobs) -> np.ndarray:
        """The counted tasks of ``jobs`` in each domain, by code (as ``counts.of`` gives each):
        from the fields the jobs have, not from every value (a hostname has thousands)."""
        out = np.zeros(max(len(self.values), 1), dtype=np.int64)
        prefix = f"{self.attribute}="
        size, code_of = len(prefix), self.code_of
        for job in jobs:
            for field, n in counts.counts.get(job, {}).items():
                if field.startswith(prefix):
                    code = code_of.get(field[size:])
                    if code is not None:
                        out[code] += n
        return out


_VALUES: dict[int, tuple] = {}  # id of a table's list of paths -> (that list, values, code by value, empty's code)


def _values_of(paths: list) -> tuple[list[str], dict[str, int], int | None]:
    """An attribute's values by code, codes by value and the empty value's code, made once
    per list of paths the table keeps (per attribute and node description)."""
    cached = _VALUES.get(id(paths))
    if cached is None or cached[0] is not paths:
        if len(_VALUES) > 256:
            _VALUES.clear()
        values = [path[0] for path in paths]
        code_of = {value: code for code, value in enumerate(values)}
        cached = _VALUES[id(paths)] = (paths, values, code_of, code_of.get(""))
    return cached[1], cached[2], cached[3]


def leaving_column(table, tolerations) -> np.ndarray:
    """1 where a ``NoExecute`` taint would evict the task after its ``toleration_seconds``
    (per node, cached by the table; worked out once per set of taints)."""
    return table.column(("evicts", tolerations), _by_taints(lambda node: float(evicts(node, tolerations))))


def prefer_column(table, tolerations) -> np.ndarray:
    """The untolerated ``PreferNoSchedule`` taints of each node."""
    return table.column(("prefer", tolerations), _by_taints(lambda node: float(discouraged(node, tolerations))))


def affinity_column(table, affinities) -> np.ndarray:
    """Each node's soft affinity score (Nomad's, -100..100: ``affinity.score`` for every
    node), from the value each affinity's attribute has on it: the values are coded once
    per attribute and node description (shared by every affinity on that attribute), and
    each affinity is tested once per value."""
    key = tuple((a.constraint.text, a.weight) for a in affinities)
    cached = _AFFINITY.get(key)
    if cached is not None and cached[0] is table and cached[1] == table.epoch:
        return cached[2]
    total = sum(abs(a.weight) for a in affinities)
    matched = np.zeros(len(table.nodes), dtype=np.int64)  # the weights each node matches, summed
    for a in affinities:
        get, test = a.constraint.get, a.constraint.test
        codes, paths = table.groups(("value", a.constraint.key), lambda node, get=get: (get(node),))
        weights = np.array([a.weight if test(path[0]) else 0 for path in paths] or [0], dtype=np.int64)
        matched += weights[codes]
    column = 100.0 * matched / total if total else matched.astype(np.float64)
    if len(_AFFINITY) > 64:
        _AFFINITY.clear()
    _AFFINITY[key] = (table, table.epoch, column)
    return column


_AFFINITY: dict[tuple, tuple] = {}  # affinities -> (table, its epoch then, the column), while no description changes


def _by_taints(value):
    """``value(node)``, asked once per set of taints (what it depends on)."""
    known: dict[tuple, float] = {}

    def of(node) -> float:
        found = known.get(node.taints)
        if found is None:
            found = known[node.taints] = value(node)
        return found

    return of


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
        leaving = leaving_column(table, job.tolerations)[rows]
        if not leaving.any():
            leaving = None
    counts = counts if counts is not None else DomainCounts()
    tie = noise[rows] * 0.5 if noise.size else np.zeros(rows.size)
    binpack = job.strategy == BINPACK
    fit = Fit(table, rows, job) if binpack else None

    levels = preference_levels(table, job, job_counts, rows)

    static_score, prefer = static_columns(table, job, rows)
    # Domain rules: each attribute's codes, each rule's counted tasks by domain.
    domain = DomainLookup(table, rows)

    own = job.id
    tracked = []  # (its domains, its counts by code) of every rule counting the job's own tasks
    hard_spreads, soft_spreads, distinct, affinities, anti, soft = [], [], [], [], [], []
    if rules is not None:
        for spread in rules.spreads:
            d = domain(spread.attribute)
            in_domain = d.counted(counts, spread.jobs)
            eligible = np.array([d.code_of[v] for v in spread.domains if v in d.code_of], dtype=np.int64)
            if spread.hard:
                beyond = topology_spread.outside(spread, counts, d.code_of)  # a pinned node alone: the rest
                hard_spreads.append((spread, d, in_domain, eligible, beyond))
            else:
                soft_spreads.append((spread, d, in_domain, eligible))
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
        for spread, d, in_domain, eligible, beyond in hard_spreads:
            m = m & topology_spread.allowed(spread, d.codes, d.has, in_domain, eligible, beyond)
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


class Fit:
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


class KeptFit:
    """Each candidate row's bin-packing score (Nomad's ScoreFit, as :class:`Fit`
    gives it over every row), kept as rows fill. A row's new score is the one any row with
    the same free fractions has (the loop works them out for all rows at once, so equal
    fractions give equal scores), else worked out alone."""

    def __init__(self, table, rows: np.ndarray, job: JobSpec):
        self.fit = Fit(table, rows, job)
        self.fractions = [_fractions(capacity, used, need) for capacity, used, need in self.fit.parts]
        self.scores: np.ndarray = self.fit.scores()
        self.known: dict[tuple[float, ...], float] = {}

    def placed(self, i: int) -> float:
        """Row ``i`` took a task: its new score."""
        self.fit.placed(i)
        values = tuple([float(_fractions(capacity[i:i + 1], used[i:i + 1], need)[0])
                        for capacity, used, need in self.fit.parts])
        found = self.known.get(values)
        if found is None:
            same = np.ones(self.scores.size, dtype=bool)
            for fractions, value in zip(self.fractions, values):
                same &= fractions == value
            rows = np.flatnonzero(same)
            if rows.size:
                found = float(self.scores[rows[0]])
            else:  # the loop's formula, for this row alone
                parts = [np.array([value]) for value in values]
                while len(parts) < 2:
                    parts.append(np.zeros(1))
                found = float(((20 - np.power(10.0, parts[0]) - np.power(10.0, parts[1])) * (MAX_NODE_SCORE / 18))[0])
            self.known[values] = found
        return found


def _fractions(capacity: np.ndarray, used: np.ndarray, need: float) -> np.ndarray:
    """What ``Fit.scores`` raises 10 to: each row's free fraction after the task."""
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(capacity > 0, 1 - (used + need) / capacity, 0.0)
    return np.clip(fraction, 0.0, 1.0)


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
    present = np.flatnonzero(np.bincount(codes[mask])).tolist() if mask.any() else []
    return sorted(value for value in (paths[code][0] for code in present) if value != "")


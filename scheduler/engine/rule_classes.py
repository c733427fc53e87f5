"""The rule path by classes of alike nodes: the placements :func:`rule_placement.place`
makes, in the same order and with the same arithmetic, at a cost per task that grows with
the number of classes rather than the number of nodes.

Candidate rows that the rule path's tiers and scores cannot tell apart form a class: the
same ``NoExecute`` eviction, faulty mark, preference groups, soft affinity and
``PreferNoSchedule`` scores, and the same domain of every attribute that a spread, a
required job affinity or a soft term reads. Within a class only the job's tasks on the
node, the node's tasks, its fill (bin packing) and the random tie-break differ, and they
order its rows the same way for every task: the best fit first when bin packing, then
fewest tasks of the job (which is also the best spread score), then the final key. So
each class keeps its rows in that order (a stream sorted a chunk at a time, and a heap
for the rows it has placed on), and each task looks at one row per class, the first that
is still live: the tiers narrow the classes, the normalised score is taken over the live
rows of those that remain (the fewest and most tasks of the job come from each class's
counts), and the final key picks among their first rows the row the node-by-node loop
would pick.

Required anti-affinity and ``distinct_property`` only ever take rows away while a group
places (its own tasks only add to the counts), so they are held per row: a row they
refuse leaves its class for the rest of the call. Groups with more than
:data:`MAX_CLASSES` classes (a spread over hostnames) are left to the node-by-node loop:
:func:`place` returns None for them.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Sequence

import numpy as np

from scheduler.engine import job_affinity, topology_spread
from scheduler.engine.domains import DomainCounts
from scheduler.engine.fill import apply
from scheduler.engine.fit import misfit
from scheduler.engine.rule_placement import (WEIGHTS, DomainCodes, DomainLookup, KeptFit, affinity_column,
                                             leaving_column, prefer_column, preference_levels,
                                             static_columns)
from scheduler.engine.scoring import Context
from scheduler.model import BINPACK, JobSpec
from scheduler.model.constraints import attribute_getter
from scheduler.model.placement_rules import Rules, SpreadRule

MAX_CLASSES = 64  # beyond this the node-by-node loop is as quick
MAX_ELIGIBLE = 64  # a hard spread's eligible domains, looked at for every task
INF = float("inf")
STRATEGY, TAINTS, SPREAD, JOBS = WEIGHTS["strategy"], WEIGHTS["taints"], WEIGHTS["spread"], WEIGHTS["jobs"]
# A class's first live row: its order within the class (minus its bin-packing score, or 0),
# its key, the row, the job's tasks on it and whether it is in the class's heap.
Top = tuple[float, float, int, float, bool]


class _Class:
    """One class's live rows: a stream of those not placed on yet, in (order, key, row)
    order and sorted ``chunk`` at a time, a heap of those placed on (order, key, row, tasks
    of the job), how many are live and how many of them hold each number of the job's
    tasks. The order is 0 but when bin packing: minus the row's fit score."""

    __slots__ = ("rows", "orders", "keys", "ons", "at", "rest", "rest_orders", "rest_keys", "rest_ons", "chunk",
                 "heap", "live", "by_on", "top", "high")

    def __init__(self, rows: np.ndarray, orders: np.ndarray, keys: np.ndarray, ons: np.ndarray, chunk: int):
        self.rest, self.rest_orders, self.rest_keys, self.rest_ons = rows, orders, keys, ons
        self.chunk = chunk
        self.rows: list[int] = []
        self.orders: list[float] = []
        self.keys: list[float] = []
        self.ons: list[float] = []
        self.at = 0
        self.heap: list[tuple[float, float, int, float]] = []
        self.live = int(rows.size)
        self.by_on: dict[float, int] = {0.0: self.live}
        self.top: Top | None = None  # the first live row, while nothing in the class changed
        self.high = -1.0  # the most tasks of the job on a live row (-1: to be found again)
        if ons.any():
            for on in ons[ons != 0].tolist():
                self.by_on[0.0] -= 1
                self.by_on[on] = self.by_on.get(on, 0) + 1
        self._next()

    def _next(self) -> bool:
        """The next chunk of the stream: every remaining row whose (order, key) is at most
        the ``chunk``-th smallest (so ties are never split), in (order, key, row) order."""
        size = int(self.rest.size)
        if not size:
            return False
        rows, orders, keys, ons = self.rest, self.rest_orders, self.rest_keys, self.rest_ons
        if size > 2 * self.chunk:
            ordered = orders.any()
            first = orders if ordered else keys
            bound = np.partition(first, self.chunk - 1)[self.chunk - 1]
            take = first <= bound
            keep = ~take
            self.rest, self.rest_orders = rows[keep], orders[keep]
            self.rest_keys, self.rest_ons = keys[keep], ons[keep]
            rows, orders, keys, ons = rows[take], orders[take], keys[take], ons[take]
        else:
            self.rest = rows[:0]
        # The rows ascend, so a stable sort keeps equal (order, key) in row order.
        order = np.lexsort((keys, orders)) if orders.any() else np.argsort(keys, kind="stable")
        self.rows, self.orders = rows[order].tolist(), orders[order].tolist()
        self.keys, self.ons = keys[order].tolist(), ons[order].tolist()
        self.at = 0
        return True

    def changed(self) -> None:
        self.top, self.high = None, -1.0

    def first(self, dead: bytearray, placed_on: bytearray) -> Top | None:
        """The first live row."""
        if self.top is not None:
            return self.top
        heap = self.heap
        while heap and dead[heap[0][2]]:
            heappop(heap)
        while True:
            at, rows = self.at, self.rows
            while at < len(rows) and (dead[rows[at]] or placed_on[rows[at]]):
                at += 1
            self.at = at
            if at < len(rows) or not self._next():
                break
        top: Top | None = None
        if self.at < len(self.rows):
            at = self.at
            streamed = (self.orders[at], self.keys[at], self.rows[at])
            if heap and (heap[0][0], heap[0][1], heap[0][2]) < streamed:
                top = (heap[0][0], heap[0][1], heap[0][2], heap[0][3], True)
            else:
                top = (streamed[0], streamed[1], streamed[2], self.ons[at], False)
        elif heap:
            top = (heap[0][0], heap[0][1], heap[0][2], heap[0][3], True)
        self.top = top
        return top

    def most_on(self) -> float:
        if self.high < 0:
            self.high = max([on for on, rows in self.by_on.items() if rows])
        return self.high


class _Blocker:
    """A required anti-affinity (a domain holding a counted task) or a ``distinct_property``
    (a domain holding ``limit`` of the job's tasks): the rows of such a domain are refused
    for the rest of the call."""

    __slots__ = ("domains", "counted", "limit", "anti", "members")

    def __init__(self, domains: DomainCodes, counted: list, limit: int, anti: bool):
        self.domains, self.counted, self.limit, self.anti = domains, counted, limit, anti
        self.members: tuple | None = None  # rows by domain code, made when first needed

    def refused(self) -> np.ndarray:
        d, in_domain = self.domains, np.asarray(self.counted, dtype=np.int64)
        if self.anti:  # a node without the attribute meets it
            return d.has & (in_domain > 0)[d.codes]
        return ~(d.has & (in_domain < self.limit)[d.codes])  # a node without the attribute takes none

    def rows_of(self, code: int) -> list[int]:
        if self.members is None:
            codes = self.domains.codes
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(int(codes.max()) + 2 if codes.size else 1))
            self.members = (order.tolist(), bounds.tolist())
        order, bounds = self.members
        if code + 1 >= len(bounds):
            return []
        return order[bounds[code]:bounds[code + 1]]


def place(table, rows: np.ndarray, job: JobSpec, task_ids: Sequence[str], job_counts: dict[str, int], counted: bool,
          ctx: Context, bad: frozenset[str], rules: Rules | None, counts: DomainCounts | None,
          noise: np.ndarray) -> list[tuple[str, str]] | None:
    """As :func:`scheduler.engine.rule_placement.place` (same arguments, same assignments and
    the same changes to the nodes, ``job_counts`` and ``counts``), or None, having changed
    nothing, when the group is not one for classes."""
    needs = {r: a for r, a in job.resources.items() if a > 0}
    if any(r not in table.capacity for r in needs) or not task_ids:
        return []
    rows = rows[table.room(needs)[rows]]
    if not rows.size:
        return []
    n = int(rows.size)
    domain_counts = counts if counts is not None else DomainCounts()

    # The rule path's columns over the candidate rows, as it makes them.
    leaving: np.ndarray | None = leaving_column(table, job.tolerations)[rows] if job.tolerations else None
    if leaving is not None and not leaving.any():
        leaving = None
    faulty: np.ndarray | None = None
    if bad:
        faulty = np.zeros(n, dtype=np.float64)
        for name in bad:
            row = table.rows.get(name)
            if row is not None:
                faulty[rows == row] = 1.0
        if not faulty.any():
            faulty = None
    static_score, prefer = static_columns(table, job, rows)
    domain = DomainLookup(table, rows)

    own = job.id
    keyed: set[str] = set()  # attributes whose domain is part of a row's class
    hard: list[tuple[SpreadRule, DomainCodes, list[int], list[int], list[int]]] = []
    spreads: list[tuple[DomainCodes, list[int]]] = []  # ScheduleAnyway
    affinities: list[tuple[DomainCodes, list[int]]] = []
    soft: list[tuple[int, DomainCodes, list[int]]] = []
    blockers: list[_Blocker] = []
    tracked: list[tuple[DomainCodes, list[int], _Blocker | None]] = []  # rules counting the job's own tasks
    first_rules: tuple = ()
    if rules is not None:
        first_rules = rules.affinity
        for spread in rules.spreads:
            d = domain(spread.attribute)
            in_domain: list[int] = d.counted(domain_counts, spread.jobs).tolist()
            if spread.hard:
                eligible = [d.code_of[v] for v in spread.domains if v in d.code_of]
                if len(eligible) > MAX_ELIGIBLE:
                    return None
                # Eligible domains with no row here (a pinned node alone) still hold the minimum.
                beyond = topology_spread.outside(spread, domain_counts, d.code_of)
                hard.append((spread, d, in_domain, eligible, beyond))
            else:
                spreads.append((d, in_domain))
            keyed.add(spread.attribute)
            if own in spread.jobs:
                tracked.append((d, in_domain, None))
        for rule in rules.distinct:
            d = domain(rule.attribute)
            blockers.append(_Blocker(d, d.counted(domain_counts, (own,)).tolist(), rule.limit, False))
            tracked.append((d, blockers[-1].counted, blockers[-1]))
        for affinity_rule in rules.affinity:
            d = domain(affinity_rule.attribute)
            affinities.append((d, d.counted(domain_counts, affinity_rule.jobs).tolist()))
            keyed.add(affinity_rule.attribute)
            if own in affinity_rule.jobs:
                tracked.append((d, affinities[-1][1], None))
        for anti in rules.anti:
            d = domain(anti.attribute)
            blockers.append(_Blocker(d, d.counted(domain_counts, anti.jobs).tolist(), 1, True))
            if own in anti.jobs:
                tracked.append((d, blockers[-1].counted, blockers[-1]))
        for term in rules.soft:
            d = domain(term.attribute)
            soft.append((term.weight, d, d.counted(domain_counts, term.jobs).tolist()))
            keyed.add(term.attribute)
            if own in term.jobs:
                tracked.append((d, soft[-1][2], None))
    count_own = rules is not None and rules.counted

    # Rows refused from the start, and each live row's class.
    refused = ~table.usable[rows]
    for resource, amount in needs.items():
        refused |= table.capacity[resource][rows] - table.allocated[resource][rows] < amount
    for blocker in blockers:
        refused |= blocker.refused()
    alive = np.flatnonzero(~refused)
    classes = _class_codes(table, job, sorted(keyed))[rows]
    if faulty is not None:
        classes = classes * 2 + faulty.astype(np.int64)
    by_class = alive[np.argsort(classes[alive], kind="stable")]
    in_order = classes[by_class]
    starts = np.flatnonzero(np.concatenate(([True], in_order[1:] != in_order[:-1]))) if by_class.size \
        else np.zeros(0, dtype=np.int64)
    if starts.size > MAX_CLASSES:
        return None

    # From here on the call places: nothing above changed anything.
    tasks = table.tasks[rows].astype(np.float64)
    job_on = np.zeros(n, dtype=np.float64)
    if job_counts:
        position = np.full(len(table.nodes), -1, dtype=np.int64)
        position[rows] = np.arange(n)
        for name, on_node in job_counts.items():
            row = table.rows.get(name)
            if row is not None and position[row] >= 0:
                job_on[position[row]] = on_node
    tie = noise[rows] * 0.5 if noise.size else np.zeros(n)
    key = job_on * 1e6 + tasks + tie
    fit = KeptFit(table, rows, job) if job.strategy == BINPACK else None
    orders = -fit.scores if fit is not None else np.zeros(n)
    count_classes = int(starts.size)
    ends = np.append(starts[1:], by_class.size)
    of_class = np.full(n, -1, dtype=np.int64)
    of_class[by_class] = np.repeat(np.arange(count_classes), ends - starts)
    chunk = 2 * len(task_ids) + 16
    groups: list[_Class] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        members = by_class[start:end]
        groups.append(_Class(members, orders[members], key[members], job_on[members], chunk))
    reps = by_class[starts]  # one row of each class, for its values

    levels: list[tuple[list[int], list[float], list[float] | None]] = [  # per preference depth, per class
        (codes[reps].tolist(), per_group.tolist(), share.tolist() if share is not None else None)
        for codes, per_group, share in preference_levels(table, job, job_counts, rows)]

    # Each class's fixed values, from its representative row.
    view = _Classes(groups, reps)
    view.leaving = leaving[reps].tolist() if leaving is not None else None
    view.faulty = faulty[reps].tolist() if faulty is not None else None
    view.static = static_score[reps].tolist() if static_score is not None else None
    view.prefer = prefer[reps].tolist() if prefer is not None else None
    view.levels = levels
    view.hard = [(spread, d.codes[reps].tolist(), d.has[reps].tolist(), in_domain, eligible, beyond)
                 for spread, d, in_domain, eligible, beyond in hard]
    view.affinities = [(d.codes[reps].tolist(), d.has[reps].tolist(), in_domain) for d, in_domain in affinities]
    view.spreads = [(d.codes[reps].tolist(), d.has[reps].tolist(), in_domain,
                     np.flatnonzero(np.bincount(d.codes)).tolist()) for d, in_domain in spreads]
    view.soft = [(weight, d.codes[reps].tolist(), d.has[reps].tolist(), in_domain) for weight, d, in_domain in soft]
    view.binpack = fit is not None
    view.scored = static_score is not None or prefer is not None or bool(spreads) or bool(soft)
    view.raw_fixed = not count_own or not any(counted_in is in_domain for _, counted_in, _ in tracked
                             for in_domain in [*(x[1] for x in spreads), *(x[2] for x in soft)])

    dead = view.dead = bytearray(refused.astype(np.uint8).tobytes())
    placed_on = view.placed_on = bytearray(n)  # its entry is in its class's heap now
    view.of_class, view.job_on = of_class, job_on
    free = {r: table.capacity[r][rows] - table.allocated[r][rows] for r in needs}
    slots = table.slots[rows] if table.limited else None
    assignments: list[tuple[str, str]] = []
    task = 0
    while task < len(task_ids):
        first = bool(first_rules) and job_affinity.first_anywhere(first_rules, domain_counts)
        top = view.best(first)
        if top is None:
            break
        _, _, i, before, from_heap = top
        group = groups[int(of_class[i])]
        row = int(rows[i])
        node = table.nodes[row]
        if misfit(node, job.resources, job.ports, job.max_per_node, job_counts.get(node.name, 0) if counted else 0,
                  job.priority, job.id) is not None:
            view.drop(i)  # ports, nominations or max_per_node: they stay so while placing
            continue
        task_id = task_ids[task]
        apply(node, job, task_id, job_counts if counted else None)
        assignments.append((task_id, node.name))
        table.write(row)
        task += 1
        if from_heap:
            heappop(group.heap)
        placed_on[i] = 1
        group.changed()
        valid = True
        for resource, left in free.items():
            left[i] -= needs[resource]
            if left[i] < needs[resource]:
                valid = False
        tasks[i] += 1
        if slots is not None and slots[i] and tasks[i] >= slots[i]:
            valid = False
        after = before
        if counted:
            after = before + 1.0
            job_on[i] = after
            c = int(of_class[i])
            for codes_of, per_group_of, _ in levels:
                per_group_of[codes_of[c]] += 1
        group.by_on[before] -= 1
        if valid:
            group.by_on[after] = group.by_on.get(after, 0) + 1
            order = 0.0
            if fit is not None:
                order = -fit.placed(i)
            heappush(group.heap, (order, after * 1e6 + float(tasks[i]) + float(tie[i]), i, after))
        else:
            dead[i] = 1
            group.live -= 1
        if count_own:
            domain_counts.add(own, node)
            for d, counted_in, limited in tracked:
                if d.has[i]:
                    code = int(d.codes[i])
                    counted_in[code] += 1
                    if limited is not None and counted_in[code] == limited.limit:
                        for k in limited.rows_of(code):
                            view.drop(k)
    return assignments


class _Classes:
    """The classes of one call, and each one's fixed values by class index: what picks the
    row for each task."""

    def __init__(self, groups: list[_Class], reps: np.ndarray):
        self.groups = groups
        self.count = len(groups)
        self.leaving: list[float] | None = None
        self.faulty: list[float] | None = None
        self.static: list[float] | None = None
        self.prefer: list[float] | None = None
        self.levels: list[tuple[list[int], list[float], list[float] | None]] = []
        self.hard: list[tuple[SpreadRule, list[int], list[bool], list[int], list[int], list[int]]] = []
        self.affinities: list[tuple[list[int], list[bool], list[int]]] = []
        self.spreads: list[tuple[list[int], list[bool], list[int], list[int]]] = []  # and the codes present
        self.soft: list[tuple[int, list[int], list[bool], list[int]]] = []
        self.scored = False
        self.binpack = False
        self.raw: tuple[list[float], list[float]] | None = None
        self.raw_fixed = False  # no ScheduleAnyway spread or soft term counts the job's own tasks
        self.dead = bytearray()
        self.placed_on = bytearray()
        self.of_class: np.ndarray = reps
        self.job_on: np.ndarray = reps

    def drop(self, i: int) -> None:
        """Row ``i`` takes no more tasks in this call."""
        if not self.dead[i]:
            self.dead[i] = 1
            group = self.groups[int(self.of_class[i])]
            group.live -= 1
            group.by_on[float(self.job_on[i])] -= 1
            group.changed()

    def best(self, first: bool) -> Top | None:
        """The row the node-by-node loop would take for the next task, or None when the hard
        rules leave no row: the first row of each class that passes them and the tiers,
        then the best normalised score, then the lowest key."""
        groups = self.groups
        kept = [c for c in range(self.count) if groups[c].live]
        for spread, codes, has, in_domain, eligible, beyond in self.hard:
            lows = [in_domain[e] for e in eligible] + beyond
            low = 0 if not lows or len(lows) < spread.min_domains else min(lows)
            most = spread.max_skew - int(spread.self_matches) + low
            kept = [c for c in kept if has[c] and in_domain[codes[c]] <= most]
        for codes, has, in_domain in self.affinities:
            kept = [c for c in kept if has[c] and (first or in_domain[codes[c]] > 0)]
        if not kept:
            return None
        if self.leaving is not None:
            kept = _lowest(kept, self.leaving)
        if self.faulty is not None:
            kept = _lowest(kept, self.faulty)
        for codes, per_group, share in self.levels:
            values = [0.0] * self.count
            for c in kept:
                level = per_group[codes[c]]
                if share is not None:
                    of = share[codes[c]]
                    level = (level + 1) / of if of > 0 else INF
                values[c] = level
            kept = _lowest(kept, values)
        tops: list[Top] = []
        for c in kept:
            top = groups[c].first(self.dead, self.placed_on)
            assert top is not None  # a class with live rows has a first one
            tops.append(top)
        if self.scored and len(kept) > 1:
            tops = self._best_scored(kept, tops)
        elif self.binpack and len(kept) > 1:  # the best fit, then the key
            best_fit = min([top[0] for top in tops])
            tops = [top for top in tops if top[0] == best_fit]
        best = tops[0]
        for top in tops:
            if top[1] < best[1] or (top[1] == best[1] and top[2] < best[2]):
                best = top
        return best

    def _raw(self) -> tuple[list[float], list[float]]:
        """Each class's ScheduleAnyway spread and soft job term sums, before normalising
        (kept for the call while none of them counts the job's own tasks)."""
        if self.raw is not None:
            return self.raw
        spread_raw = [0.0] * self.count
        for codes, has, in_domain, present in self.spreads:
            worst = float(max([in_domain[code] for code in present])) + 1
            for c in range(self.count):
                spread_raw[c] = spread_raw[c] + (float(in_domain[codes[c]]) if has[c] else worst)
        soft_raw = [0.0] * self.count
        if self.soft:
            raw = [0] * self.count
            for weight, codes, has, in_domain in self.soft:
                for c in range(self.count):
                    raw[c] = raw[c] + weight * (in_domain[codes[c]] if has[c] else 0)
            soft_raw = [float(v) for v in raw]
        if self.raw_fixed:
            self.raw = (spread_raw, soft_raw)
        return spread_raw, soft_raw

    def _best_scored(self, kept: list[int], tops: list[Top]) -> list[Top]:
        """The first rows with the best normalised score (the rule path's kube-style sum,
        over the live rows of ``kept``)."""
        low_on = high_on = 0.0
        if not self.binpack:
            low_on = min([top[3] for top in tops])
            high_on = max([self.groups[c].most_on() for c in kept])
        prefer_low = prefer_high = spread_low = spread_high = soft_low = soft_high = 0.0
        if self.prefer is not None:
            prefer_low, prefer_high = _range(kept, self.prefer)
        no_raw: tuple[list[float], list[float]] = ([], [])
        spread_raw, soft_raw = self._raw() if self.spreads or self.soft else no_raw
        if self.spreads:
            spread_low, spread_high = _range(kept, spread_raw)
        if self.soft:
            soft_low, soft_high = _range(kept, soft_raw)
        scores = []
        for c, top in zip(kept, tops):
            s = STRATEGY * (-top[0] if self.binpack else _reversed(top[3], low_on, high_on))
            if self.static is not None:
                s = s + self.static[c]
            if self.prefer is not None:
                s = s + TAINTS * _reversed(self.prefer[c], prefer_low, prefer_high)
            if self.spreads:
                s = s + SPREAD * _reversed(spread_raw[c], spread_low, spread_high)
            if self.soft:
                s = s + JOBS * _normalised(soft_raw[c], soft_low, soft_high)
            scores.append(s)
        high = max(scores)
        return [top for top, s in zip(tops, scores) if s == high]


_CLASS_CODES: dict[tuple, tuple] = {}  # key -> (table, its epoch then, each row's class code)


def _class_codes(table, job: JobSpec, attributes: list[str]) -> np.ndarray:
    """Each table row's class (before faulty marks): rows alike in every column the rule
    path reads of the node itself, combined from the table's own cached columns and codes,
    and kept while no node's description changes."""
    key = (job.tolerations, tuple((a.constraint.text, a.weight) for a in job.affinities), tuple(attributes),
           tuple(p.spread for p in job.preferences))
    cached = _CLASS_CODES.get(key)
    if cached is not None and cached[0] is table and cached[1] == table.epoch:
        return cached[2]
    parts = [prefer_column(table, job.tolerations)]
    if job.tolerations:
        parts.append(leaving_column(table, job.tolerations))
    if job.affinities:
        parts.append(affinity_column(table, job.affinities))
    for attribute in attributes:
        get = attribute_getter(attribute)
        parts.append(table.groups(("domain", attribute), lambda node, get=get: (get(node),))[0])
    if job.preferences:
        getters = [p.get for p in job.preferences]
        parts.append(table.groups(("level", *key[3]), lambda node: tuple(get(node) for get in getters))[0])
    codes = np.zeros(len(table.nodes), dtype=np.int64)
    for part in parts:
        part = part if part.dtype.kind == "i" else _dense(part)
        if part.size:
            codes = _dense(codes * (int(part.max()) + 1) + part)
    if len(_CLASS_CODES) > 64:
        _CLASS_CODES.clear()
    _CLASS_CODES[key] = (table, table.epoch, codes)
    return codes


def _dense(values: np.ndarray) -> np.ndarray:
    """Codes 0..k-1 for the distinct values, in their order (np.unique's inverse, without
    the masked-array module np.unique imports)."""
    if not values.size:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    codes = np.empty(values.size, dtype=np.int64)
    codes[order] = np.cumsum(np.concatenate(([False], ordered[1:] != ordered[:-1])))
    return codes


def _lowest(kept: list[int], values: list[float]) -> list[int]:
    """``kept`` narrowed to the classes whose value is lowest among them."""
    low = min([values[c] for c in kept])
    return [c for c in kept if values[c] == low]


def _range(kept: list[int], values: list[float]) -> tuple[float, float]:
    return min([values[c] for c in kept]), max([values[c] for c in kept])


def _reversed(value: float, low: float, high: float) -> float:
    """As rule_placement._reversed, for one value."""
    if high == low:
        return 100.0
    return 100.0 * (high - value) / (high - low)


def _normalised(value: float, low: float, high: float) -> float:
    if high == low:
        return 0.0
    return 100.0 * (value - low) / (high - low)

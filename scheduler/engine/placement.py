"""Placing a batch of identical tasks: the pure-Python heart of the scheduler.

Given the worker's view of the nodes and a batch of tasks of one job (same spec
version), choose a node for each, or say precisely why none fits (the reasons, counted
over the nodes: :mod:`scheduler.engine.explanations`). No Redis here: a
worker calls :meth:`Placer.place`, then commits the assignments with Lua, which
re-checks each one with the same rule (:func:`scheduler.fit.misfit`).

One batch, top to bottom:

1. Filter (:mod:`scheduler.filters`). The static filters (plugins, constraints,
   platform) are cached per node object and per static part of the spec. The dynamic
   rule, ``misfit``, is asked only about nodes that reach the top of a heap: a node the
   fill never gets to is never checked.
2. Rank (:mod:`scheduler.scoring`). Every eligible node gets the ranking's key plus a
   random tie-break from the placer's seeded generator, so a run can be replayed (the
   batch form of kube's selectHost, which picks uniformly among the best).
3. Build the tree of preference groups once (:mod:`scheduler.topology`).
4. Fill: each task walks the tree to the best node; the placement is applied to the
   node and to ``job_counts`` (so the next task, and the next call, see it) and only
   that node is re-keyed. A node is given a task only if ``misfit`` says it fits then.

Cost: O(nodes) for 1-3, O(tasks * depth * log nodes) for 4, instead of O(nodes * tasks).

On large clusters (``vector_min_nodes``) steps 1-3 start from columns instead
(:mod:`scheduler.node_table`): numpy keeps the nodes with room that pass the static
filters, orders them by the ranking's key (per preference group), and only the best
``tasks`` of each group that ``misfit`` confirms go into the heaps. That is exact, not a
sample: each placement changes one node, so while a group has taken fewer than ``tasks``
tasks, one of its ``tasks`` best nodes is still at least as good as any node outside
them; and a candidate is only used up by taking a task.

With ``percentage_of_nodes_to_score`` the scan checks fit as it goes and stops once it
has found enough nodes that fit (kube-scheduler's numFeasibleNodesToFind, and at least
one per task), starting where the previous scan stopped so every node gets its turn.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import numpy.random  # noqa: F401  imported here, before worker processes fork, not lazily in each

from scheduler.engine import rule_classes, rule_placement
from scheduler.engine.domains import DomainCounts
from scheduler.engine.explanations import explain, explain_table
from scheduler.engine.rules import domain_misfit
from scheduler.engine.fewest import FewestTasks
from scheduler.engine.fill import Fill
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.pipeline import Pipeline
from scheduler.engine.fit import misfit
from scheduler.engine.taints import prefers_against
from scheduler.model import BINPACK, JobSpec, Node
from scheduler.engine.node_table import NodeTable
from scheduler.engine.packing import opening
from scheduler.model.placement_rules import Rules
from scheduler.model.reasons import Explanation
from scheduler.engine.scoring import Context, KeyFn, faulty_nodes, ranking
from scheduler.engine.topology import build, take

__all__ = ["Placement", "PlacementOptions", "Placer", "filter_pipeline", "nodes_to_find", "placement_shape"]

MIN_FEASIBLE_NODES = 100  # kube-scheduler's minFeasibleNodesToFind
MIN_FEASIBLE_PERCENTAGE = 5  # kube-scheduler's minFeasibleNodesPercentageToFind
CACHED_SPECS = 64  # static verdicts kept for this many distinct (constraints, plugins, preferences)
# Random tie-breaks are drawn anew for the first round after this many tasks were placed
# with them, and whenever the nodes are laid out anew: each round of a full batch has new
# ones, while a trickle's small rounds share them, so the order FewestTasks sorts by them
# lasts across those rounds instead of being sorted again for each.
NOISE_TASKS = 512
FEWEST_WALK_MAX = 8  # tasks in a group up to which candidates are walked to, not scanned for (FewestTasks)
SMALL_LIST = 64  # a list of fewer nodes than this (a pinned or nominated node) gets a table of its own


@dataclass
class PlacementOptions:
    faulty_threshold: int = 5  # failures of a job on a node (in the caller's window) that make it sort last; 0 = off
    percentage_of_nodes_to_score: int | None = None  # None: all nodes; 0: kube's adaptive default; 1..100
    seed: int | None = None  # seeds the random tie-break, so a run can be replayed; None = random
    vector_min_nodes: int | None = 512  # from this many nodes, narrow candidates with numpy; None = never

    def __post_init__(self) -> None:
        pct = self.percentage_of_nodes_to_score
        if pct is not None and not 0 <= pct <= 100:
            raise ValueError(f"percentage_of_nodes_to_score must be from 0 to 100, not {pct}.")


@dataclass
class Placement:
    assignments: list[tuple[str, str]]  # (task id, node name), in task order
    unplaced: list[str]  # task ids that fit nowhere
    explanation: Explanation | None  # why the unplaced ones did not fit; None if all were placed


def nodes_to_find(total: int, percentage: int | None) -> int:
    """How many fitting nodes a scan looks for (kube-scheduler's numFeasibleNodesToFind)."""
    if percentage is None or percentage >= 100 or total < MIN_FEASIBLE_NODES:
        return total
    if percentage == 0:
        percentage = max(50 - total // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(total * percentage // 100, MIN_FEASIBLE_NODES)



class Placer:
    """Places batches for one worker. Holds the seeded random generator, the rotating start
    index of sampled scans, and the cache of static filter verdicts across calls."""

    def __init__(self, options: PlacementOptions | None = None):
        self.options = options or PlacementOptions()
        self._random = random.Random(self.options.seed)
        self._np_random = np.random.default_rng(self.options.seed)
        self._table = NodeTable()
        self._pipelines: dict[int, Pipeline] = {}
        self._noise_for: Sequence[Node] | None = None
        self._noise_values = np.zeros(0)
        self._placed_with_noise = 0  # tasks placed since the tie-breaks were drawn
        self._members: tuple = (None, [])  # (group codes, rows of each group) for _fewest_tasks
        self._fewest = FewestTasks()
        self._codes_list: tuple = (None, [])  # (group codes, the same as a list) for _first_fewest
        self._next_start = 0
        self._stamp = 0  # bumped per call; a fact stamped this call belongs to a node in view
        # static key -> node name -> [node, static reason or None, preference path, stamp]
        self._facts: OrderedDict[tuple, dict[str, list]] = OrderedDict()
        # The nodes in view that have taints, when the caller keeps track (a worker's node
        # cache does); None: look at the nodes of each call.
        self.tainted: Sequence[Node] | None = None
        self._prefer_for: tuple = (None, {})  # (tainted list, tolerations -> prefers against)
        self.opening: frozenset[str] = frozenset()  # empty nodes opened for bin-packed tasks (open_for)

    def explain(self, nodes: Sequence[Node], job: JobSpec, job_counts: Mapping[str, int], rules: Rules | None = None,
                domains: DomainCounts | None = None) -> Explanation:
        return explain(nodes, job, job_counts, rules, domains)

    def replaced(self, names, changed=()) -> None:
        """The caller replaced these nodes' objects in the list it keeps passing, and
        changed those of ``changed`` in place: a list passed again is otherwise taken to
        hold the same objects, unchanged but by this placer's own placements."""
        self._table.replaced(names)
        self._table.changed(changed)
        if self._placed_with_noise >= NOISE_TASKS:
            self._noise_for = None  # new tie-breaks from the next call
            self._placed_with_noise = 0

    def open_for(self, nodes: Sequence[Node], demand: Mapping[str, int]) -> None:
        """The caller is about to place bin-packed tasks asking ``demand`` in all (a
        claim's): open the empty nodes they need beside the nodes in use
        (:func:`scheduler.engine.packing.opening`) for the next calls."""
        self.opening = frozenset()
        if demand:
            self._table.sync(nodes)
            self.opening = opening(self._table, demand)

    def place(self, nodes: Sequence[Node], job: JobSpec, task_ids: Sequence[str], *,
              job_counts: dict[str, int], faults: Mapping[str, int] | None = None,
              independent: bool = False, rules: Rules | None = None, domains: DomainCounts | None = None) -> Placement:
        """Place ``task_ids``, identical tasks of ``job``. ``independent``: each task is a
        job of its own, of ``job``'s shape (:func:`placement_shape`) with no task placed
        yet, so placing one does not count toward the next one's spread or max_per_node.
        ``rules`` and ``domains``: the job's domain rules as resolved for this placement
        and the tasks counted per domain (:mod:`scheduler.engine.rules`); a job with rules
        is placed by :mod:`scheduler.engine.rule_placement`."""
        tasks = list(task_ids)
        if not tasks:
            return Placement([], [], None)
        tainted = self.tainted if self.tainted is not None else [node for node in nodes if node.taints]
        pipeline = self._pipeline(job, bool(tainted))
        ctx = Context(job, faults or {}, self.options.faulty_threshold, self.opening)
        bad = faulty_nodes(ctx)
        if rules is not None or job.rules or (tainted and self._prefers_against(tainted, job)):
            return self._place_by_rules(nodes, job, tasks, pipeline, ctx, bad, job_counts, independent, rules,
                                        domains, bool(tainted))
        penalised = (lambda node: node.name in bad) if bad else None
        batch = Fill(job, job_counts, ranking(job).bind(ctx), counted=not independent)
        facts = self._facts_for(job, pipeline, bool(tainted))
        self._stamp += 1

        total = len(nodes)
        # A sampled scan looks for at least one fitting node per task; each can take one,
        # so a scan that stops early never leaves a task unplaced.
        wanted = max(nodes_to_find(total, self.options.percentage_of_nodes_to_score), len(tasks))
        limit: int | None = None
        order = nodes
        start = 0
        if wanted < total:  # sampled: start where the last sampled scan stopped
            limit = wanted
            start = self._next_start % total
            order = [*nodes[start:], *nodes[:start]]
        path_of = _path_getter(job)
        vector = limit is None and self.options.vector_min_nodes is not None and total >= self.options.vector_min_nodes
        if not vector and limit is None and not pipeline.static and not job.preferences:
            nowhere = self._nowhere(nodes, pipeline, job_counts)
            if nowhere is not None:
                return Placement([], tasks, nowhere)
        if vector:
            leaves, counts = self._candidates(nodes, len(tasks), pipeline, batch, path_of, ctx)
        else:
            leaves, scanned = self._scan(order, limit, pipeline, facts, batch, path_of)
            if limit is not None:
                self._next_start = (start + scanned) % total
            counts = self._group_counts(nodes, job, facts, job_counts, path_of, complete=scanned == total)
        tree = build(leaves, counts, penalised, self._random.random, batch.settle)
        assignments: list[tuple[str, str]] = []
        while tree is not None and len(assignments) < len(tasks):
            batch.task_id = tasks[len(assignments)]
            node = take(tree, batch.pick, penalised)
            if node is None:
                break
            assignments.append((batch.task_id, node.name))

        table = self._table
        if vector or table._source is nodes:  # the table follows this list: its placed rows too
            rows = table.rows
            table.write_rows([rows[name] for name in {name for _, name in assignments}])
        if not vector and len(facts) > total + CACHED_SPECS and scanned == total:
            self._forget_removed(facts)
        self._placed_with_noise += len(assignments)
        unplaced = tasks[len(assignments):]
        explanation = None
        if unplaced:
            explanation = (explain_table(self._table, pipeline, job_counts, _static_key(job, _tainted(pipeline)))
                           if vector else pipeline.explain(nodes, job_counts))
        return Placement(assignments, unplaced, explanation)

    def undo(self, nodes: Mapping[str, Node], job: JobSpec, assignments: Sequence[tuple[str, str]],
             job_counts: dict[str, int] | None) -> None:
        """Take back ``assignments`` of :meth:`place` from the caller's copies of the nodes
        (a gang that was not placed whole leaves no room taken)."""
        for task_id, name in assignments:
            node = nodes[name]
            allocated = node.allocated
            for resource, amount in job.resources.items():
                allocated[resource] = allocated.get(resource, 0) - amount
            for port in job.ports:
                if node.ports.get(port) == task_id:
                    del node.ports[port]
            node.tasks -= 1
            if job_counts is not None and job_counts.get(name):
                job_counts[name] -= 1
                if not job_counts[name]:
                    del job_counts[name]
        table = self._table
        for name in {name for _, name in assignments}:
            row = getattr(table, "rows", {}).get(name)
            if row is not None:
                table.write(row)

    def _prefers_against(self, tainted: Sequence[Node], job: JobSpec) -> bool:
        """Whether a node in view has a PreferNoSchedule taint the job does not tolerate,
        remembered per list of tainted nodes and tolerations."""
        if self._prefer_for[0] is not tainted:
            self._prefer_for = (tainted, {})
        known = self._prefer_for[1]
        found = known.get(job.tolerations)
        if found is None:
            found = known[job.tolerations] = prefers_against(tainted, job.tolerations)
        return found

    def _place_by_rules(self, nodes: Sequence[Node], job: JobSpec, tasks: list[str], pipeline: Pipeline,
                        ctx: Context, bad: frozenset[str], job_counts: dict[str, int], independent: bool,
                        rules: Rules | None, domains: DomainCounts | None, tainted: bool) -> Placement:
        """:mod:`scheduler.engine.rule_placement` over the node table (of its own for a
        short list, such as a pinned or nominated node)."""
        own = len(nodes) < SMALL_LIST and nodes is not self._table._source
        table = NodeTable() if own else self._table
        table.sync(nodes)
        _, passing = table.static(_static_key(job, tainted), pipeline.static_check)
        noise = self._np_random.random(len(table.nodes)) if own else self._noise(len(table.nodes))
        counts = domains if domains is not None else DomainCounts()
        args = (table, np.flatnonzero(passing), job, tasks, job_counts, not independent, ctx, bad, rules, counts, noise)
        assignments = rule_classes.place(*args)  # by classes of alike nodes, where it can
        if assignments is None:
            assignments = rule_placement.place(*args)
        self._placed_with_noise += len(assignments)
        unplaced = tasks[len(assignments):]
        explanation = None
        if unplaced:  # the filters' counts from the table's columns, then each passing node's domain rules
            hard = rules if rules is not None and rules.hard else None
            explanation = explain_table(table, pipeline, job_counts, _static_key(job, tainted),
                                        (lambda node: domain_misfit(node, hard, counts)) if hard is not None else None)
        return Placement(assignments, unplaced, explanation)

    def eligible_domains(self, nodes: Sequence[Node], job: JobSpec, attribute: str) -> list[str]:
        """The values of ``attribute`` on the nodes that pass the job's constraints,
        platform and plugins (whatever their status or taints): a spread's eligible
        domains (kube's nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore)."""
        table = self._table
        table.sync(nodes)
        pipeline = self._pipeline(job, False)
        _, passing = table.static(_static_key(job, False), pipeline.static_check)
        return rule_placement.domain_values(table, attribute, passing)

    def _facts_for(self, job: JobSpec, pipeline: Pipeline, tainted: bool = True) -> dict[str, list]:
        """Static verdicts and preference paths, shared by every spec with the same static part."""
        key = _static_key(job, tainted)
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = {}
            if len(self._facts) > CACHED_SPECS:
                self._facts.popitem(last=False)
        else:
            self._facts.move_to_end(key)
        return facts

    def _nowhere(self, nodes: Sequence[Node], pipeline: Pipeline, job_counts: Mapping[str, int]) -> Explanation | None:
        """For a whole scan of the common case (every node eligible, one group): the
        explanation when not one node can take one task, else None (looking stops at the
        first node that can), without ranking every node and settling the heap. The random
        tie-breaks the scan would have drawn are drawn, so what follows is placed as it
        would have been."""
        job = pipeline.job
        needs, ports, max_per_node, priority, job_id, count = (job.resources, job.ports, job.max_per_node,
                                                               job.priority, job.id, job_counts.get)
        for node in nodes:
            if misfit(node, needs, ports, max_per_node, count(node.name, 0), priority, job_id) is None:
                return None
        # One random() per node, as _scan's tight case draws: each takes two 32-bit words of
        # the generator, so 64 bits a node move it on exactly as far, in one call.
        self._random.getrandbits(64 * len(nodes))
        return pipeline.explain(nodes, job_counts)

    def _scan(self, order: Sequence[Node], limit: int | None, pipeline: Pipeline,
              facts: dict[str, list], batch: Fill, path_of) -> tuple[dict[tuple, list], int]:
        """Leaf entries of the eligible nodes in ``order``, by preference path, and how many
        nodes were scanned. With a ``limit`` (a sampled scan) fit is checked here and
        the scan stops after ``limit`` nodes that fit; without, fit is left to the heaps."""
        job, stamp = pipeline.job, self._stamp
        count, key, rnd = batch.job_counts.get, batch.key, self._random.random
        if limit is None and not pipeline.static and not job.preferences:
            # The common case, kept tight: every node is eligible and there is one group.
            return {(): [(key(node, count(node.name, 0)), rnd(), index, node)
                         for index, node in enumerate(order)]}, len(order)
        static_check = pipeline.static_check
        needs, ports, max_per_node = job.resources, job.ports, job.max_per_node
        leaves: dict[tuple, list] = {}
        found = 0
        for index in range(len(order)):
            node = order[index]
            name = node.name
            fact = facts.get(name)
            if fact is None or fact[0] is not node:  # new node, or a new description of it
                fact = facts[name] = [node, static_check(node), path_of(node), stamp]
            else:
                fact[3] = stamp
            if fact[1] is not None:
                continue
            on_node = count(name, 0)
            if limit is not None:
                if misfit(node, needs, ports, max_per_node, on_node, job.priority, job.id) is not None:
                    continue
                found += 1
            entry = (key(node, on_node), rnd(), index, node)
            bucket = leaves.get(fact[2])
            if bucket is None:
                leaves[fact[2]] = [entry]
            else:
                bucket.append(entry)
            if found == limit:
                return leaves, index + 1
        return leaves, len(order)

    def _noise(self, size: int) -> np.ndarray:
        """Random tie-breaks per node, drawn anew for each list of nodes and for the
        first round after ``NOISE_TASKS`` placements with them (:meth:`replaced`)."""
        if self._noise_for is not self._table._source or self._noise_values.size != size:
            self._noise_for = self._table._source
            self._noise_values = self._np_random.random(size)
        return self._noise_values

    def _pipeline(self, job: JobSpec, tainted: bool = True) -> Pipeline:
        """The job's filter chain, kept while the same spec object comes back (workers keep
        one object per job and version): building it is per-task work done once. Without
        ``tainted`` (no node in view has a taint) it leaves the taint filter out."""
        key = (id(job), tainted)
        cached = self._pipelines.get(key)
        if cached is None or cached.job is not job:
            if len(self._pipelines) > CACHED_SPECS:
                self._pipelines.clear()
            cached = self._pipelines[key] = filter_pipeline(job, tainted)
        return cached

    def _candidates(self, nodes: Sequence[Node], wanted: int, pipeline: Pipeline, batch: Fill, path_of,
                    ctx: Context) -> tuple[dict[tuple, list], dict[tuple, int]]:
        """Leaf entries from the node table: per preference group, the ``wanted`` best nodes
        that fit (or all that fit); and the job's task counts per path prefix."""
        job, table = pipeline.job, self._table
        table.sync(nodes)
        count, key, rnd = batch.job_counts.get, batch.key, self._random.random
        needs, ports, max_per_node = job.resources, job.ports, job.max_per_node
        # Rows come from the room mask (usable, a free task slot, room in every resource):
        # without host ports, max_per_node or nominations on the node, misfit could only agree.
        decided = not ports and not max_per_node
        by_tasks = decided and not table._nominated and self._ranks_by_tasks_alone(batch, ctx)
        if by_tasks and wanted <= FEWEST_WALK_MAX:
            fewest = self._first_fewest(pipeline, wanted, batch, path_of)
            if fewest is not None:
                return fewest, {}
        mask = table.room(job.resources)
        if pipeline.static:
            mask &= table.static(_static_key(job, _tainted(pipeline)), pipeline.static_check)[1]
        if by_tasks:
            return self._fewest_tasks(mask, wanted, path_of, batch), {}
        rows = np.flatnonzero(mask)
        if batch.job_counts:
            job_on_all = np.zeros(len(table.nodes), dtype=np.int64)
            for name, on_node in batch.job_counts.items():
                row = table.rows.get(name)
                if row is not None:
                    job_on_all[row] = on_node
            job_on = job_on_all[rows]
        else:
            job_on = np.zeros(rows.size, dtype=np.int64)
        columns = ranking(job).columns(ctx, table, rows, job_on)
        noise = self._noise(len(table.nodes))[rows]
        composite = _fold(columns, noise)
        depth = len(job.preferences)
        groups: list[tuple[tuple, np.ndarray | None]]
        if depth:  # positions (into rows) of each preference group, groups in code order
            codes, paths = table.groups(tuple(p.spread for p in job.preferences), path_of)
            group_of = codes[rows]
            groups = [(paths[code], np.flatnonzero(group_of == code))
                      for code in np.flatnonzero(np.bincount(group_of)).tolist()] if rows.size else []
        else:
            groups = [((), None)]  # every row

        def fitting(segment: np.ndarray) -> list:
            """Leaf entries for the first ``wanted`` nodes of ``segment`` that fit now."""
            entries = []
            for row in segment.tolist():
                node = table.nodes[row]
                on_node = count(node.name, 0)
                if (decided and not node.nominations) or misfit(node, needs, ports, max_per_node, on_node,
                                                                job.priority, job.id) is None:
                    entries.append((key(node, on_node), rnd(), row, node))
                    if len(entries) == wanted:
                        break
            return entries

        leaves: dict[tuple, list] = {}
        for path, positions in groups:
            # The best few of the group (a few more than needed: some may not fit), then,
            # only if they do not hold enough that fit, all of them in order.
            order = _ordered(positions, columns, noise, composite, 2 * wanted + 16)
            entries = fitting(rows[order])
            if len(entries) < wanted and order.size < (rows.size if positions is None else positions.size):
                entries = fitting(rows[_ordered(positions, columns, noise, composite)])
            if entries:
                leaves[path] = entries
        counts: dict[tuple, int] = {}
        if depth:
            for name, on_node in batch.job_counts.items():
                row = table.rows.get(name)
                if row is None or on_node <= 0:
                    continue
                path = paths[codes[row]]
                for length in range(1, depth + 1):
                    counts[path[:length]] = counts.get(path[:length], 0) + on_node
        return leaves, counts

    @staticmethod
    def _ranks_by_tasks_alone(batch: Fill, ctx: Context) -> bool:
        """Whether the ranking comes down to the fewest tasks on the node: spread, no task
        of the job placed yet (or the tasks are independent), no recent failures."""
        return not batch.job_counts and not ctx.faults and batch.job.strategy != BINPACK

    def _first_fewest(self, pipeline: Pipeline, wanted: int, batch: Fill, path_of) -> dict[tuple, list] | None:
        """:meth:`_fewest_tasks` from the rows kept in order of task count
        (:class:`FewestTasks`): a few rows looked at instead of passes over all; None when
        the nodes that qualify are too rare for that (the caller scans)."""
        table, job = self._table, pipeline.job
        passing = table.static(_static_key(job, _tainted(pipeline)), pipeline.static_check)[1] \
            if pipeline.static else None
        nodes, needs, priority, job_id = table.nodes, job.resources, job.priority, job.id

        def qualifies(row: int) -> bool:
            return (passing is None or bool(passing[row])) and misfit(nodes[row], needs, (), 0, 0, priority,
                                                                       job_id) is None

        codes, paths = None, [()]
        if job.preferences:
            array, paths = table.groups(tuple(p.spread for p in job.preferences), path_of)
            if self._codes_list[0] is not array:
                self._codes_list = (array, array.tolist())
            codes = self._codes_list[1]
        best = self._fewest.best(table, self._noise(len(nodes)), wanted, qualifies, codes, len(paths))
        if best is None:
            return None
        key, rnd = batch.key, self._random.random
        return {paths[g]: [(key(nodes[row], 0), rnd(), row, nodes[row]) for row in rows]
                for g, rows in best.items() if rows}

    def _fewest_tasks(self, mask: np.ndarray, wanted: int, path_of, batch: Fill) -> dict[tuple, list]:
        """:meth:`_candidates` where the ranking comes down to the fewest tasks on the node
        (spread, no task of the job placed yet, no faulty node) and every row of ``mask``
        fits (no host ports, max_per_node or nominations): per preference group, the
        ``wanted`` rows of ``mask`` with the fewest tasks, ties broken by the same noise.
        The same leaves, without building the ranking's columns over every node (most of
        the cost of placing one task of a one-task job)."""
        table, job = self._table, batch.job
        keys = np.where(mask, table.tasks + self._noise(len(table.nodes)), np.inf)
        if job.preferences:
            codes, paths = table.groups(tuple(p.spread for p in job.preferences), path_of)
            if self._members[0] is not codes:
                self._members = (codes, [np.flatnonzero(codes == code) for code in range(len(paths))])
            groups = [(paths[code], members) for code, members in enumerate(self._members[1])]
        else:
            groups = [((), None)]
        key, rnd, nodes = batch.key, self._random.random, table.nodes
        leaves: dict[tuple, list] = {}
        for path, members in groups:
            group_keys = keys if members is None else keys[members]
            if not group_keys.size:
                continue
            if wanted == 1:
                best = np.argmin(group_keys).reshape(1)
            elif group_keys.size > wanted:
                part = np.argpartition(group_keys, wanted - 1)[:wanted]
                best = part[np.argsort(group_keys[part], kind="stable")]
            else:
                best = np.argsort(group_keys, kind="stable")
            best = best[np.isfinite(group_keys[best])]  # rows without room sort last: a tail
            # The rows' entries in one pass over plain ints (numpy scalars cost more each).
            entries = [(key(nodes[row], 0), rnd(), row, nodes[row])
                       for row in (best if members is None else members[best]).tolist()]
            if entries:
                leaves[path] = entries
        return leaves

    def _group_counts(self, nodes: Sequence[Node], job: JobSpec, facts: dict[str, list],
                      job_counts: Mapping[str, int], path_of, complete: bool) -> dict[tuple, int]:
        """Tasks of the job under every preference path prefix, over all nodes in view."""
        depth = len(job.preferences)
        if not depth:
            return {}
        by_path: dict[tuple, int] = {}
        by_name = None
        for name, on_node in job_counts.items():
            if on_node <= 0:
                continue
            fact = facts.get(name)
            if fact is not None and fact[3] == self._stamp:
                path = fact[2]
            elif complete:
                continue  # every node in view was scanned: this one was removed
            else:  # a sampled scan did not reach it this time
                if by_name is None:
                    by_name = {node.name: node for node in nodes}
                node = by_name.get(name)
                if node is None:
                    continue
                path = path_of(node)
            by_path[path] = by_path.get(path, 0) + on_node
        counts: dict[tuple, int] = {}
        for path, on_nodes in by_path.items():
            for length in range(1, depth + 1):
                prefix = path[:length]
                counts[prefix] = counts.get(prefix, 0) + on_nodes
        return counts

    def _forget_removed(self, facts: dict[str, list]) -> None:
        for name in [name for name, fact in facts.items() if fact[3] != self._stamp]:
            del facts[name]


def _fold(columns, noise: np.ndarray) -> np.ndarray | None:
    """The ranking's tiers folded into one number per row, ties broken by ``noise``: each
    tier a whole number below 2^16 after shifting, so one sort key orders rows exactly as
    the tiers and the noise would (a tier equal on every row orders nothing and is left
    out). None when they do not fold (fractions, ranges, more than three tiers)."""
    if columns.fractional or not noise.size:
        return None
    composite, tiers = None, 0
    for column in columns.items:
        low, high = column.min(), column.max()
        if high == low:
            continue
        tiers += 1
        if high - low >= 2**16 or tiers > 3:
            return None  # beyond 48 bits the noise would not survive
        shifted = column - low
        composite = shifted if composite is None else composite * 2**16 + shifted
    return noise.copy() if composite is None else composite + noise


def _ordered(positions: np.ndarray | None, columns, noise: np.ndarray, composite: np.ndarray | None,
             best: int | None = None) -> np.ndarray:
    """``positions`` (indices into the columns; None for all of them) in key order; with
    ``best``, only the first ``best`` of them when there are many more (partitioned, not
    sorted whole)."""
    if composite is None:
        if positions is None:
            return np.lexsort([noise, *reversed(columns.items)])
        return positions[np.lexsort([noise[positions], *(column[positions] for column in reversed(columns.items))])]
    keys = composite if positions is None else composite[positions]
    if best is not None and keys.size > 2 * best + 32:
        part = np.argpartition(keys, best)[:best]
        order = part[np.argsort(keys[part], kind="stable")]
    else:
        order = np.argsort(keys, kind="stable")
    return order if positions is None else positions[order]


def placement_shape(job: JobSpec) -> tuple:
    """Everything placement reads from a spec but the job's name: one-task jobs of one
    shape, none of them placed yet, can be placed as one batch (kube-scheduler's
    equivalence classes; SwarmKit batches only tasks of one service)."""
    return (job.priority, tuple(job.resources.items()), _static_key(job), job.ports, job.strategy, job.max_per_node)


def _static_key(job: JobSpec, tainted: bool = True) -> tuple:
    """What static filter verdicts and preference paths depend on (with ``tainted``, the
    taint filter's verdicts: the job's tolerations)."""
    return (tuple(c.text for c in job.constraints), job.plugins, tuple(p.spread for p in job.preferences),
            job.tolerations if tainted else None)


def _tainted(pipeline: Pipeline) -> bool:
    """Whether the pipeline holds the taint filter (the last static one when it does)."""
    return bool(pipeline.static) and pipeline.static[-1].name == "taints"


def _path_getter(job: JobSpec):
    """A node's values for the job's preferences: its path in the tree of groups."""
    getters = [p.get for p in job.preferences]
    if not getters:
        return lambda node: ()
    if len(getters) == 1:
        (get,) = getters
        return lambda node: (get(node),)
    return lambda node: tuple([get(node) for get in getters])

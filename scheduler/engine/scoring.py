"""Scoring: of the nodes that fit, which should take the next task of this job.

A ranking is a chain of named scorers with weights. Scores are "higher is better", as in
kube-scheduler. Scorers are grouped in tiers compared in order, and within a tier their
weighted scores are summed: SwarmKit's comparator is lexicographic (tasks of the job
first, total tasks only to break ties), and a weighted sum cannot promise that without
weights that depend on the counts.

Every score depends on the node alone. Resource scores are normalised to
0..MAX_NODE_SCORE against the node's own capacity, as kube's NodeResourcesFit does; count
scores are the negated count, because normalising them against the maximum over all
nodes (kube's DefaultNormalizeScore) would change every node's score whenever one node
is placed on, and the batch heaps rely on a placement re-scoring only the chosen node.

Binpack (``BinPack``) sends a task to a node in use or opened for its claim
(:mod:`scheduler.engine.packing`) before any other, and among those to the one whose free
room its request matches best, the fuller first.

Ties left after every tier are broken at random (see :mod:`scheduler.placement`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import sqrt
from typing import Callable, Mapping

import numpy as np
from mypy_extensions import mypyc_attr

from scheduler.model import BINPACK, JobSpec, Node

MAX_NODE_SCORE = 100
# Binpack's match (0..1) in whole steps: fine enough to tell 0.1 % of a node's fullness,
# and, with the in-use bonus above it, below 2^16, so that its column folds into one sort
# key (placement._fold) instead of a slower lexsort.
BINPACK_STEPS = 32_000
# How much fullness counts beside alignment in the binpack score (alignment counts 1):
# enough to prefer the fuller of two nodes that match a request about as well, little
# enough that a node whose free room matches the request wins over a fuller one that does
# not (measured against the exact optimum with scripts/packing_quality.py).
FULLNESS_WEIGHT = 0.05

ScoreFn = Callable[[Node, int], float]  # (node, tasks of this job on it) -> score
KeyFn = Callable[[Node, int], tuple]  # (node, tasks of this job on it) -> sort key, lower is better


@dataclass(frozen=True, slots=True)
class Context:
    """What scorers may read besides the node: set once per batch."""

    job: JobSpec
    faults: Mapping[str, int] = field(default_factory=dict)
    faulty_threshold: int = 5
    opening: frozenset[str] = frozenset()  # empty nodes opened for the claim's bin-packed tasks


_NONE: frozenset[str] = frozenset()


def faulty_nodes(ctx: Context) -> frozenset[str]:
    """Nodes where this job failed ``faulty_threshold`` times recently (SwarmKit's faulty nodes)."""
    limit = ctx.faulty_threshold
    if limit <= 0 or not ctx.faults:
        return _NONE
    return frozenset(name for name, failures in ctx.faults.items() if failures >= limit)


@mypyc_attr(allow_interpreted_subclasses=True)  # an extension point, compiled or not
class Scorer:
    """``bind`` returns the per-node score function for a batch, or None to sit this job out.
    ``vector`` scores many nodes at once from a :class:`~scheduler.node_table.NodeTable`
    (rows, and the job's tasks on each), the same numbers ``bind``'s function gives."""

    name = ""
    whole = True  # scores are whole numbers (lets columns fold into one sort key)

    def bind(self, ctx: Context) -> ScoreFn | None:
        raise NotImplementedError

    def vector(self, ctx: Context, table, rows: np.ndarray, job_on: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class FaultyNode(Scorer):
    """A node where this job keeps failing sorts after every healthy one."""

    name = "faulty_node"

    def bind(self, ctx):
        bad = faulty_nodes(ctx)
        if not bad:
            return None
        return lambda node, job_on_node: 0 if node.name in bad else MAX_NODE_SCORE

    def vector(self, ctx, table, rows, job_on):
        scores = np.full(len(table.nodes), MAX_NODE_SCORE, dtype=np.float64)
        scores[[table.rows[name] for name in faulty_nodes(ctx) if name in table.rows]] = 0
        return scores[rows]


class JobSpread(Scorer):
    """Fewest tasks of this job on the node (SwarmKit's spread)."""

    name = "job_spread"

    def bind(self, ctx):
        return lambda node, job_on_node: -job_on_node

    def vector(self, ctx, table, rows, job_on):
        return -job_on.astype(np.float64)


class LeastTasks(Scorer):
    """Fewest tasks in total on the node (SwarmKit's tie-break)."""

    name = "least_tasks"

    def bind(self, ctx):
        return lambda node, job_on_node: -node.tasks

    def vector(self, ctx, table, rows, job_on):
        return -table.tasks[rows].astype(np.float64)


class BinPack(Scorer):
    """A node in use, or opened for the claim's bin-packed tasks (``Context.opening``),
    before any other: binpack opens another node only when none of those fits. Then how
    well the task's request matches the node's free room, and how full it leaves it.

    The match, with request ``d`` and free room ``f`` as fractions of the node's capacity:
    the cosine of the angle between ``d`` and ``f`` over the resources the task asks for
    (Tetris's alignment, Grandl et al., SIGCOMM 2014, normalised so that a large node
    does not win for its size), plus ``FULLNESS_WEIGHT`` times the mean fraction used
    after placement over the resources the node has (kube's MostAllocated), over
    ``1 + FULLNESS_WEIGHT``, in whole ``BINPACK_STEPS``. A cpu-heavy task goes where cpu is what
    is left, so that a node fills in every resource at once instead of in one, stranding
    the others; of two nodes it matches alike (a task asking for one resource matches
    every node alike), the fuller one. One whole number: ``in use * (BINPACK_STEPS + 1)
    + match``. A job that asks for no resources fills nothing: fullness alone, nodes in
    use or not.
    """

    name = "binpack"

    def bind(self, ctx):
        needs: dict[str, int] = ctx.job.resources
        opening: frozenset[str] = ctx.opening
        asks = _asks(ctx.job)
        scale = BINPACK_STEPS / (1 + FULLNESS_WEIGHT)

        def score(node: Node, job_on_node: int) -> float:
            capacity: dict[str, int] = node.capacity
            allocated: dict[str, int] = node.allocated
            dot = dd = ff = used = 0.0
            count = 0
            # Summed in the columns' order (sorted), so that both paths give the same bits;
            # two terms sum alike in any order.
            for resource in (capacity if len(capacity) <= 2 else sorted(capacity)):
                cap = capacity[resource]
                if cap <= 0:
                    continue
                need = needs.get(resource, 0)
                d: float = need / cap
                a: float = allocated.get(resource, 0) / cap
                after = a + d
                used += 0.0 if after < 0.0 else 1.0 if after > 1.0 else after
                count += 1
                if need > 0:
                    f = 1.0 - a
                    f = 0.0 if f < 0.0 else 1.0 if f > 1.0 else f
                    dot += d * f
                    dd += d * d
                    ff += f * f
            cosine = dot / sqrt(dd * ff) if dd > 0.0 and ff > 0.0 else 0.0
            match = round((cosine + FULLNESS_WEIGHT * (used / count if count else 0.0)) * scale)
            if asks and (node.tasks > 0 or node.name in opening):
                return float(match + BINPACK_STEPS + 1)
            return float(match)

        return score

    def vector(self, ctx, table, rows, job_on):
        needs = ctx.job.resources
        dot, dd, ff, used = (np.zeros(rows.size) for _ in range(4))
        count: np.ndarray | float = 0.0
        for resource in sorted(table.capacity):
            cap = table.capacity[resource][rows].astype(np.float64)
            has = cap > 0
            every = bool(has.all())
            if not every:  # a node without the resource divides by infinity: fractions of 0, as if skipped
                cap[~has] = np.inf
            count = count + (1.0 if every else has)
            need = needs.get(resource, 0)
            a = table.allocated[resource][rows] / cap
            d = need / cap
            after = a + d
            used += np.clip(after, 0.0, 1.0, out=after)
            if need > 0:
                f = np.clip(np.subtract(1.0, a, out=a), 0.0, 1.0, out=a)
                if not every:
                    f *= has
                dot += d * f
                dd += d * d
                ff += f * f
        norms = np.sqrt(dd * ff)
        cosine = np.divide(dot, norms, out=np.zeros(rows.size), where=norms > 0)
        fullness = np.divide(used, count, out=np.zeros(rows.size), where=np.asarray(count) > 0)
        match = np.rint((cosine + FULLNESS_WEIGHT * fullness) * (BINPACK_STEPS / (1 + FULLNESS_WEIGHT)))
        if _asks(ctx.job):
            in_use = table.tasks > 0
            for name in ctx.opening:
                row = table.rows.get(name)
                if row is not None:
                    in_use[row] = True
            match += in_use[rows] * float(BINPACK_STEPS + 1)
        return match


def _asks(job: JobSpec) -> bool:
    """Whether the job asks for some resource."""
    return any(amount > 0 for amount in job.resources.values())


Tier = tuple[tuple[Scorer, float], ...]


class Columns:
    """Key columns, primary first (``items``); ``fractional`` when some tier is not whole numbers."""

    def __init__(self) -> None:
        self.items: list[np.ndarray] = []
        self.fractional = False


@dataclass(frozen=True)
class Ranking:
    """Tiers of (scorer, weight), compared in order; weighted sums within a tier."""

    tiers: tuple[Tier, ...]

    def names(self) -> list[list[str]]:
        return [[scorer.name for scorer, _ in tier] for tier in self.tiers]

    def columns(self, ctx: Context, table, rows: np.ndarray, job_on: np.ndarray) -> Columns:
        """The same key as :meth:`bind`, as one column per tier (primary first), for the
        nodes at ``rows`` of a node table: what ``np.lexsort`` needs."""
        columns = Columns()
        for tier in self.tiers:
            parts = [(scorer, weight) for scorer, weight in tier if scorer.bind(ctx) is not None]
            if len(parts) == 1 and parts[0][1] == 1:
                columns.items.append(-parts[0][0].vector(ctx, table, rows, job_on))
                columns.fractional |= not parts[0][0].whole
            elif parts:
                columns.items.append(-sum(weight * scorer.vector(ctx, table, rows, job_on) for scorer, weight in parts))  # type: ignore[arg-type]
                columns.fractional |= any(not scorer.whole or weight != int(weight) for scorer, weight in parts)
        return columns

    def bind(self, ctx: Context) -> KeyFn:
        """The sort key for this batch: a tuple of negated tier scores, lower is better."""
        if self is _SPREAD and not faulty_nodes(ctx):
            # The usual key, written out (the same values): tasks of the job, then tasks.
            return _spread_key
        tiers = []
        for tier in self.tiers:
            parts = [(fn, weight) for scorer, weight in tier if (fn := scorer.bind(ctx)) is not None]
            if parts:
                tiers.append(_weighted(parts))
        return _key(tiers)


def ranking(job: JobSpec) -> Ranking:
    """The scorer chain for a job's strategy (scorers hold no state: one chain per strategy)."""
    return _BINPACK if job.strategy == BINPACK else _SPREAD


_FAULTY = ((FaultyNode(), 1),)  # first: a faulty node loses to any healthy one
_SPREAD = Ranking((_FAULTY, ((JobSpread(), 1),), ((LeastTasks(), 1),)))
# Nodes in use (or opened for the claim) first, then the best match of request and free
# room; among equal ones (a job asking for nothing) fall back to spreading, so such a job
# does not pile onto one node.
_BINPACK = Ranking((_FAULTY, ((BinPack(), 1),), ((JobSpread(), 1),), ((LeastTasks(), 1),)))


def _spread_key(node: Node, job_on_node: int) -> tuple:
    return (job_on_node, node.tasks)


def _weighted(parts: list[tuple[ScoreFn, float]]) -> ScoreFn:
    if len(parts) == 1:
        fn, weight = parts[0]
        return fn if weight == 1 else (lambda node, n: weight * fn(node, n))
    return lambda node, n: sum(weight * fn(node, n) for fn, weight in parts)


def _key(tiers: list[ScoreFn]) -> KeyFn:
    # Written out for the usual lengths: this runs once per node per batch.
    if len(tiers) == 1:
        (a,) = tiers
        return lambda node, n: (-a(node, n),)
    if len(tiers) == 2:
        a, b = tiers
        return lambda node, n: (-a(node, n), -b(node, n))
    if len(tiers) == 3:
        a, b, c = tiers
        return lambda node, n: (-a(node, n), -b(node, n), -c(node, n))
    if len(tiers) == 4:
        a, b, c, d = tiers
        return lambda node, n: (-a(node, n), -b(node, n), -c(node, n), -d(node, n))
    return lambda node, n: tuple(-fn(node, n) for fn in tiers)

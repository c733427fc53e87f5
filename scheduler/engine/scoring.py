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

Ties left after every tier are broken at random (see :mod:`scheduler.placement`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from mypy_extensions import mypyc_attr

from scheduler.model import BINPACK, JobSpec, Node
from scheduler.model.quantities import CPU, MEMORY

MAX_NODE_SCORE = 100

ScoreFn = Callable[[Node, int], float]  # (node, tasks of this job on it) -> score
KeyFn = Callable[[Node, int], tuple]  # (node, tasks of this job on it) -> sort key, lower is better


@dataclass(frozen=True, slots=True)
class Context:
    """What scorers may read besides the node: set once per batch."""

    job: JobSpec
    faults: Mapping[str, int] = field(default_factory=dict)
    faulty_threshold: int = 5


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
    """The node left fullest after placing the task, over cpu and memory (Nomad's ScoreFit).

    ``20 - (10^free_cpu + 10^free_memory)`` with free fractions after placement, scaled
    to 0..MAX_NODE_SCORE: an exactly full node scores 100, an empty one 0, and a node
    full in one dimension but idle in the other scores below one half-full in both.
    """

    name = "binpack"
    whole = False

    def bind(self, ctx):
        cpu = ctx.job.resources.get(CPU, 0)
        memory = ctx.job.resources.get(MEMORY, 0)
        scale = MAX_NODE_SCORE / 18

        def score(node, job_on_node):
            capacity, allocated = node.capacity, node.allocated
            cores, ram = capacity.get(CPU, 0), capacity.get(MEMORY, 0)
            free_cpu = 1 - (allocated.get(CPU, 0) + cpu) / cores if cores > 0 else 0.0
            free_memory = 1 - (allocated.get(MEMORY, 0) + memory) / ram if ram > 0 else 0.0
            # clamped to 0..1: a node that would be overfull scores as full (it fails the fit check anyway)
            free_cpu = 0.0 if free_cpu < 0 else 1.0 if free_cpu > 1 else free_cpu
            free_memory = 0.0 if free_memory < 0 else 1.0 if free_memory > 1 else free_memory
            return (20 - 10 ** free_cpu - 10 ** free_memory) * scale

        return score

    def vector(self, ctx, table, rows, job_on):
        free = []
        for resource in (CPU, MEMORY):
            if resource not in table.capacity:
                free.append(np.zeros(rows.size))
                continue
            capacity = table.capacity[resource][rows].astype(np.float64)
            used = table.allocated[resource][rows] + ctx.job.resources.get(resource, 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                fraction = np.where(capacity > 0, 1 - used / capacity, 0.0)
            free.append(np.clip(fraction, 0.0, 1.0))
        return (20 - np.power(10.0, free[0]) - np.power(10.0, free[1])) * (MAX_NODE_SCORE / 18)


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
# Fill the fullest node; among equally full ones (a job asking no cpu or memory) fall
# back to spreading, so such a job does not pile onto one node.
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
    return lambda node, n: tuple(-fn(node, n) for fn in tiers)

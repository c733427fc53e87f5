"""Why tasks do not fit: what the filters, and the domain rules, say about one more task
of a job, counted over the nodes (``0/12 nodes available: 7 insufficient cpu, ...``),
asked node by node or answered from the node table's columns; and what a gang that
waits whole says. The placer gives its unplaced tasks these explanations; ``sched job
plan`` and the dashboard ask them of the nodes as they are."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping, Sequence

import numpy as np

from scheduler.engine.domains import DomainCounts
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.fit import misfit
from scheduler.engine.node_table import NodeTable
from scheduler.engine.pipeline import Pipeline
from scheduler.engine.rules import domain_misfit
from scheduler.model import JobSpec, Node, reasons
from scheduler.model.placement_rules import Rules
from scheduler.model.reasons import Explanation


def explain(nodes: Sequence[Node], job: JobSpec, job_counts: Mapping[str, int], rules: Rules | None = None,
            domains: DomainCounts | None = None) -> Explanation:
    """What the filters, and the domain rules if given, say over ``nodes`` about one more
    task of ``job`` (a dry run)."""
    pipeline = filter_pipeline(job)
    if rules is None or not rules.hard:
        return pipeline.explain(nodes, job_counts)
    return explain_rules(pipeline, nodes, job_counts, rules, domains or DomainCounts())


def explain_rules(pipeline: Pipeline, nodes: Sequence[Node], job_counts: Mapping[str, int], rules: Rules,
                  domains: DomainCounts) -> Explanation:
    """``pipeline.explain``, a node that passes it counted under the domain rule it fails."""
    result = Explanation()
    count = job_counts.get
    for node in nodes:
        result.nodes_evaluated += 1
        reason = pipeline.check(node, count(node.name, 0))
        if reason is None:
            reason = domain_misfit(node, rules, domains)
        if reason is None:
            result.available += 1
        else:
            result.add(reason)
    return result


def explain_table(table: NodeTable, pipeline: Pipeline, job_counts: Mapping[str, int],
                  static_key: tuple, then: Callable[[Node], str | None] | None = None) -> Explanation:
    """``pipeline.explain`` over the node table: the same counts, with the resource, static
    and slot filters answered from columns and the verdicts cached under ``static_key``;
    nodes that are not usable or hold nominations are asked one by one. ``then``: asked
    of each node the pipeline passes (the domain rules: :func:`explain_rules`' counts)."""
    job = pipeline.job
    result = Explanation(nodes_evaluated=len(table.nodes))

    def passed(node: Node) -> None:
        reason = then(node) if then is not None else None
        if reason is None:
            result.available += 1
        else:
            result.add(reason)

    one_by_one = np.flatnonzero(~table.usable).tolist() + table.nominated().tolist()
    remaining = table.usable.copy()
    remaining[one_by_one] = False
    for resource, amount in job.resources.items():
        if amount <= 0:
            continue
        if resource in table.capacity:
            lacking = remaining & (table.capacity[resource] - table.allocated[resource] < amount)
        else:
            lacking = remaining.copy()
        if lacking.any():
            result.add(reasons.insufficient(resource), int(lacking.sum()))
            remaining &= ~lacking
    if pipeline.static:
        verdicts, passing = table.static(static_key, pipeline.static_check)
        for reason in verdicts[remaining & ~passing].tolist():
            result.add(reason)
        remaining &= passing
    if table.limited:  # a node whose agent's slots are all in use, by its number of slots
        full = remaining & ~table.slots_free()
        if full.any():
            for slots, count in Counter(table.slots[full].tolist()).items():
                result.add(reasons.slots_full(slots), count)
            remaining &= ~full
    if job.ports or job.max_per_node:
        count = job_counts.get
        for row in np.flatnonzero(remaining).tolist():
            node = table.nodes[row]
            reason = misfit(node, {}, job.ports, job.max_per_node, count(node.name, 0), job.priority, job.id)
            if reason is None:
                passed(node)
            else:
                result.add(reason)
    elif then is None:
        result.available += int(remaining.sum())
    else:
        for row in np.flatnonzero(remaining).tolist():
            passed(table.nodes[row])
    for row in sorted(set(one_by_one)):
        node = table.nodes[row]
        reason = pipeline.check(node, job_counts.get(node.name, 0))
        if reason is None:
            passed(node)
        else:
            result.add(reason)
    return result



def gang_waits_message(spec: JobSpec, need: int, why: str) -> str:
    """What every task of a gang that waits whole says (the worker and ``sched job plan``)."""
    size = f"gang of {spec.gang}" if spec.gang == spec.replicas else f"gang of {spec.replicas} (at least {spec.gang} at once)"
    return f"{size} {spec.id}: {need} tasks must be placed together and do not fit: {why}"

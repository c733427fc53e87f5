"""Committing placements: one call to ``lua/commit.lua`` for a whole batch.

The script re-checks each placement with the rule of :mod:`scheduler.fit` and applies
those that still hold; this module lays out its KEYS and ARGV and reads its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from scheduler.state.keys import Keys
from scheduler.model import JobSpec
from scheduler.state.scripts import Scripts
from scheduler.state.stream import events_argument


class Planned(NamedTuple):
    """One placement to commit (a tuple: a worker makes one per placement, and a frozen
    dataclass costs several times as much to build)."""

    task_id: str
    node: str
    job: JobSpec
    gang: bool = False  # all of the job's placements in this commit, or none of them


@dataclass
class CommitResult:
    now_ms: int
    accepted: list[Planned]
    refused: list[tuple[Planned, str]]  # with the reason (reasons.py wording)
    changes: dict[str, tuple[int, int]]  # node -> (change sequence this commit gave it, the one before)


def by_spec(plans: list[Planned]) -> list[list[Planned]]:
    """``plans`` grouped by job spec object, groups in order of first appearance: the
    order in which :func:`commit` sends them and commit.lua judges them."""
    groups: dict[tuple[int, bool], list[Planned]] = {}
    for plan in plans:
        groups.setdefault((id(plan.job), plan.gang), []).append(plan)
    return list(groups.values())


def commit(scripts: Scripts, keys: Keys, token: str, plans: list[Planned], events: str | None = None) -> CommitResult:
    """Commit ``plans`` in one script call. They are sent grouped by job spec (the spec's
    fields once per group, :func:`by_spec`) and nodes once each; the results come back in
    that order. A group of plans marked ``gang`` is committed whole or not at all, so a
    gang's plans must all be in one call. ``events``: the events argument
    (:func:`events_argument`; by default, the namespace's channel alone)."""
    groups = by_spec(plans)
    names: list[str] = []
    index: dict[str, int] = {}
    nodes: dict[str, int] = {}
    for plan in plans:
        if plan.node not in nodes:
            nodes[plan.node] = len(nodes) + 1
    for group in groups:
        for resource in group[0].job.resources:
            if resource not in index:
                names.append(resource)
                index[resource] = len(names)
    argv: list = [token, events or events_argument(keys), keys.namespace, len(names), *names, len(nodes), *nodes, len(groups)]
    node_keys: list[str] = []
    for name in nodes:
        node_keys += [keys.node(name), keys.node_tasks(name)]
    ordered: list[Planned] = []
    for group in groups:
        job = group[0].job
        argv += [job.id, job.max_per_node, job.priority, job.tenant, 1 if group[0].gang else 0, len(job.resources)]
        for resource, amount in job.resources.items():
            argv += [index[resource], amount]
        argv += [len(job.ports), *job.ports, len(group)]
        for plan in group:
            argv += [plan.task_id, nodes[plan.node]]
        ordered += group
    reply = scripts.commit(
        keys=[keys.inflight, keys.leases, keys.node_changes, keys.node_seq, keys.tally_priority,
              keys.node_deltas, keys.stream, keys.config, *node_keys,
              *(keys.tally_job(group[0].job.id) for group in groups),
              *(keys.task(plan.task_id) for plan in ordered), keys.usage, keys.quota],
        args=[*argv, scripts.now_arg()])
    now, results, changes = reply
    accepted, refused = [], []
    for plan, result in zip(ordered, results):
        if result == 1:
            accepted.append(plan)
        else:
            refused.append((plan, result))
    return CommitResult(now_ms=int(now), accepted=accepted, refused=refused,
                        changes={changes[i]: (int(changes[i + 1]), int(changes[i + 2]))
                                 for i in range(0, len(changes), 3)})

"""Committing placements: one call to ``lua/commit.lua`` for a whole batch.

The script re-checks each placement with the rule of :mod:`scheduler.fit` and applies
those that still hold; this module lays out its KEYS and ARGV and reads its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .keys import Keys
from .model import JobSpec
from .scripts import Scripts


@dataclass(frozen=True)
class Planned:
    task_id: str
    node: str
    job: JobSpec


@dataclass
class CommitResult:
    now_ms: int
    accepted: list[Planned]
    refused: list[tuple[Planned, str]]  # with the reason (reasons.py wording)
    changes: dict[str, tuple[int, int]]  # node -> (change sequence this commit gave it, the one before)


def commit(scripts: Scripts, keys: Keys, token: str, plans: list[Planned]) -> CommitResult:
    names: list[str] = []
    index: dict[str, int] = {}
    for plan in plans:
        for resource in plan.job.resources:
            if resource not in index:
                names.append(resource)
                index[resource] = len(names)
    argv: list = [token, keys.events, len(names), *names]
    task_keys: list[str] = []
    for plan in plans:
        job = plan.job
        requested = [(index[r], amount) for r, amount in job.resources.items()]
        argv += [plan.task_id, plan.node, job.id, job.max_per_node, job.priority, len(requested)]
        for pair in requested:
            argv += pair
        argv += [len(job.ports), *job.ports]
        task_keys += [keys.task(plan.task_id), keys.node(plan.node), keys.node_tasks(plan.node),
                      keys.tally_job(job.id)]
    reply = scripts.commit(
        keys=[keys.inflight, keys.leases, keys.tally_tasks, keys.node_changes, keys.node_seq, keys.tally_priority,
              *(keys.free(name) for name in names), *task_keys],
        args=argv)
    now, results, changes = reply
    accepted, refused = [], []
    for plan, result in zip(plans, results):
        if result == 1:
            accepted.append(plan)
        else:
            refused.append((plan, result))
    return CommitResult(now_ms=int(now), accepted=accepted, refused=refused,
                        changes={changes[i]: (int(changes[i + 1]), int(changes[i + 2]))
                                 for i in range(0, len(changes), 3)})

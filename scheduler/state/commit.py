"""Committing placements: one call to ``lua/commit.lua`` for a whole batch.

The script re-checks each placement with the rule of :mod:`scheduler.fit` and applies
those that still hold; this module lays out its KEYS and ARGV and reads its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from scheduler.state.keys import Keys
from scheduler.model import JobSpec
from scheduler.model.placement_rules import Rules
from scheduler.state.scripts import Scripts
from scheduler.state.stream import events_argument


class Planned(NamedTuple):
    """One placement to commit (a tuple: a worker makes one per placement, and a frozen
    dataclass costs several times as much to build)."""

    task_id: str
    node: str
    job: JobSpec
    gang: bool = False  # all of the job's placements in this commit, or none of them
    rules: Rules | None = None  # the job's domain rules as placing resolved them (scheduler.engine.rules)


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
    # Keys the groups' options name, after the task hashes: their index is known once
    # every placement is counted.
    extra: dict[str, int] = {}
    first_extra = 8 + 2 * len(nodes) + len(groups) + len(plans) + 1

    def key_index(key: str) -> int:
        if key not in extra:
            extra[key] = first_extra + len(extra)
        return extra[key]

    options = [_options(group[0].job, group[0].rules, keys, key_index) for group in groups]
    describe = any(group_options[0] and (group[0].job.counted or group[0].rules is not None)
                   for group, group_options in zip(groups, options))
    argv: list = [token, events or events_argument(keys), keys.namespace, len(names), *names, len(nodes), *nodes,
                  1 if describe else 0, len(groups)]
    node_keys: list[str] = []
    for name in nodes:
        node_keys += [keys.node(name), keys.node_tasks(name)]
    ordered: list[Planned] = []
    for group, group_options in zip(groups, options):
        job = group[0].job
        argv += [job.id, job.max_per_node, job.priority, job.tenant, 1 if group[0].gang else 0, *group_options,
                 len(job.resources)]
        for resource, amount in job.resources.items():
            argv += [index[resource], amount]
        argv += [len(job.ports), *job.ports, len(group)]
        for plan in group:
            argv += [plan.task_id, nodes[plan.node]]
        ordered += group
    limited = {group[0].job.id: group[0].job.parallelism for group in groups if group[0].job.parallelism}
    if limited:  # jobs with at most so many live tasks at once (none: nothing is sent)
        argv.append(len(limited))
        for job_id, limit in limited.items():
            argv += [job_id, limit]
    reply = scripts.commit(
        keys=[keys.inflight, keys.leases, keys.node_changes, keys.node_seq, keys.tally_priority,
              keys.node_deltas, keys.stream, keys.config, *node_keys,
              *(keys.tally_job(group[0].job.id) for group in groups),
              *(keys.task(plan.task_id) for plan in ordered), *extra, keys.usage, keys.quota],
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


_NO_OPTIONS = [0]


def _options(job: JobSpec, rules: Rules | None, keys: Keys, key_index) -> list:
    """A group's option list for commit.lua (``o``, then each option's name, count and
    values; see its header): the job's tolerations and its domain rules."""
    if rules is None and not job.counted and not job.tolerations:
        return _NO_OPTIONS
    options: list[tuple[str, list]] = []
    if job.tolerations:
        options.append(("tolerate", [x for t in job.tolerations
                                     for x in (t.key, t.operator, t.value, t.effect,
                                               "" if t.seconds is None else t.seconds)]))
    if job.counted:
        options.append(("count", [key_index(keys.tally_dom(job.id)), key_index(keys.cycle), key_index(keys.move_cycle)]))
    if rules is not None:
        if rules.gen is not None:
            options.append(("gen", [key_index(keys.rules_gen), rules.gen]))
        if rules.epoch is not None:
            options.append(("epoch", [key_index(keys.node_epoch), rules.epoch]))

        def doms(jobs) -> list:
            return [len(jobs), *(key_index(keys.tally_dom(other)) for other in jobs)]

        for spread in rules.spreads:
            if spread.hard:
                options.append(("spread", [spread.attribute, spread.max_skew, spread.min_domains,
                                           int(spread.self_matches), spread.missing, spread.skew,
                                           *doms(spread.jobs), *spread.domains]))
        for distinct in rules.distinct:
            options.append(("distinct", [distinct.attribute, distinct.limit, distinct.missing, distinct.reached,
                                         key_index(keys.tally_dom(rules.job))]))
        for affinity in rules.affinity:
            options.append(("affinity", [affinity.attribute, int(affinity.self_matches), affinity.reason,
                                         *doms(affinity.jobs)]))
        for anti in rules.anti:
            options.append(("anti", [anti.attribute, anti.reason, *doms(anti.jobs)]))
    out: list = [len(options)]
    for name, values in options:
        out += [name, len(values), *values]
    return out

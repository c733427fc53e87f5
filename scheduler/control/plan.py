"""``sched job plan``: where a job's tasks would go, without changing anything.

The same placement engine and preemption search the workers use, run against a copy of
the nodes as they are now: the tasks that would be placed and where, those that would
need to preempt (and which tasks they would evict), and why the rest would wait.
Nothing is written to Redis.
"""

from __future__ import annotations

import orjson

from scheduler.state.app import App
from scheduler.model import GLOBAL, JobSpec
from scheduler.engine.explanations import gang_waits_message
from scheduler.engine.placement import PlacementOptions, Placer
from scheduler.engine.preemption import Search
from scheduler.control import changes
from scheduler.control.preemptor import Preemptor
from scheduler.control.rule_view import rules_now
from scheduler.control.reconcile import RUNNING_JOB, global_targets, open_tasks, same_but_replicas


def plan(app: App, spec: JobSpec, margin: int | None = None) -> dict:
    """:func:`placements`, with ``changes``: what submitting the spec would change against
    the running version (:func:`changes.describe`: fields old -> new, tasks to stop and
    start, a deployment or a replace-all)."""
    store = app.store
    stored = store.job_fields(spec.id)
    tasks = open_tasks(store, spec.id) if stored else []
    targets = len(global_targets(spec, store.nodes())) if spec.type == GLOBAL else None
    return {**placements(app, spec, margin), "changes": changes.describe(stored, spec, tasks, targets)}


def placements(app: App, spec: JobSpec, margin: int | None = None) -> dict:
    """``{job, placements, preemptions, pending, unchanged}``. Submitting a spec equal to
    the running job's changes nothing (``unchanged``: true, nothing to place); one that
    differs only in replicas scales the job, so only the tasks it would add are planned
    (``stopping``: how many it would stop when it scales down)."""
    store = app.store
    stored = store.job_fields(spec.id)
    new = 0
    if stored.get("status", RUNNING_JOB) == RUNNING_JOB and stored.get("spec") is not None:
        if orjson.loads(stored["spec"]) == orjson.loads(orjson.dumps(spec.raw)):
            return {"job": spec.id, "placements": [], "preemptions": [], "pending": [], "unchanged": True}
        if spec.type != GLOBAL and same_but_replicas(stored["spec"], spec):
            open_count = len(open_tasks(store, spec.id))
            if spec.replicas <= open_count:
                return {"job": spec.id, "placements": [], "preemptions": [], "pending": [], "unchanged": False,
                        "stopping": open_count - spec.replicas}
            new = spec.replicas - open_count
    nodes = {node.name: node for node in store.nodes()}  # our own copies: placing changes only them
    counts = store.job_tally(spec.id)
    rules, domains = rules_now(store, spec, list(nodes.values()))  # its domain rules against the counts now
    placer = Placer(PlacementOptions(seed=0))
    preemptor = Preemptor(store, lambda job, version: _spec_or_none(store, job, version),
                          **({"margin": margin} if margin is not None else {}))
    if spec.type == GLOBAL:
        targets = sorted(global_targets(spec, nodes.values()))
        wanted = [(f"{spec.id}.<{name}>", [nodes[name]]) for name in targets]
    else:
        wanted = [(f"{spec.id}.<new {i}>", None) for i in range(new or spec.replicas)]
    placements, preemptions, pending = [], [], []
    explanation = None
    tasks_on = None
    lowest = preemptor.lowest_live_priority()
    gang = None
    if spec.gang and not new:  # a new gang: its first spec.gang members are placed whole or not at all
        gang, wanted, tasks_on = _plan_gang(spec, wanted, nodes, counts, placer, preemptor, lowest,
                                            placements, preemptions, pending, rules, domains)
    for task_id, only in wanted:
        candidates = only if only is not None else list(nodes.values())
        result = placer.place(candidates, spec, [task_id], job_counts=counts, rules=rules, domains=domains)
        if result.assignments:
            placements.append({"task": task_id, "node": result.assignments[0][1]})
            continue
        search: Search | None = None
        if preemptor.worth_trying(spec, lowest):
            if tasks_on is None:
                tasks_on = preemptor.tasks_on(preemptor.candidates(list(nodes.values()), spec))
            search = preemptor.search(candidates, spec, counts, tasks_on, task_id, rules, domains)
        if search is not None and search.choice is not None:
            choice = search.choice
            _evict_locally(nodes[choice.node], choice.victims, tasks_on, domains)
            placer.place([nodes[choice.node]], spec, [task_id], job_counts=counts, rules=rules, domains=domains)
            if not choice.victims:  # room without evicting (held for the job's own tasks)
                placements.append({"task": task_id, "node": choice.node})
                continue
            preemptions.append({"task": task_id, "node": choice.node,
                                "victims": [{"id": v.task_id, "job": v.job, "priority": v.priority}
                                            for v in choice.victims]})
            continue
        explanation = result.explanation.to_dict() if result.explanation else None
        note = search.message(spec, preemptor.margin) if search is not None else None
        pending.append({"task": task_id, "message": (explanation or {}).get("message", "") +
                        (f" {note}" if note else "")})
    out = {"job": spec.id, "placements": placements, "preemptions": preemptions, "pending": pending,
           "unchanged": False}
    if gang is not None:
        out["gang"] = gang
    return out


def _plan_gang(spec: JobSpec, wanted, nodes, counts, placer: Placer, preemptor: Preemptor, lowest,
               placements: list, preemptions: list, pending: list, rules=None, domains=None):
    """The gang's first ``spec.gang`` members as one unit, as the worker places them: all
    placed (outright, or by preempting for all of them at once), or all pending with the
    gang's one explanation. Returns ``(gang summary, the members left to plan one by one
    (beyond the minimum of min_available), the live tasks read for preemption or None)``."""
    need = spec.gang
    members, rest = [task_id for task_id, _ in wanted[:need]], wanted[need:]
    summary = {"size": need, "fits": True, "preempts": False, "message": None}
    result = placer.place(list(nodes.values()), spec, members, job_counts=counts, rules=rules, domains=domains)
    if len(result.assignments) >= need:
        placements += [{"task": task_id, "node": node, "gang": spec.id} for task_id, node in result.assignments]
        return summary, rest, None
    placer.undo(nodes, spec, result.assignments, counts)  # nothing of it holds room
    if rules is not None and rules.counted:
        for _, name in result.assignments:
            domains.add(spec.id, nodes[name], -1)
    why = placer.explain(list(nodes.values()), spec, counts, rules, domains)
    note, tasks_on = None, None
    if preemptor.worth_trying(spec, lowest):
        tasks_on = preemptor.tasks_on(preemptor.candidates(list(nodes.values()), spec))
        search = preemptor.search_gang(list(nodes.values()), spec, counts, members, tasks_on, rules, domains)
        if search.choices is not None:
            summary["preempts"] = bool(search.victims)
            summary["message"] = search.message(spec, preemptor.margin)
            for task_id, choice in search.choices:
                _evict_locally(nodes[choice.node], choice.victims, tasks_on, domains)
                placer.place([nodes[choice.node]], spec, [task_id], job_counts=counts, rules=rules, domains=domains)
                if choice.victims:
                    preemptions.append({"task": task_id, "node": choice.node, "gang": spec.id,
                                        "victims": [{"id": v.task_id, "job": v.job, "priority": v.priority}
                                                    for v in choice.victims]})
                else:
                    placements.append({"task": task_id, "node": choice.node, "gang": spec.id})
            return summary, rest, tasks_on
        note = search.message(spec, preemptor.margin)
    elif spec.preempt != "never":
        note = f"preemption tried: no task runs at priority {spec.priority - preemptor.margin} or lower."
    message = gang_waits_message(spec, need, f"{len(result.assignments)} could be placed at once. {why.message()}")
    if note:
        message += f" {note}"
    summary.update(fits=False, message=message)
    pending += [{"task": task_id, "message": message, "gang": spec.id} for task_id, _ in wanted]
    return summary, [], tasks_on


def _evict_locally(node, victims, tasks_on, domains=None) -> None:
    for victim in victims:
        if domains is not None and victim.domains is not None:
            fields = domains.counts.setdefault(victim.job, {})
            for field in (*victim.domains, "*"):
                fields[field] = fields.get(field, 0) - 1
        for resource, amount in victim.resources.items():
            node.allocated[resource] = node.allocated.get(resource, 0) - amount
        for port in victim.ports:
            node.ports.pop(port, None)
        node.tasks -= 1
    gone = {v.task_id for v in victims}
    tasks_on[node.name] = [t for t in tasks_on.get(node.name, []) if t.task_id not in gone]


def _spec_or_none(store, job, version):
    from scheduler.model.errors import NotFound

    try:
        return store.job_spec(job, version)
    except NotFound:
        return None

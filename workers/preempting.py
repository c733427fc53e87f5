"""Preemption for the tasks of a batch that fit nowhere: a task may evict lower-priority
tasks to get a node (``preempt.lua``, which nominates the node), a gang that waits whole
evicts for all the members it needs at once or for none. The search is the one
``sched job plan`` runs (``Preemptor.search`` and ``search_gang``); a job whose search
found nothing is not searched again for a second."""

from __future__ import annotations

import time
from functools import partial
from typing import Callable, Sequence

from scheduler.control.preemptor import Preemptor
from scheduler.control.rule_view import RuleView
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.preemption import Victim
from scheduler.model import Node
from scheduler.state.app import App
from workers.groups import Group
from workers.stats import WorkerStats


class Preemption:
    """A worker's preemption: ``refresh`` is the worker's ``_refresh`` (its nodes brought up
    to date, with the tallies of the jobs asked for, and the domain counts into ``rules``),
    ``stamp`` its copy's ``NodeCache.stamp`` (what tells that a node changed since its
    tasks were read), ``stats`` its counts."""

    def __init__(self, app: App, config: WorkerConfig, preemptor: Preemptor, refresh, stamp: Callable[[str], int],
                 stats: WorkerStats, rules: RuleView | None = None):
        self.app, self.config, self.preemptor, self.stats = app, config, preemptor, stats
        self.rules = rules if rules is not None else RuleView(app.store)  # the worker's: its refresh reads into it
        self._refresh = refresh
        self._hopeless: dict[tuple, float] = {}  # (job, pin) -> until when preemption is not retried
        self._readings = Readings(preemptor, stamp)
        # Seconds: the App's clock when it has one (a simulation's virtual time), else monotonic.
        self._clock = (lambda: app.clock() / 1000) if app.clock is not None else time.monotonic

    def preempt(self, claim, group_of: dict[str, Group], failures: dict[str, dict], conflicts: set[str]) -> None:
        """For tasks that fit nowhere, try evicting lower-priority tasks; a preemptor that
        gets a node leaves ``failures`` (it is back in the queue, nominated). A gang that
        waits whole preempts whole (:meth:`_preempt_gang`): victims for all the members it
        needs at once, or none."""
        preemptor = self.preemptor
        lowest = preemptor.lowest_live_priority()
        now = self._clock()
        # Held back by the quota or parallelism: their turn comes when work ends, not by evicting.
        waiting = {t for t, explanation in failures.items() if explanation.get("admission")}
        for task_id, explanation in list(failures.items()):  # no live task is low enough: say so
            spec = group_of[task_id].spec
            if task_id in waiting:
                continue
            if task_id not in conflicts and spec.preempt != "never" and not preemptor.worth_trying(spec, lowest):
                failures[task_id] = _noted(explanation, f"preemption tried: no task runs at priority "
                                                        f"{spec.priority - preemptor.margin} or lower.")
        todo = [t for t in failures if t not in conflicts and t not in waiting
                and preemptor.worth_trying(group_of[t].spec, lowest)
                and self._hopeless.get(_hope_key(group_of[t]), 0) <= now]
        gangs: dict[str, list[str]] = {}  # job -> its members that wait whole (in claim order)
        for task_id in todo:
            if failures[task_id].get("gang"):
                gangs.setdefault(group_of[task_id].spec.id, []).append(task_id)
        singles = [t for t in todo if not failures[t].get("gang")]
        budget = self.config.max_preemptions
        for members in gangs.values():
            if budget <= 0:  # not searched in this batch: soon, not in 60 s
                conflicts.update(members)
                continue
            budget -= 1
            self._preempt_gang(claim, group_of[members[0]], members, failures, conflicts, now)
        for task_id in singles[budget:]:  # not searched in this batch: soon, not in 60 s
            conflicts.add(task_id)
        for task_id in singles[:budget]:
            group = group_of[task_id]
            if self._hopeless.get(_hope_key(group), 0) > now:
                continue
            # Fresh nodes, with the room nominated for the preemptors before this one: the
            # search counts the room held for the job's other tasks as taken (as plan does).
            nodes, counts, _, _, _ = self._refresh({group.spec.id}, claim.now_ms,
                                                   domains=self.rules.begin([group.spec]))
            rules = self.rules.rules(group.spec, list(nodes.values()))
            if group.spec.gang and sum(counts[group.spec.id].values()) < group.spec.gang:
                # A member of a gang whose minimum is not running: never preempt for part of it.
                failures[task_id] = _noted(failures[task_id], "preemption not tried: its gang is not running "
                                                              "yet, and a gang preempts only as a whole.")
                continue
            candidates = ([nodes[group.pin]] if group.pin in nodes else []) if group.pin else list(nodes.values())
            search = preemptor.search(candidates, group.spec, counts[group.spec.id], task_id=task_id, rules=rules,
                                      domains=self.rules.counts,
                                      read=partial(self._readings.on, now=now))
            if search.choice is not None:
                result = preemptor.apply(claim.token, task_id, group.spec, search)
                if result == "ok":
                    self._readings.forget(search.choice.node)
                    del failures[task_id]
                    if search.choice.victims:
                        self.stats.preempted += 1
                    nominated = group.nomination(task_id)
                    if nominated and nominated != search.choice.node:
                        self.app.store.unnominate(task_id, nominated)  # nominated anew elsewhere
                    continue
                # Lost a race (victims or node changed since the search): like a refused
                # commit, back off and search again soon rather than wait as unschedulable.
                self._readings.forget(search.choice.node)
                conflicts.add(task_id)
                failures[task_id] = _noted(failures[task_id], f"preemption on {search.choice.node} refused: {result}.")
                continue
            # Searching reads what runs on every candidate node: don't repeat a fruitless
            # search for this job within the next second.
            self._hopeless[_hope_key(group)] = now + 1.0
            failures[task_id] = _noted(failures[task_id], search.message(group.spec, preemptor.margin))

    def _preempt_gang(self, claim, group: Group, members: list[str], failures: dict[str, dict], conflicts: set[str],
                      now: float) -> None:
        """A gang that waits whole: choose victims for as many members as it needs at once
        (all of them for ``gang: true``, ``min_available`` less those live otherwise), each
        member's choice applied to a copy of the nodes before the next is searched, and
        evict and nominate them all in one script call, or nothing."""
        preemptor, spec = self.preemptor, group.spec
        nodes, counts, _, _, _ = self._refresh({spec.id}, claim.now_ms, domains=self.rules.begin([spec]))
        rules = self.rules.rules(spec, list(nodes.values()))
        need = spec.gang - sum(counts[spec.id].values())
        if need > len(members):  # cannot happen for a gang that waits whole; be safe
            for task_id in members:
                failures[task_id] = _noted(failures[task_id], "preemption not tried: not all of the gang's members "
                                                              "were claimed together.")
            return
        chosen = members[:need]
        candidates = ([nodes[group.pin]] if group.pin in nodes else []) if group.pin else list(nodes.values())
        search = preemptor.search_gang(candidates, spec, counts[spec.id], chosen, rules=rules, domains=self.rules.counts,
                                       read=partial(self._readings.on, now=now))
        if search.choices is None:
            self._hopeless[_hope_key(group)] = now + 1.0
            note = search.message(spec, preemptor.margin)
            for task_id in members:
                failures[task_id] = _noted(failures[task_id], note)
            return
        result = preemptor.apply_gang(claim.token, spec, search)
        if result != "ok":  # lost a race: nothing was changed; back off and search again soon
            for _, choice in search.choices:
                self._readings.forget(choice.node)
            for task_id in members:
                conflicts.add(task_id)
                failures[task_id] = _noted(failures[task_id], f"gang preemption refused: {result}.")
            return
        for _, choice in search.choices:
            self._readings.forget(choice.node)
        if search.victims:
            self.stats.preempted += len(chosen)
        for task_id, choice in search.choices:
            del failures[task_id]
            nominated = group.nomination(task_id)
            if nominated and nominated != choice.node:
                self.app.store.unnominate(task_id, nominated)  # nominated anew elsewhere


class Readings:
    """What runs on each node, as the preemption searches read it: kept between batches
    while the worker's copy has taken no change of the node since (its ``stamp``), and for
    at most ``KEEP_S`` seconds, so that a search reads only the nodes that changed (each
    would otherwise read every candidate node again). A node where victims were evicted,
    or whose preemption was refused, is read again. A reading gone stale (a change the copy
    has not taken yet) costs no correctness: ``preempt.lua`` checks the victims again and
    refuses, and the commit checks the room."""

    KEEP_S = 5.0

    def __init__(self, preemptor: Preemptor, stamp: Callable[[str], int]):
        self.preemptor = preemptor
        self.stamp = stamp
        self.tasks_on: dict[str, list[Victim]] = {}
        self._read: dict[str, tuple[int, float]] = {}  # node -> (its stamp when read, when)

    def on(self, nodes: Sequence[Node], now: float) -> dict[str, list[Victim]]:
        """The live tasks on ``nodes`` (a search's candidates), read for those whose
        reading is missing or out of date."""
        unread, stamps = [], []
        for node in nodes:
            stamp, seen = self.stamp(node.name), self._read.get(node.name)
            if seen is None or seen[0] != stamp or now - seen[1] > self.KEEP_S:
                unread.append(node)
                stamps.append(stamp)
        if unread:
            read = self.preemptor.tasks_on(unread)
            for node, stamp in zip(unread, stamps):
                self.tasks_on[node.name] = read.get(node.name, [])
                self._read[node.name] = (stamp, now)
        if len(self._read) > 2 * len(nodes) + 64:  # readings that would be read again anyway go
            self._read = {name: seen for name, seen in self._read.items() if now - seen[1] <= self.KEEP_S}
            self.tasks_on = {name: tasks for name, tasks in self.tasks_on.items() if name in self._read}
        return self.tasks_on

    def forget(self, node: str) -> None:
        """Read ``node`` again at the next search (its victims were evicted, or a
        preemption there was refused)."""
        self._read.pop(node, None)


def _hope_key(group: Group) -> tuple[str, str]:
    """What a fruitless preemption search is remembered by: the job and pinned node (a
    global job's task pinned elsewhere still gets its own search)."""
    return (group.spec.id, group.pin)


def _noted(explanation: dict, note: str) -> dict:
    """An explanation with what preemption found added to it."""
    return {**explanation, "preemption": note, "message": f"{explanation['message']} {note}"}

"""Preemption from a worker: read what runs where, choose, evict and nominate atomically.

:mod:`scheduler.preemption` chooses (pure logic); this module feeds it from Redis, applies
the choice with ``lua/preempt.lua`` (victims end as ``preempted`` and the preemptor goes
back to the active queue nominated to the node, its room held there), and then lets the
victims' jobs replace them. A dry run (``sched job plan``) uses the same reading and
choosing, without applying.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from scheduler.control import budgets, reconcile
from scheduler.model import ACTIVE, READY, JobSpec, Node
from scheduler.engine.domains import DomainCounts
from scheduler.engine.preemption import (DEFAULT_MARGIN, GangSearch, Search, Victim, candidates_wanted, find_gang,
                                         find_some)
from scheduler.model.placement_rules import Rules
from scheduler.state.nominations import reservation
from scheduler.state.store import Store

DEFAULT_NOMINATION_MS = 30_000


class Preemptor:
    def __init__(self, store: Store, spec_of: Callable[[str, int], JobSpec | None],
                 margin: int = DEFAULT_MARGIN, nomination_ms: int = DEFAULT_NOMINATION_MS):
        self.store = store
        self.spec_of = spec_of
        self.margin = margin
        self.nomination_ms = nomination_ms
        self._start = 0  # where the next search starts among the candidate nodes (kube's offset)

    def lowest_live_priority(self) -> int | None:
        """The lowest priority any live task has (from ``tally:priority``), or None."""
        priorities = [p for p, count in self.store.live_priorities().items() if count > 0]
        return min(priorities) if priorities else None

    def worth_trying(self, job: JobSpec, lowest: int | None) -> bool:
        """Could any live task be a victim for ``job`` at all?"""
        return job.preempt != "never" and lowest is not None and lowest <= job.priority - self.margin

    def tasks_on(self, nodes: Sequence[Node]) -> dict[str, list[Victim]]:
        """The live tasks on ``nodes``, with what preemption needs to know of each."""
        out: dict[str, list[Victim]] = {}
        for node, tasks in self.store.live_tasks_on([node.name for node in nodes]).items():
            for task in tasks:
                spec = self.spec_of(task.job, task.version)
                out.setdefault(node, []).append(Victim(
                    task_id=task.id, job=task.job, priority=task.priority, resources=task.allocated,
                    ports=task.ports, preemptible=spec.preemptible if spec is not None else True,
                    started_ms=task.assigned_ms, domains=task.domains))
        return out

    def candidates(self, nodes: Sequence[Node], job: JobSpec) -> list[Node]:
        """Nodes where eviction could help at all: usable, and big enough when empty."""
        return [n for n in nodes if n.status == READY and n.availability == ACTIVE
                and all(n.capacity.get(r, 0) >= amount for r, amount in job.resources.items())]

    def search(self, nodes: Sequence[Node], job: JobSpec, job_counts: Mapping[str, int],
               tasks_on: Mapping[str, Sequence[Victim]] | None = None, task_id: str = "",
               rules: Rules | None = None, domains: DomainCounts | None = None,
               read: Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]] | None = None) -> Search:
        """Where one task of ``job`` (``task_id``) could go by evicting; room nominated for
        the job's other tasks counts as taken (see :func:`scheduler.engine.preemption.find`),
        so a worker preempting for task after task of a job evicts what ``sched job plan``
        says it would. Like kube, it stops once it has found enough nodes where evicting
        works (:func:`scheduler.engine.preemption.find_some`), each search starting where
        the last one stopped; what runs on the nodes is ``tasks_on``, or read a slice at a
        time (``read``, else from Redis)."""
        pool = self.candidates(nodes, job)
        if tasks_on is not None:
            read = _given(tasks_on)
        start = self._start
        self._start += candidates_wanted(len(pool))
        allowed: dict[str, int] = {}
        return find_some(pool, start, job, self._with_budgets(read or self.tasks_on, allowed), job_counts,
                         self.margin, task_id, rules, domains, allowed)

    def _with_budgets(self, read: Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]],
                      allowed: dict[str, int]) -> Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]]:
        """``read``, which also puts in ``allowed`` the disruptions each budgeted job of the
        victims read allows now (one round trip per slice, for the jobs not read yet)."""
        seen: set[str] = set()

        def reading(part: Sequence[Node]) -> Mapping[str, Sequence[Victim]]:
            found = read(part)
            jobs = {v.job for victims in found.values() for v in victims} - seen
            if jobs and self.store is not None:  # (a search over given tasks alone reads nothing)
                seen.update(jobs)
                allowed.update(budgets.allowances(self.store, jobs))
            return found
        return reading

    def apply(self, token: str, task_id: str, job: JobSpec, search: Search) -> str:
        """Evict the chosen victims (if any: a choice may be room already free) and
        nominate the node; returns "ok" or why not."""
        choice = search.choice
        result = self.store.preempt(token, task_id, choice.node, self.nomination_ms, reservation(job),
                                    [(v.task_id, v.job, v.resources) for v in choice.victims])
        if result == "ok" and choice.victims:
            reconcile.preempted(self.store, [(v.task_id, v.job, choice.node) for v in choice.victims])
        return result

    def search_gang(self, nodes: Sequence[Node], job: JobSpec, job_counts: Mapping[str, int], task_ids: Sequence[str],
                    tasks_on: Mapping[str, Sequence[Victim]] | None = None, rules: Rules | None = None,
                    domains: DomainCounts | None = None,
                    read: Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]] | None = None) -> GangSearch:
        """Victims for every one of ``task_ids`` (members of the gang ``job``) at once, or
        none (:func:`scheduler.engine.preemption.find_gang`); what runs on the candidate
        nodes is ``tasks_on``, or ``read`` of them (else read from Redis)."""
        pool = self.candidates(nodes, job)
        if tasks_on is None:
            tasks_on = (read or self.tasks_on)(pool)
        allowed = {} if self.store is None else \
            budgets.allowances(self.store, {v.job for victims in tasks_on.values() for v in victims})
        return find_gang(pool, job, tasks_on, job_counts, task_ids, self.margin, rules, domains, allowed)

    def apply_gang(self, token: str, job: JobSpec, search: GangSearch) -> str:
        """Evict every victim of the gang's choices and nominate every member, in one
        script call (all or nothing); returns "ok" or why not."""
        members = [(task_id, choice.node) for task_id, choice in search.choices]
        victims = [(v.task_id, v.job, choice.node, v.resources) for _, choice in search.choices for v in choice.victims]
        result = self.store.preempt_gang(token, job.id, members, self.nomination_ms, reservation(job), victims)
        if result == "ok" and victims:
            reconcile.preempted(self.store, [(v, victim_job, node) for v, victim_job, node, _ in victims])
        return result


def _given(tasks_on: Mapping[str, Sequence[Victim]]) -> Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]]:
    """A reader that has read every node already."""
    return lambda part: tasks_on

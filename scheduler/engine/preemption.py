"""Preemption: room for a task that fits nowhere, made by evicting lower-priority tasks.

kube-scheduler's DefaultPreemption with Nomad's margin. For each node that passes the
job's static filters, take every *eligible* victim away (preemptible, and at least
``margin`` priority levels below the preemptor: 10 by default, as in Nomad) and see
whether the task would fit; if it would, give victims back one by one, highest priority
first, keeping back every one the task can do without (kube's reprieve; of equal
priorities the one started first is kept, so the one started last is evicted). The node
to use is the one whose victims go beyond the fewest disruption budgets (kube's
PodDisruptionBudget violations: each victim takes one of the disruptions its job's budget
allows, and one beyond is a violation; those are also given back first), then the one
whose victims have the lowest highest-priority, then the fewest victims, then the least
total priority, then (kube's last tie-break) the one whose highest-priority victims
started latest. A budget never forbids a preemption (``preempt.lua`` is the gate of
truth, and counts the disruption): it only steers the choice.

A victim's task slot is room like its resources: on a node whose agent's slots are all in
use, evicting one task is what gives a slot (kube counts pods the same way), and a
nomination holds its slot as it holds its resources.

A node where a hard domain rule (topology spread, ``distinct_property``, job affinity or
anti-affinity) would still refuse the task once the victims are gone is no choice: victims
are only ever evicted for room the task can take. Their removal counts, as in kube: evicting
a task of a job the task's anti-affinity matches can make a node possible.

Room already held on a node for other tasks *of the same job* (their nominations, made by
earlier preemptions) counts as taken here, though a placement may use it (any task of
the job may land in its job's held room): the search answers "where does *this* task go,
besides the ones already promised a place", as ``sched job plan`` counts it. A node where
the task fits without evicting anything (room an earlier eviction left over) is a choice
with no victims: the task is nominated there, like a preemptor, without evicting.

Pure logic, no Redis: the worker reads what runs on the nodes, asks :func:`find`, and
applies the choice atomically with ``lua/preempt.lua``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from scheduler.engine.budgets import violations
from scheduler.engine.domains import DomainCounts
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.fit import misfit
from scheduler.engine.rules import domain_misfit
from scheduler.model import ACTIVE, READY, JobSpec, Node
from scheduler.model.placement_rules import Rules

DEFAULT_MARGIN = 10
# How many nodes where eviction works a search finds before it chooses among them: kube's
# DefaultPreemption arguments minCandidateNodesPercentage and minCandidateNodesAbsolute.
MIN_CANDIDATES_PERCENT = 10
MIN_CANDIDATES = 100


@dataclass(frozen=True)
class Victim:
    """A live task as preemption sees it."""

    task_id: str
    job: str
    priority: int
    resources: dict[str, int]
    ports: tuple[int, ...]
    preemptible: bool = True
    started_ms: int = 0  # when it was placed (kube's start time: of equals, the one started last goes first)
    domains: tuple[str, ...] | None = None  # what it is counted under by domain (its job's rules may count it)


@dataclass(frozen=True)
class Choice:
    node: str
    victims: tuple[Victim, ...]
    violations: int = 0  # victims beyond what their jobs' disruption budgets allow

    @property
    def key(self) -> tuple:
        """Lower is better: kube's pickOneNodeForPreemption (fewest disruption budget
        violations, lowest highest priority, least total priority, fewest victims; then
        the node whose earliest-started victim of the highest priority started latest)."""
        priorities = [v.priority for v in self.victims]
        if not priorities:  # room without evicting anything: the best there is
            return (0, -1, 0, 0, 0, self.node)
        top = max(priorities)
        earliest = min(v.started_ms for v in self.victims if v.priority == top)
        return (self.violations, top, len(priorities), sum(priorities), -earliest, self.node)


@dataclass(frozen=True)
class Search:
    """What a search found: a choice, or why there is none (for the explanation)."""

    choice: Choice | None
    nodes_tried: int  # nodes that passed the static filters and are ready and active
    with_victims: int  # of those, nodes with any eligible victim
    found: int = 0  # nodes where evicting would make room (the choice is the best of them)

    def message(self, job: JobSpec, margin: int) -> str:
        if self.choice is not None and not self.choice.victims:
            return f"preemption: {self.choice.node} has room left by earlier evictions."
        if self.choice is not None:
            names = ", ".join(v.task_id for v in self.choice.victims)
            beyond = (f" ({self.choice.violations} beyond their jobs' disruption budgets: no node needed fewer)"
                      if self.choice.violations else "")
            return f"preemption: evicting {names} on {self.choice.node} makes room{beyond}."
        if not self.with_victims:
            return (f"preemption tried: no preemptible task at priority {job.priority - margin} or lower "
                    f"on any of the {self.nodes_tried} eligible node(s).")
        return (f"preemption tried: evicting every eligible lower-priority task would still not make room "
                f"on any of the {self.with_victims} node(s) that have some.")


def eligible(victims, priority: int, margin: int) -> list[Victim]:
    # Never an equal or higher priority, whatever the margin.
    return [v for v in victims if v.preemptible and v.priority < priority and v.priority <= priority - margin]


def _without(node: Node, victims) -> Node:
    """A copy of ``node`` as it would be with ``victims`` gone."""
    allocated = dict(node.allocated)
    ports = dict(node.ports)
    for victim in victims:
        for resource, amount in victim.resources.items():
            allocated[resource] = allocated.get(resource, 0) - amount
        for port in victim.ports:
            ports.pop(port, None)
    return replace(node, allocated=allocated, ports=ports, tasks=node.tasks - len(victims))


def _give_back(node: Node, victim: Victim) -> None:
    for resource, amount in victim.resources.items():
        node.allocated[resource] = node.allocated.get(resource, 0) + amount
    for port in victim.ports:
        node.ports[port] = victim.task_id
    node.tasks += 1  # and its task slot


def _take_away(node: Node, victim: Victim) -> None:
    """:func:`_give_back` undone: ``node`` as it was with ``victim`` gone."""
    allocated = node.allocated
    for resource, amount in victim.resources.items():
        allocated[resource] = allocated.get(resource, 0) - amount
    for port in victim.ports:
        node.ports.pop(port, None)
    node.tasks -= 1


def holding(node: Node, job: str, task_id: str = "") -> Node:
    """``node`` with the room nominated for other tasks of ``job`` counted as allocated
    (and ``task_id``'s own nomination dropped): what is left for one more task of the job."""
    if not node.nominations:
        return node
    mine = [n for t, n in node.nominations.items() if n.job == job and t != task_id]
    if not mine and task_id not in node.nominations:
        return node
    allocated, ports = dict(node.allocated), dict(node.ports)
    for nomination in mine:
        for resource, amount in nomination.resources.items():
            allocated[resource] = allocated.get(resource, 0) + amount
        for port in nomination.ports:
            ports[port] = nomination.task_id
    others = {t: n for t, n in node.nominations.items() if n.job != job}
    return replace(node, allocated=allocated, ports=ports, tasks=node.tasks + len(mine), nominations=others)


def _uncounted(domains: DomainCounts, victims) -> DomainCounts:
    """``domains`` as it would be with ``victims`` gone."""
    counted = [v for v in victims if v.domains is not None]
    if not counted:
        return domains
    left = domains.copy()
    for victim in counted:
        fields = left.counts.setdefault(victim.job, {})
        for field in (*victim.domains, "*"):
            fields[field] = fields.get(field, 0) - 1
    return left


def victims_on(node: Node, job: JobSpec, candidates, job_on_node: int, margin: int = DEFAULT_MARGIN,
               rules: Rules | None = None, domains: DomainCounts | None = None,
               budgets: Mapping[str, int] | None = None):
    """The fewest, lowest-priority victims on ``node`` that make room for one task of
    ``job`` (and let its hard domain ``rules`` hold), or None when evicting every eligible
    task would not be enough. With ``budgets`` (job -> disruptions its budget allows now),
    the victims whose eviction would go beyond their job's budget are given back first
    (kube's selectVictimsOnNode), so they are evicted only where nothing else makes room."""
    pool = eligible(candidates, job.priority, margin)
    if not pool:
        return None
    room = _without(node, pool)  # a copy of its own: given back and taken away again in place below
    hard = rules is not None and rules.hard
    counts = domains or DomainCounts()
    resources, ports, max_per_node, priority, job_id = job.resources, job.ports, job.max_per_node, job.priority, job.id

    def fits(kept: set[str]) -> bool:
        """Whether the task fits with every victim gone but those ``kept``."""
        if misfit(room, resources, ports, max_per_node, job_on_node, priority, job_id) is not None:
            return False
        return not hard or domain_misfit(room, rules, _uncounted(counts, [v for v in pool if v.task_id not in kept])) \
            is None

    kept: set[str] = set()
    if not fits(kept):
        return None
    victims: list[Victim] = []
    # Most important first: the highest priority, then (kube) the one started first;
    # those beyond their budgets before the others.
    order = sorted(pool, key=lambda v: (-v.priority, v.started_ms, v.task_id))
    if budgets:
        beyond = violations(order, budgets)
        order = [v for v, b in zip(order, beyond) if b] + [v for v, b in zip(order, beyond) if not b]
    for victim in order:
        _give_back(room, victim)
        kept.add(victim.task_id)
        if not fits(kept):
            _take_away(room, victim)
            kept.discard(victim.task_id)
            victims.append(victim)
    return tuple(victims) if victims else None


def find(nodes: Sequence[Node], job: JobSpec, tasks_on: Mapping[str, Sequence[Victim]],
         job_counts: Mapping[str, int], margin: int = DEFAULT_MARGIN, task_id: str = "",
         rules: Rules | None = None, domains: DomainCounts | None = None,
         budgets: Mapping[str, int] | None = None) -> Search:
    """The best node to preempt on for one task of ``job`` (``task_id``: its own
    nomination, if any, is not counted against it), among ``nodes``; with the job's
    ``rules`` and the ``domains`` counts, only where its hard domain rules would hold.
    ``budgets`` (job -> disruptions its budget allows now; jobs not in it have none):
    the node whose victims go beyond the fewest budgets is chosen first (kube)."""
    static = filter_pipeline(job).static_check
    hard = rules is not None and rules.hard
    counts = domains or DomainCounts()
    best: Choice | None = None
    tried = with_victims = found = 0
    for node in nodes:
        if node.status != READY or node.availability != ACTIVE or static(node) is not None:
            continue
        tried += 1
        node = holding(node, job.id, task_id)
        on_node = job_counts.get(node.name, 0)
        if (misfit(node, job.resources, job.ports, job.max_per_node, on_node, job.priority, job.id) is None
                and (not hard or domain_misfit(node, rules, counts) is None)):
            victims = ()  # room left by earlier evictions: nothing more to evict
        else:
            candidates = tasks_on.get(node.name, ())
            if not eligible(candidates, job.priority, margin):
                continue
            with_victims += 1
            victims = victims_on(node, job, candidates, on_node, margin, rules, counts, budgets)
        if victims is not None:
            found += 1
            choice = Choice(node.name, victims, sum(violations(victims, budgets)) if budgets else 0)
            if best is None or choice.key < best.key:
                best = choice
    return Search(best, tried, with_victims, found)


def candidates_wanted(nodes: int) -> int:
    """kube's calculateNumCandidates: 10 % of the ``nodes``, at least 100 (at most all)."""
    return min(nodes, max(nodes * MIN_CANDIDATES_PERCENT // 100, MIN_CANDIDATES))


def find_some(nodes: Sequence[Node], start: int, job: JobSpec,
              read: Callable[[Sequence[Node]], Mapping[str, Sequence[Victim]]], job_counts: Mapping[str, int],
              margin: int = DEFAULT_MARGIN, task_id: str = "", rules: Rules | None = None,
              domains: DomainCounts | None = None, budgets: Mapping[str, int] | None = None) -> Search:
    """:func:`find` over ``nodes`` from index ``start`` on (round the end), a slice of
    :func:`candidates_wanted` nodes at a time (``read`` gives what runs on a slice's nodes),
    until that many nodes where evicting makes room are found, and the best of those: kube's
    dry run, which stops once it has enough candidates, from an offset that moves on. A
    cluster of up to 100 nodes is searched whole, as is one where few nodes would do."""
    wanted = candidates_wanted(len(nodes))
    if not nodes:
        return Search(None, 0, 0)
    start %= len(nodes)
    order = [*nodes[start:], *nodes[:start]]
    best: Choice | None = None
    tried = with_victims = found = 0
    for at in range(0, len(order), wanted):
        part = order[at:at + wanted]
        search = find(part, job, read(part), job_counts, margin, task_id, rules, domains, budgets)
        tried, with_victims, found = tried + search.nodes_tried, with_victims + search.with_victims, found + search.found
        if search.choice is not None and (best is None or search.choice.key < best.key):
            best = search.choice
        if found >= wanted:
            break
    return Search(best, tried, with_victims, found)


@dataclass(frozen=True)
class GangSearch:
    """What a search for a whole gang found: one choice per member (all of them), or
    none, with the search of the first member that got no node (for the explanation)."""

    choices: tuple[tuple[str, Choice], ...] | None
    members: int
    placed: int  # members that got a node before one did not
    failed: Search | None = None

    @property
    def victims(self) -> tuple[Victim, ...]:
        return tuple(v for _, choice in self.choices or () for v in choice.victims)

    def message(self, job: JobSpec, margin: int) -> str:
        if self.choices is not None:
            evicted = self.victims
            if not evicted:
                return f"preemption: room for all {self.members} members of gang {job.id} is free."
            nodes = sorted({choice.node for _, choice in self.choices if choice.victims})
            return (f"preemption: evicting {len(evicted)} task(s) ({', '.join(v.task_id for v in evicted)}) "
                    f"on {', '.join(nodes)} makes room for all {self.members} members of gang {job.id}.")
        if self.placed == 0 and self.failed is not None:
            why = self.failed.message(job, margin).removeprefix("preemption tried: ")
            return f"preemption tried for the whole gang: {why} Nothing is evicted."
        return (f"preemption tried for the whole gang: evicting lower-priority tasks makes room for only "
                f"{self.placed} of its {self.members} members, so nothing is evicted.")


def _scratch(node: Node) -> Node:
    """A copy of ``node`` whose room can be changed without touching the original; the
    nominations of nobody are dropped here (see :func:`find_gang`)."""
    return replace(node, allocated=dict(node.allocated), ports=dict(node.ports),
                   nominations=dict(node.nominations or {}))


def find_gang(nodes: Sequence[Node], job: JobSpec, tasks_on: Mapping[str, Sequence[Victim]],
              job_counts: Mapping[str, int], task_ids: Sequence[str], margin: int = DEFAULT_MARGIN,
              rules: Rules | None = None, domains: DomainCounts | None = None,
              budgets: Mapping[str, int] | None = None) -> GangSearch:
    """Victims for every one of ``task_ids`` (members of the gang ``job``) at once: each
    member's choice (:func:`find`) is applied to copies of the nodes (its victims gone,
    its own room taken, the job's count on the node raised) before the next member is
    searched, as ``sched job plan`` does; succeeds only if every member gets a node.

    Room nominated for the gang's own tasks is taken as free: every member is being
    decided here again, and the choices are applied to the copies one by one."""
    copies = []
    for node in nodes:
        node = _scratch(node)
        node.nominations = {t: n for t, n in node.nominations.items() if n.job != job.id}
        copies.append(node)
    by_name = {node.name: node for node in copies}
    left = {name: list(victims) for name, victims in tasks_on.items()}
    counts = dict(job_counts)
    counted = (domains or DomainCounts()).copy()
    choices: list[tuple[str, Choice]] = []
    allowed = dict(budgets or {})  # each member's victims take from their jobs' budgets
    for task_id in task_ids:
        search = find(copies, job, left, counts, margin, task_id, rules, counted, allowed)
        if search.choice is None:
            return GangSearch(None, len(task_ids), len(choices), search)
        choice = search.choice
        node = by_name[choice.node]
        gone = {v.task_id for v in choice.victims}
        for victim in choice.victims:
            for resource, amount in victim.resources.items():
                node.allocated[resource] = node.allocated.get(resource, 0) - amount
            for port in victim.ports:
                node.ports.pop(port, None)
        node.tasks -= len(choice.victims)
        left[node.name] = [v for v in left.get(node.name, ()) if v.task_id not in gone]
        for victim in choice.victims:
            if victim.job in allowed:
                allowed[victim.job] -= 1
        for resource, amount in job.resources.items():  # the member's own room
            node.allocated[resource] = node.allocated.get(resource, 0) + amount
        for port in job.ports:
            node.ports[port] = task_id
        node.tasks += 1
        counts[node.name] = counts.get(node.name, 0) + 1
        if rules is not None and rules.counted:
            counted = _uncounted(counted, choice.victims)
            counted.add(job.id, node)
        choices.append((task_id, choice))
    return GangSearch(tuple(choices), len(task_ids), len(choices))

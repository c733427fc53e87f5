"""The scheduler worker: claim a batch, place it locally, commit it atomically, requeue the rest.

Workers are stateless and optimistic (Nomad's model): each plans against its own cached
copy of the nodes, and the Lua commit is the one serialised step that re-checks every
placement and may refuse some. Refused tasks are placed again against refreshed nodes,
up to ``commit_retries`` rounds, then go back to the queue with an explanation. A worker
that dies holds nothing but leases, which expire and are reclaimed by the others.

``sched worker --concurrency N`` runs N of these loops as N processes (see
``workers/supervisor.py``): placement is CPU-bound Python, so processes (not threads)
are what use more than one core.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import redis

from scheduler.control import heartbeat, reconcile
from scheduler.control.preemptor import Preemptor
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import Placement, Placer, gang_waits_message, placement_shape
from scheduler.engine.fit import over_quota
from scheduler.model import READY, STOPPED, JobSpec, Node, reasons
from scheduler.model.quantities import format_quantity
from scheduler.model.constraints import pins_a_node
from scheduler.model.errors import NotFound
from scheduler.state.app import App
from scheduler.state.connection import wait_for_redis
from scheduler.state.commit import Planned, commit
from scheduler.state.node_cache import NodeCache
from scheduler.state.queue import QueueConfig
from scheduler.state.jobs import parse_stored
from scheduler.tools.logs import Summary
from workers import metrics

__all__ = ["SchedulerWorker", "WorkerConfig", "run_one"]

log = logging.getLogger("sched.worker")


@dataclass
class Group:
    """Identical tasks: same job, same spec version, same pinned node (global jobs), same
    nominated node (a preemptor's next attempt tries its nominated node first). A gang's
    members are one group whatever their nominations (a gang preempts as a whole, each
    member nominated to its own node): ``nominated_of`` gives each member's."""

    spec: JobSpec
    pin: str
    nominated: str
    task_ids: list[str]
    nominated_of: dict[str, str] | None = None

    def nomination(self, task_id: str) -> str:
        return self.nominated or (self.nominated_of or {}).get(task_id, "")


def _batches(groups: list[Group], counts: dict[str, dict[str, int]], faults: dict[str, dict[str, int]]):
    if len({group.spec.tenant for group in groups}) > 1:
        # Several tenants: claim.lua's order is theirs by dominant share (priority first
        # within a tenant); placing in it keeps a contended batch fair.
        yield from ((group, False) for group in groups)
        return
    yield from _one_tenant_batches(groups, counts, faults)


def _one_tenant_batches(groups: list[Group], counts: dict[str, dict[str, int]], faults: dict[str, dict[str, int]]):
    """The groups to place, in order (claim order: priority first), each with whether its
    tasks are independent: groups of one task, of a job with nothing placed and no recent
    failures, not pinned or nominated, are merged by :func:`placement_shape` into one
    placement pass, at the place of the first of them.

    Among groups of one priority, those pinned to a node (a global job's task, or a
    ``node.hostname==``/``node.name==``/``node.id==`` constraint) come first, as SwarmKit
    schedules tasks with node constraints first: the free tasks after them see their load
    and go elsewhere, rather than take the one node the pinned ones can use."""
    groups = sorted(groups, key=lambda group: (-group.spec.priority, not _pinned(group)))  # stable
    classes: dict[tuple, list[Group]] = {}
    for group in groups:
        spec = group.spec
        if (len(group.task_ids) == 1 and not group.pin and not group.nominated and not counts.get(spec.id)
                and spec.id not in faults):
            classes.setdefault(placement_shape(spec), []).append(group)
    merged: dict[int, list[Group]] = {}  # id of a class's first group -> the class
    for members in classes.values():
        if len(members) > 1 and len({group.spec.id for group in members}) == len(members):  # one task per job
            merged[id(members[0])] = members
    within = {id(group) for members in merged.values() for group in members}
    for group in groups:
        members = merged.get(id(group))
        if members is not None:
            yield Group(group.spec, "", "", [member.task_ids[0] for member in members]), True
        elif id(group) not in within:
            yield group, False


def _pinned(group: Group) -> bool:
    return bool(group.pin) or pins_a_node(group.spec.constraints)


def _regroup(groups: list[Group], keep: set[str]) -> list[Group]:
    kept = [Group(g.spec, g.pin, g.nominated, [t for t in g.task_ids if t in keep], g.nominated_of) for g in groups]
    return [g for g in kept if g.task_ids]


@dataclass
class WorkerStats:
    batches: int = 0
    claimed: int = 0
    placed: int = 0
    refused: int = 0
    unplaced: int = 0
    preempted: int = 0  # preemptors nominated (each evicted one or more victims)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class SchedulerWorker:
    def __init__(self, app: App, config: WorkerConfig | None = None, name: str | None = None):
        self.app = app
        self.config = config or WorkerConfig()
        self.name = name or f"worker-{os.getpid()}"
        self.cache = NodeCache(app.store)
        self.placer = Placer(self.config.placement)
        self.preemptor = Preemptor(app.store, self._spec, self.config.preemption_margin) \
            if self.config.preemption else None
        self.stats = WorkerStats()
        self._specs: dict[tuple[str, int], JobSpec] = {}
        self._hopeless: dict[tuple, float] = {}  # (job, pin) -> until when preemption is not retried
        self._stopping = False
        self._last_maintain = self._last_health = 0.0
        # Node liveness as this worker has seen it; a gap of two health checks means a stall.
        self._watch = heartbeat.Watch(stall_gap_ms=int(max(heartbeat.STALL_GAP_MS, 2000 * self.config.health_every_s)))
        self._seen_epoch: str | None = None
        self._everywhere: list[Node] = []  # see _view
        self._rows: dict[str, int] = {}
        self._membership = -1
        self._ahead: Future | None = None  # the next batch, claimed while this one commits
        self._total_capacity: dict[str, int] = {}
        self._capacity_at: tuple[int, float] = (-1, 0.0)  # (cache membership, when) it was summed
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-commit")
        self._unreported: dict[str, int] = defaultdict(int)  # counts not yet in the stats hash
        self._last_report = time.monotonic()
        self._summary = Summary(log, f"{self.name}: scheduling")

    def stop(self, *_args) -> None:
        """Finish the batch in hand (commit or requeue it), then return from :meth:`run`."""
        self._stopping = True

    def run(self) -> WorkerStats:
        self._load_nodes()
        empty = 0  # claims in a row that found nothing
        away = 0.0  # while Redis does not answer: the wait before trying again (0.1 s doubling to 5 s)
        while not self._stopping:
            try:
                self.maintain()
                away = 0.0
                if self.step():
                    empty = 0
                    continue
                empty += 1
                if empty > 1:  # idle (empty twice running, not just between two batches of a
                    self.report()  # trickle): the shared counts are current while nothing happens
                    self._summary.flush()
                if self.config.until_idle and self.idle():
                    break
                # Nothing to claim: wait until a script queues tasks (or the next upkeep),
                # blocked in Redis rather than polling it.
                self.app.queue.wait_for_work(self._last_maintain + self.config.maintain_every_s - time.monotonic())
            except (redis.ConnectionError, redis.TimeoutError) as exc:  # Redis away: keep trying, one line each
                away = min(away * 2, 5.0) if away else 0.1
                log.warning("%s: Redis did not answer (%s); trying again in %.1f s", self.name, exc, away)
                time.sleep(away)
            except Exception:  # keep serving: anything claimed comes back when its lease expires
                log.exception("%s: batch failed", self.name)
                time.sleep(self.config.idle_sleep_max_s)
        try:
            self._release_ahead()
            self.report()
            self._summary.flush(force=True)
        except Exception:
            log.exception("%s: could not hand back its next batch or report its last counts", self.name)
        return self.stats

    def _load_nodes(self) -> None:
        """Read every node before claiming anything (kube-scheduler's cache sync): the
        first batch's leases should not run while the whole cluster is being read."""
        if self.cache.seq >= 0:
            return
        try:
            self.cache.refresh()
        except Exception:  # Redis not there yet: the first batch loads them instead
            log.exception("%s: could not read the nodes", self.name)

    def maintain(self, force: bool = False) -> None:
        """Queue upkeep about every 100 ms; node health and global jobs about every second."""
        now = time.monotonic()
        if force or now - self._last_maintain >= self.config.maintain_every_s:
            self._last_maintain = now
            self.app.queue.maintain()
        if force or now - self._last_health >= self.config.health_every_s:
            self._last_health = now
            for name in heartbeat.check(self.app.store, self._watch):
                metrics.NODES_DOWN.inc()
                log.warning("%s: node %s marked down: its heartbeat lapsed; its tasks are replaced",
                            self.name, name, extra={"fields": {"node": name}})
            for job_id in reconcile.complete_fills(self.app.store):
                log.warning("%s: job %s: its submit stopped part way; the rest of its tasks are queued", self.name,
                            job_id, extra={"fields": {"job": job_id}})
            epoch = self.app.store.node_epoch()
            if epoch != self._seen_epoch:
                self._seen_epoch = epoch
                reconcile.reconcile_global(self.app.store)

    def idle(self) -> bool:
        """Nothing left that a worker could schedule: no active, backoff or in-flight tasks."""
        self.maintain(force=True)
        counts = self.app.queue.counts()
        return counts["active"] == 0 and counts["backoff"] == 0 and counts["inflight"] == 0

    # One batch.
    def step(self) -> int:
        """Claim, place, commit and requeue one batch; returns how many tasks it claimed."""
        app, cfg = self.app, self.config
        claim = self._claim()
        if not claim.task_ids:
            return 0
        preempted_before = self.stats.preempted
        groups = self._group(claim.task_ids)
        group_of = {task_id: group for group in groups for task_id in group.task_ids}
        failures: dict[str, dict] = {}
        conflicts: set[str] = set()  # refused at commit in the last round they were tried
        placed = refused_total = 0
        for attempt in range(cfg.commit_retries):
            if not groups:
                break
            nodes, counts, faults, quota, usage = self._refresh({group.spec.id for group in groups}, claim.now_ms,
                                                                quotas=True)
            seen = self.cache.seq
            # Placements go to the committer thread in chunks, so Redis applies one chunk
            # while this thread places the next (Redis works while Python does).
            sent: list[Future] = []
            plans: list[Planned] = []
            everywhere = self._view(nodes)
            for group, independent in _batches(groups, counts, faults):
                job_counts = {} if independent else counts[group.spec.id]
                spec = group.spec
                need = spec.gang - sum(job_counts.values()) if spec.gang and not independent else 0
                if need > 0 and len(group.task_ids) < need:  # part of a gang: it waits whole
                    for task_id in group.task_ids:
                        failures[task_id] = _gang_waits(spec, need, f"only {len(group.task_ids)} of its tasks were "
                                                                   f"claimed together; the rest are not waiting yet.",
                                                        len(nodes))
                        conflicts.add(task_id)
                    continue
                admitted, over = _admitted(self.app.keys.namespace, spec, len(group.task_ids), usage, quota)
                if need > 0 and admitted < need:
                    for task_id in group.task_ids:
                        failures[task_id] = _gang_waits(spec, need, over, len(nodes), {over.split(":")[0]: len(nodes) or 1})
                        conflicts.discard(task_id)
                    continue
                todo, refused_by_quota = group.task_ids[:admitted], group.task_ids[admitted:]
                for task_id in refused_by_quota:
                    failures[task_id] = {"nodes_evaluated": max(len(nodes), 1), "reasons": {over.split(":")[0]: max(len(nodes), 1)},
                                         "message": over}
                    conflicts.discard(task_id)
                if not todo:
                    continue
                if len(todo) != len(group.task_ids):
                    group = Group(group.spec, group.pin, group.nominated, todo, group.nominated_of)
                result = self._place(group, nodes, everywhere, job_counts, faults.get(spec.id), independent)
                if need > 0 and len(result.assignments) < need:  # the gang does not fit: nothing of it stays
                    self.placer.undo(nodes, spec, result.assignments, job_counts)
                    why = self.placer.explain(everywhere, spec, job_counts)
                    for task_id in group.task_ids:
                        failures[task_id] = _gang_waits(spec, need, f"{len(result.assignments)} could be placed "
                                                                   f"at once. {why.message()}", why.nodes_evaluated,
                                                        dict(why.reasons) or None)
                        conflicts.discard(task_id)
                    continue
                _use(usage, spec, len(result.assignments))
                for task_id, node in result.assignments:  # as the commit will: its room is no longer held
                    nodes[node].nominations.pop(task_id, None)
                plans += [Planned(task_id, node, group_of[task_id].spec, need > 0)
                          for task_id, node in result.assignments]
                for task_id in result.unplaced:
                    failures[task_id] = _explanation(result.explanation, len(nodes))
                    conflicts.discard(task_id)
                if len(plans) >= cfg.commit_chunk:
                    sent.append(self._committer.submit(self._commit, claim.token, plans))
                    plans = []
            if not sent and not plans:
                break
            if attempt == 0 and claim.waiting >= 2 * cfg.batch_size and not self._stopping:
                # Two more full batches wait: claim one now, so that its placement can start
                # as soon as this one is done (and the other is left for other workers).
                self._ahead = self._committer.submit(self._new_claim)
            # The last chunk is committed here: there is nothing left to place meanwhile.
            last = [self._commit(claim.token, plans)] if plans else []
            outcomes = [future.result() for future in sent] + last
            retry: list[tuple[Planned, str]] = []
            for outcome in outcomes:
                placed += len(outcome.accepted)
                for plan in outcome.accepted:  # refused in an earlier round, placed now: not a failure
                    failures.pop(plan.task_id, None)
                    conflicts.discard(plan.task_id)
                    nominated = group_of[plan.task_id].nomination(plan.task_id)
                    if nominated and nominated != plan.node:  # placed elsewhere: the room it held is free
                        self.app.store.unnominate(plan.task_id, nominated)
                refused_total += len(outcome.refused)
                self.cache.invalidate(plan.node for plan, _ in outcome.refused)
                self.cache.committed(outcome.changes, seen)
                retry += [(plan, reason) for plan, reason in outcome.refused if reason != reasons.STALE_LEASE]
            for plan, reason in retry:
                conflicts.add(plan.task_id)
                failures[plan.task_id] = {"nodes_evaluated": 1, "reasons": {reason: 1},
                                          "message": f"placement on {plan.node} refused at commit: {reason}."}
            # A stale lease means the task is no longer ours (reclaimed or stopped): drop it.
            groups = _regroup(groups, {plan.task_id for plan, _ in retry}) if retry else []
        if failures and self.preemptor is not None:
            self._preempt(claim, group_of, failures, conflicts)
        if failures:
            app.queue.fail(claim.token, list(failures.items()), conflicts)
        self._count(len(claim.task_ids), placed, refused_total, len(failures), self.stats.preempted - preempted_before)
        return len(claim.task_ids)

    def _commit(self, token: str, plans: list[Planned]):
        """One atomic commit, timed and counted (see workers/metrics.py)."""
        with metrics.timed(metrics.COMMIT_SECONDS):
            outcome = commit(self.app.scripts, self.app.keys, token, plans)
        created = []
        if metrics.enabled and outcome.accepted:  # only when scraped: one more round trip per commit
            created = self.app.store.created_ms([plan.task_id for plan in outcome.accepted])
        metrics.committed(outcome, created)
        return outcome

    def _claim(self):
        """The batch claimed ahead, if any, else a new claim."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return ahead.result()
        return self._new_claim()

    def _new_claim(self):
        cfg = self.config
        with metrics.timed(metrics.CLAIM_SECONDS):
            return self.app.queue.claim(cfg.batch_size, cfg.lease_ms, cfg.share_from,
                                        cfg.batch_size // 4 if cfg.keep_jobs_whole else 0,
                                        capacity=self._capacity(), window=cfg.fair_window)

    def _capacity(self) -> dict[str, int]:
        """The ready nodes' total capacity, the measure of tenants' shares in a claim:
        summed again when nodes join or leave and at most once per health check (a
        status change shows within a second), not per claim (O(nodes) each time)."""
        now = time.monotonic()
        if self._capacity_at[0] != self.cache.membership or now - self._capacity_at[1] >= self.config.health_every_s:
            capacity: dict[str, int] = {}
            for node in list(self.cache.nodes.values()):
                if node.status == READY:
                    for resource, amount in node.capacity.items():
                        capacity[resource] = capacity.get(resource, 0) + amount
            self._total_capacity, self._capacity_at = capacity, (self.cache.membership, now)
        return self._total_capacity

    def _release_ahead(self) -> None:
        """Hand back a batch claimed ahead that will not be worked on (the worker stops)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            claim = ahead.result()
            if claim.task_ids:
                self.app.queue.release(claim.token, claim.task_ids)

    def _view(self, nodes: dict[str, Node]) -> list[Node]:
        """Every node as one list, kept across rounds and updated in place: the placer's
        columns then rewrite only the rows of the nodes that changed."""
        replaced = self.cache.take_replaced()
        if (self._membership != self.cache.membership or len(self._everywhere) != len(nodes)
                or not replaced <= self._rows.keys()):
            self._membership = self.cache.membership
            self._everywhere = list(nodes.values())
            self._rows = {node.name: i for i, node in enumerate(self._everywhere)}
            replaced = set()  # a new list: the placer compares it object by object
        else:
            for name in replaced:
                self._everywhere[self._rows[name]] = nodes[name]
        self.placer.replaced(replaced)
        return self._everywhere

    def _place(self, group: Group, nodes: dict[str, Node], everywhere: list[Node], job_counts: dict[str, int],
               faults, independent: bool = False) -> Placement:
        """Place one group: a pinned group only on its node; a nominated group on its
        nominated node first (kube's fast path), then anywhere."""
        place = partial(self.placer.place, job=group.spec, job_counts=job_counts, faults=faults,
                        independent=independent)
        if group.pin:
            return place([nodes[group.pin]] if group.pin in nodes else [], task_ids=group.task_ids)
        if group.nominated_of:  # a gang that preempted: each member on its nominated node first
            assignments, rest = [], []
            by_node: dict[str, list[str]] = {}
            for task_id in group.task_ids:
                node = group.nominated_of.get(task_id, "")
                (by_node.setdefault(node, []) if node in nodes else rest).append(task_id)
            for node, task_ids in by_node.items():
                first = place([nodes[node]], task_ids=task_ids)
                assignments += first.assignments
                rest += first.unplaced
            if not rest:
                return Placement(assignments, [], None)
            others = place(everywhere, task_ids=rest)
            return Placement(assignments + others.assignments, others.unplaced, others.explanation)
        if group.nominated in nodes:
            first = place([nodes[group.nominated]], task_ids=group.task_ids)
            if not first.unplaced:
                return first
            rest = place(everywhere, task_ids=first.unplaced)
            return Placement(first.assignments + rest.assignments, rest.unplaced, rest.explanation)
        return place(everywhere, task_ids=group.task_ids)

    def _preempt(self, claim, group_of: dict[str, Group], failures: dict[str, dict], conflicts: set[str]) -> None:
        """For tasks that fit nowhere, try evicting lower-priority tasks; a preemptor that
        gets a node leaves ``failures`` (it is back in the queue, nominated). A gang that
        waits whole preempts whole (:meth:`_preempt_gang`): victims for all the members it
        needs at once, or none."""
        preemptor = self.preemptor
        lowest = preemptor.lowest_live_priority()
        now = time.monotonic()
        for task_id, explanation in list(failures.items()):  # no live task is low enough: say so
            spec = group_of[task_id].spec
            if task_id not in conflicts and spec.preempt != "never" and not preemptor.worth_trying(spec, lowest):
                failures[task_id] = _noted(explanation, f"preemption tried: no task runs at priority "
                                                        f"{spec.priority - preemptor.margin} or lower.")
        todo = [t for t in failures if t not in conflicts and preemptor.worth_trying(group_of[t].spec, lowest)
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
            nodes, counts, _, _, _ = self._refresh({group.spec.id}, claim.now_ms)
            if group.spec.gang and sum(counts[group.spec.id].values()) < group.spec.gang:
                # A member of a gang whose minimum is not running: never preempt for part of it.
                failures[task_id] = _noted(failures[task_id], "preemption not tried: its gang is not running "
                                                              "yet, and a gang preempts only as a whole.")
                continue
            candidates = ([nodes[group.pin]] if group.pin in nodes else []) if group.pin else list(nodes.values())
            search = preemptor.search(candidates, group.spec, counts[group.spec.id], task_id=task_id)
            if search.choice is not None:
                result = preemptor.apply(claim.token, task_id, group.spec, search)
                if result == "ok":
                    del failures[task_id]
                    if search.choice.victims:
                        self.stats.preempted += 1
                    nominated = group.nomination(task_id)
                    if nominated and nominated != search.choice.node:
                        self.app.store.unnominate(task_id, nominated)  # nominated anew elsewhere
                    continue
                # Lost a race (victims or node changed since the search): like a refused
                # commit, back off and search again soon rather than wait as unschedulable.
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
        nodes, counts, _, _, _ = self._refresh({spec.id}, claim.now_ms)
        need = spec.gang - sum(counts[spec.id].values())
        if need > len(members):  # cannot happen for a gang that waits whole; be safe
            for task_id in members:
                failures[task_id] = _noted(failures[task_id], "preemption not tried: not all of the gang's members "
                                                              "were claimed together.")
            return
        chosen = members[:need]
        candidates = ([nodes[group.pin]] if group.pin in nodes else []) if group.pin else list(nodes.values())
        search = preemptor.search_gang(candidates, spec, counts[spec.id], chosen)
        if search.choices is None:
            self._hopeless[_hope_key(group)] = now + 1.0
            note = search.message(spec, preemptor.margin)
            for task_id in members:
                failures[task_id] = _noted(failures[task_id], note)
            return
        result = preemptor.apply_gang(claim.token, spec, search)
        if result != "ok":  # lost a race: nothing was changed; back off and search again soon
            for task_id in members:
                conflicts.add(task_id)
                failures[task_id] = _noted(failures[task_id], f"gang preemption refused: {result}.")
            return
        if search.victims:
            self.stats.preempted += len(chosen)
        for task_id, choice in search.choices:
            del failures[task_id]
            nominated = group.nomination(task_id)
            if nominated and nominated != choice.node:
                self.app.store.unnominate(task_id, nominated)  # nominated anew elsewhere

    def _group(self, task_ids: list[str]) -> list[Group]:
        """Group claimed tasks by job, spec version and pinned node: each group is a set of
        identical tasks that the placement engine places from one node ordering."""
        store = self.app.store
        rows = store.claimed(task_ids)
        groups: dict[tuple, Group] = {}
        orphans = []
        run, tenant = 0, None  # runs of one tenant in claim order (claim.lua's fair order)
        for task_id, (job_id, version, pin, nominated, raw) in zip(task_ids, rows):
            if raw and job_id == task_id.rpartition(".")[0] and (job_id, int(version)) not in self._specs:
                self._keep(job_id, version, parse_stored(raw))
            spec = self._spec(job_id, version) if job_id and version else None
            if spec is None:
                orphans.append(task_id)
                continue
            if tenant is not None and spec.tenant != tenant:
                run += 1
            tenant = spec.tenant
            if spec.gang:  # one group: a gang is placed whole, each member nominated to its own node
                key = (run, job_id, int(version), pin or "", "")
                if key not in groups:
                    groups[key] = Group(spec, pin or "", "", [], {})
                if nominated:
                    groups[key].nominated_of[task_id] = nominated
            else:
                key = (run, job_id, int(version), pin or "", nominated or "")
                if key not in groups:
                    groups[key] = Group(spec, pin or "", nominated or "", [])
            groups[key].task_ids.append(task_id)
        if orphans:
            store.finish_ids(orphans, STOPPED, "its job no longer exists")
        return list(groups.values())

    def _keep(self, job_id: str, version, spec: JobSpec) -> None:
        if len(self._specs) >= 10_000:
            self._specs.clear()
        self._specs[(job_id, int(version))] = spec

    def _spec(self, job_id: str, version: str) -> JobSpec | None:
        key = (job_id, int(version))
        spec = self._specs.get(key)
        if spec is None:
            try:
                spec = self.app.store.job_spec(job_id, int(version))
            except NotFound:
                return None
            self._keep(job_id, version, spec)
        return spec

    def _refresh(self, job_ids: set[str], now_ms: int, quotas: bool = False):
        """The nodes brought up to date and, in the same round trip, the tasks of each job
        per node (for spread and max_per_node), its recent failures per node and (with
        ``quotas``) the namespace's quota and usage."""
        store, ordered = self.app.store, sorted(job_ids)
        since = now_ms - self.config.fault_window_ms

        def also(pipe):
            store.queue_job_tallies(pipe, ordered, since)
            if quotas:
                store.queue_quota_and_usage(pipe)

        nodes, replies = self.cache.refresh_with(now_ms, also)
        counts, faults = store.read_job_tallies(ordered, replies[0])
        quota, usage = store.read_quota_and_usage(replies[1:]) if quotas else ({}, {})
        return nodes, counts, faults, quota, usage

    def _count(self, claimed: int, placed: int, refused: int, unplaced: int, preempted: int) -> None:
        s = self.stats
        s.batches += 1
        s.claimed += claimed
        s.placed += placed
        s.refused += refused
        s.unplaced += unplaced
        for name, value in (("batches", 1), ("claimed", claimed), ("placed", placed), ("refused", refused),
                            ("unplaced", unplaced), ("preempted", preempted)):
            if value:
                self._unreported[name] += value
        metrics.batch(claimed, unplaced, preempted)
        self._summary.add(batches=1, placed=placed, refused=refused, unplaced=unplaced)
        if time.monotonic() - self._last_report >= self.config.report_every_s:
            self.report()

    def report(self) -> None:
        """Add the counts since the last report to the shared ``stats`` hash."""
        self._last_report = time.monotonic()
        if not self._unreported:
            return
        self.app.store.add_stats(self._unreported)
        self._unreported.clear()


def _hope_key(group: Group) -> tuple[str, str]:
    """What a fruitless preemption search is remembered by: the job and pinned node (a
    global job's task pinned elsewhere still gets its own search)."""
    return (group.spec.id, group.pin)


def _gang_waits(spec: JobSpec, need: int, why: str, nodes: int, found: dict[str, int] | None = None) -> dict:
    """The one explanation every task of a gang that waits carries."""
    message = gang_waits_message(spec, need, why)
    return {"nodes_evaluated": max(nodes, 1), "reasons": found or {"gang waits whole": 1}, "gang": spec.id,
            "message": message}


def _admitted(namespace: str, spec: JobSpec, count: int, usage: dict[str, int], quota: dict[str, int]):
    """How many of ``count`` tasks of ``spec`` the namespace's quota admits (the rule of
    ``fit.over_quota``, one task after another), and why the next one is refused."""
    if not quota:
        return count, ""
    used = dict(usage)
    for admitted in range(count):
        reason = over_quota(namespace, spec.resources, used, quota)
        if reason is not None:
            resource = reason.rsplit(" ", 2)[-2]
            have = used.get(resource, 0)
            need = 1 if resource == "tasks" else spec.resources.get(resource, 0)
            return admitted, (f"{reason}: {format_quantity(resource, have)}/{format_quantity(resource, quota[resource])} "
                              f"used, task needs {format_quantity(resource, need)}.")
        _use(used, spec, 1)
    return count, ""


def _use(usage: dict[str, int], spec: JobSpec, count: int) -> None:
    if count:
        for resource, amount in spec.resources.items():
            usage[resource] = usage.get(resource, 0) + amount * count
        usage["tasks"] = usage.get("tasks", 0) + count


def _noted(explanation: dict, note: str) -> dict:
    """An explanation with what preemption found added to it."""
    return {**explanation, "preemption": note, "message": f"{explanation['message']} {note}"}


def _explanation(explanation, nodes: int) -> dict:
    if explanation is None:
        return {"nodes_evaluated": nodes, "reasons": {}, "message": "no node had room in this batch."}
    return explanation.to_dict()


# Running a worker.
def repair_on_start(app: App, config: WorkerConfig) -> None:
    """``--repair-on-start``: make the namespace's bookkeeping agree with its tasks
    (``sched audit --repair``) before serving it. Off unless asked: the repair is not atomic
    with the commits of other workers already running (see docs/reliability.md)."""
    if not config.repair_on_start:
        return
    from scheduler.control.audit import repair

    try:
        done = repair(app.store)
    except Exception:
        log.exception("%s: the repair on start failed", app.keys.namespace)
        return
    if done["problems"]:
        log.warning("%s: repaired %d problem(s) on start: %s", app.keys.namespace, len(done["problems"]),
                    "; ".join(done["problems"][:5]))


def run_one(url: str, namespace: str, config: WorkerConfig, queue_config: QueueConfig | None = None,
            nodes: tuple[int, dict[str, Node]] | None = None) -> dict:
    """One worker loop in this process until SIGTERM or Ctrl-C (or idle, if configured);
    returns its stats. ``nodes``: every node as read by the parent, and the change
    sequence that copy is current at (see :meth:`NodeCache.adopt`)."""
    if not isinstance(namespace, str):  # several cells (a list; empty = every namespace): workers/cells.py
        from workers.cells import run_cells

        return run_cells(url, namespace, config, queue_config)
    stopped: list[int] = []  # SIGTERM while still waiting for Redis
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.append(1))
    wait_for_redis(url, stop=lambda: bool(stopped))  # a Redis not up yet is waited for, not a crash
    if stopped:
        return WorkerStats().as_dict()
    app = App(redis_url=url, namespace=namespace, queue_config=queue_config, wait_replicas=config.wait_replicas)
    repair_on_start(app, config)
    worker = SchedulerWorker(app, config)
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    log.info("%s started: namespace %s, Redis %s, %s", worker.name, namespace, app.display_url,
             f"metrics on :{config.metrics_port}/metrics" if config.metrics_port else "no metrics port",
             extra={"fields": {"namespace": namespace, "redis": app.display_url, "metrics_port": config.metrics_port,
                               "batch_size": config.batch_size, "pid": os.getpid()}})
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    if nodes is not None:
        worker.cache.adopt(*nodes)
    worker._load_nodes()
    # The process is the worker's own: what exists now (modules, the copy of the nodes) lives
    # as long as it does, and a full collection walking it stalls a batch for ~30 ms.
    gc.freeze()
    return worker.run().as_dict()

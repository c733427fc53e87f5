"""The scheduler worker: claim a batch, place it locally, commit it atomically, requeue the rest.

Workers are stateless and optimistic (Nomad's model): each plans against its own cached
copy of the nodes, and the Lua commit is the one serialised step that re-checks every
placement and may refuse some. Refused tasks are placed again against refreshed nodes,
up to ``commit_retries`` rounds, then go back to the queue with an explanation. A worker
that dies holds nothing but leases, which expire and are reclaimed by the others.

``sched worker --concurrency N`` runs N of these loops as N processes (see
``workers/supervisor.py``): placement is CPU-bound Python, so processes (not threads)
are what use more than one core.

The loop's parts live beside it: the groups of a batch and their order
(``workers/groups.py``), quota admission (``workers/admission.py``), preemption for what
fits nowhere (``workers/preempting.py``); ``workers/run.py`` starts it in a process.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import redis

from scheduler.control import (budgets, deadlines, dependencies, deployer, drains, evictions, heartbeat, periodic,
                               reconcile, retention)
from scheduler.control.outcomes import Outcomes
from scheduler.control.preemptor import Preemptor
from scheduler.control.rule_view import RuleView
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine import packing
from scheduler.engine.explanations import gang_waits_message
from scheduler.engine.placement import Placement, Placer
from scheduler.model import BINPACK, STOPPED, JobSpec, Node, reasons
from scheduler.model.errors import NotFound
from scheduler.state.app import App
from scheduler.state.commit import Planned, commit
from scheduler.state.node_cache import NodeCache
from scheduler.state.series import SAMPLE_EVERY_MS
from scheduler.state.upkeep import Upkeep
from scheduler.state.jobs import parse_stored
from scheduler.state.history import Record
from scheduler.state.memory import MEMORY_ERRORS
from scheduler.tools.logs import Summary
from workers import admission, metrics, rebalancing
from workers.groups import Group, batches, regroup
from workers.preempting import Preemption
from workers.stats import WorkerStats

__all__ = ["SchedulerWorker", "WorkerConfig"]

# Planned(...) runs a generated __new__ (defaults, keywords); a worker makes one per
# placement, and building the tuple directly costs half as much.
_planned = tuple.__new__

log = logging.getLogger("sched.worker")

MEMORY_EVERY_S = 10.0  # how often a worker reads Redis's memory


class SchedulerWorker:
    def __init__(self, app: App, config: WorkerConfig | None = None, name: str | None = None):
        self.app = app
        self.config = config or WorkerConfig()
        self.name = name or f"worker-{os.getpid()}"
        self.cache = NodeCache(app.store)
        self._loaded = False  # the refresh's script loaded and every node read (_load_nodes)
        self.placer = Placer(self.config.placement)
        self.preemptor = Preemptor(app.store, self._spec, self.config.preemption_margin) \
            if self.config.preemption else None
        self.stats = WorkerStats()
        self.rules = RuleView(app.store)  # for jobs with domain rules or labels
        self.preemption = Preemption(app, self.config, self.preemptor, self._refresh, self.cache.stamp, self.stats,
                                     self.rules) if self.preemptor is not None else None
        self._specs: dict[tuple[str, int], JobSpec] = {}
        self._stopping = False
        self._last_maintain = self._last_health = self._last_memory = 0.0
        self._memory_high = False  # this worker has warned that Redis memory passed 80% of maxmemory
        self._last_sample, self._sampling = 0.0, True
        # Node liveness as this worker has seen it; a gap of two health checks means a stall.
        self._watch = heartbeat.Watch(stall_gap_ms=int(max(heartbeat.STALL_GAP_MS, 2000 * self.config.health_every_s)))
        self._seen_epoch: str | None = None
        self._everywhere: list[Node] = []  # see _view
        self._rows: dict[str, int] = {}
        self._membership = -1
        self._ahead: Future | None = None  # the next batch, claimed while this one commits
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-commit")
        self._unreported: dict[str, int] = defaultdict(int)  # counts not yet in the stats hash
        self._last_report = time.monotonic()
        self._summary = Summary(log, f"{self.name}: scheduling")
        self._outcomes = Outcomes()  # what jobs came to, for dependencies, deadlines and periodic overlap

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
        first batch's leases should not run while the whole cluster is being read. The
        script each refresh queues is loaded here too. Once: a worker's process calls it
        before :meth:`run` does."""
        if self._loaded:
            return
        try:
            # Queued by its SHA on every refresh: loaded first, or the first refresh fails
            # and redis-py's error text alone (the whole command, a few keys per job) costs
            # milliseconds.
            self.app.scripts.load("tallies")
            if self.cache.seq < 0:
                self.cache.refresh()
            self._loaded = True
        except Exception:  # Redis not there yet: the first batch loads them instead
            log.exception("%s: could not read the nodes", self.name)

    def maintain(self, force: bool = False) -> None:
        """Queue upkeep, deployments, drains, moves and periodic launches about every 100 ms;
        node health, global jobs, disruption budgets, dependencies, deadlines and the
        workers' own rebalance about every second. Which parts have anything to look at is
        read first (``Store.upkeep``, with the queue's own look); the others are skipped."""
        now = time.monotonic()
        quick = force or now - self._last_maintain >= self.config.maintain_every_s
        health = force or now - self._last_health >= self.config.health_every_s
        store = self.app.store
        if quick:
            self._last_maintain = now
            _, replies = self.app.queue.maintain_with(store.queue_upkeep)
            due = store.read_upkeep(replies)
            if due.deployments:
                deployer.advance_all(store)
            if due.drains:
                for report in drains.advance_all(store):
                    metrics.DRAINED.inc(len(report["stopped"]))
            if due.moves:
                rebalancing.advance(store, self.name)
            if due.launches:
                periodic.launch_due(store, self._outcomes)
        if health:
            self._last_health = now
            if not quick:
                due = store.upkeep()
            if due.agents:
                for name in heartbeat.check(store, self._watch):
                    metrics.NODES_DOWN.inc()
                    log.warning("%s: node %s marked down: its heartbeat lapsed; its tasks are replaced",
                                self.name, name, extra={"fields": {"node": name}})
            else:  # no heartbeat to watch: the grace of the first agent starts with its first check
                self._watch.last_ok_ms = None
            if due.noexecute:
                for task_id in evictions.enforce(store):
                    log.warning("%s: task %s evicted by a NoExecute taint", self.name, task_id)
            if due.filling:
                for job_id in reconcile.complete_fills(store):
                    log.warning("%s: job %s: its submit stopped part way; the rest of its tasks are queued",
                                self.name, job_id, extra={"fields": {"job": job_id}})
            if due.node_epoch != self._seen_epoch:
                self._seen_epoch = due.node_epoch
                reconcile.reconcile_global(store)
            if due.budgets:
                budgets.count_due(store)
            if due.held:
                dependencies.release(store, self._outcomes)
            if due.deadlines:
                deadlines.expire(store, self._outcomes)
            if due.moves or due.moves_ended or due.rebalance_interval > 0:
                rebalancing.now_and_then(store, self.name)
            else:  # no move in progress, none to remove, no rebalance of the workers' own
                metrics.MOVES_IN_PROGRESS.set(0)
            self._retention(due)
        if now - self._last_sample >= SAMPLE_EVERY_MS / 1000 and self._sampling:
            self._last_sample = now
            self._sample()

    def _sample(self) -> None:
        """A sample of the namespace for the dashboard's charts (state/series.py): one per
        interval however many workers offer one. Not essential: a Redis user not allowed
        its script (set up by an older sched, before `sched acl sync`) stops offering."""
        try:
            self.app.store.sample(self.cache.ready_capacity)
        except redis.ResponseError as exc:
            if "NOPERM" not in str(exc):
                raise
            self._sampling = False
            log.warning("%s: no samples for the dashboard's charts: %s", self.name, exc)

    def _retention(self, due: Upkeep) -> None:
        """Remove ended work whose time has come (one bounded pass, if there is any and no
        other worker is making one), and watch Redis's memory."""
        clock, store = self.app.clock, self.app.store
        # On a virtual clock (a replay) its time says what is due, and each pass is whole:
        # what is removed when then follows the trace, not the speed of the machine.
        done = None
        if due.retention_due(clock() if clock is not None else None):
            done = retention.upkeep(store, None, clock(), due.retention) if clock is not None \
                else retention.upkeep(store, retention=due.retention)
        if done is not None and (done.jobs_removed or done.tasks_removed):
            metrics.GC_JOBS_REMOVED.inc(len(done.jobs_removed))
            metrics.GC_TASKS_REMOVED.inc(done.tasks_removed + done.job_tasks_removed)
            log.debug("%s: retention removed %d job(s) and %d ended task(s)", self.name, len(done.jobs_removed),
                      done.tasks_removed + done.job_tasks_removed)
        if time.monotonic() - self._last_memory >= MEMORY_EVERY_S:
            self._last_memory = time.monotonic()
            self._watch_memory()

    def _watch_memory(self) -> None:
        """Warn once (log, metric, and a note in the namespace's history) when Redis's used
        memory passes 80% of maxmemory: at 100% every write fails (noeviction)."""
        store = self.app.store
        try:
            memory = store.redis_memory()
        except MEMORY_ERRORS:
            return  # a role without INFO: nothing to watch
        metrics.REDIS_USED_MEMORY.set(memory["used_memory"])
        metrics.REDIS_MAXMEMORY.set(memory["maxmemory"])
        high = store.memory_high(memory)
        if high and not self._memory_high:
            self._memory_high = True
            metrics.REDIS_MEMORY_HIGH.set(1)
            share = memory["used_memory"] / memory["maxmemory"]
            log.warning("%s: Redis uses %.0f%% of its maxmemory (%d of %d bytes): at 100%% every write fails; "
                        "shorten retention (`sched config set job_retention ...`) or give Redis more memory",
                        self.name, 100 * share, memory["used_memory"], memory["maxmemory"])
            if store.first_to_warn():
                store.record_history([Record("memory-high", None, details={
                    "used_memory": memory["used_memory"], "maxmemory": memory["maxmemory"]})])
        elif high is False and self._memory_high:
            self._memory_high = False
            metrics.REDIS_MEMORY_HIGH.set(0)
            store.memory_back_under()

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
            domains = self.rules.begin([group.spec for group in groups])
            nodes, counts, faults, quota, usage = self._refresh({group.spec.id for group in groups}, claim.now_ms,
                                                                quotas=True, domains=domains)
            seen = self.cache.seq
            # Placements go to the committer thread in chunks, so Redis applies one chunk
            # while this thread places the next (Redis works while Python does).
            sent: list[Future] = []
            plans: list[Planned] = []
            everywhere = self._view(nodes)
            self.placer.open_for(everywhere, packing.demand((group.spec, len(group.task_ids)) for group in groups
                                                            if group.spec.strategy == BINPACK))
            for group, independent in batches(groups, counts, faults, self._capacity()):
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
                admitted, over = admission.admit(self.app.keys.namespace, spec, len(group.task_ids), usage, quota)
                waits_its_turn = False
                if spec.parallelism and not independent:  # at most so many live at once: the rest wait
                    allowed, why = admission.within_parallelism(spec, admitted, sum(job_counts.values()))
                    if allowed < admitted:
                        admitted, over, waits_its_turn = allowed, why, True
                if need > 0 and admitted < need:
                    for task_id in group.task_ids:
                        failures[task_id] = _gang_waits(spec, need, over, len(nodes), {over.split(":")[0]: len(nodes) or 1})
                        failures[task_id]["admission"] = True
                        conflicts.discard(task_id)
                    continue
                todo, refused_by_quota = group.task_ids[:admitted], group.task_ids[admitted:]
                for task_id in refused_by_quota:
                    # Held back by the quota or its job's parallelism, not by room: no eviction
                    # lets it run sooner (kube never preempts for a quota either).
                    failures[task_id] = {"nodes_evaluated": max(len(nodes), 1), "reasons": {over.split(":")[0]: max(len(nodes), 1)},
                                         "message": over, "admission": True}
                    if waits_its_turn:
                        failures[task_id]["parallelism"] = spec.parallelism
                    conflicts.discard(task_id)
                if not todo:
                    continue
                if len(todo) != len(group.task_ids):
                    group = Group(group.spec, group.pin, group.nominated, todo, group.nominated_of)
                rules = self.rules.rules(spec, everywhere, self.placer) if spec.rules else None
                result = self._place(group, nodes, everywhere, job_counts, faults.get(spec.id), independent, rules)
                if need > 0 and len(result.assignments) < need:  # the gang does not fit: nothing of it stays
                    self.placer.undo(nodes, spec, result.assignments, job_counts)
                    if rules is not None and rules.counted:
                        for _, name in result.assignments:
                            self.rules.counts.add(spec.id, nodes[name], -1)
                    why = self.placer.explain(everywhere, spec, job_counts, rules, self.rules.counts)
                    for task_id in group.task_ids:
                        failures[task_id] = _gang_waits(spec, need, f"{len(result.assignments)} could be placed "
                                                                   f"at once. {why.message()}", why.nodes_evaluated,
                                                        dict(why.reasons) or None)
                        conflicts.discard(task_id)
                    continue
                admission.use(usage, spec, len(result.assignments))
                for task_id, node in result.assignments:  # as the commit will: its room is no longer held
                    nodes[node].nominations.pop(task_id, None)
                gang = need > 0
                # Each task's own spec: one-task jobs of one shape are placed as one group.
                plans += [_planned(Planned, (task_id, node, group_of[task_id].spec, gang, rules))
                          for task_id, node in result.assignments]
                for task_id in result.unplaced:
                    failures[task_id] = _explanation(result.explanation, len(nodes))
                    conflicts.discard(task_id)
                # At most commit_chunk placements per call, so that no commit holds Redis for
                # long (one-task jobs of one shape are one group of a whole batch). What was
                # waiting is under a chunk, so the first chunk holds it whole; a gang is kept
                # in one call with what waited before it.
                chunk = len(plans) if gang else cfg.commit_chunk
                while len(plans) >= cfg.commit_chunk:
                    sent.append(self._send(claim.token, plans[:chunk]))
                    plans = plans[chunk:]
            if not sent and not plans:
                break
            if attempt == 0 and claim.waiting >= 2 * cfg.batch_size and cfg.overlap and not self._stopping:
                # Two more full batches wait: claim one now, so that its placement can start
                # as soon as this one is done (and the other is left for other workers).
                self._ahead = self._committer.submit(self._new_claim)
            # The last chunk is committed here: there is nothing left to place meanwhile.
            last = [self._commit(claim.token, plans)] if plans else []
            outcomes = [future.result() for future in sent] + last
            retry: list[tuple[Planned, str]] = []
            for outcome in outcomes:
                placed += len(outcome.accepted)
                for plan in outcome.accepted:
                    if failures or conflicts:  # refused in an earlier round, placed now: not a failure
                        failures.pop(plan.task_id, None)
                        conflicts.discard(plan.task_id)
                    of = group_of[plan.task_id]
                    if not of.nominated and not of.nominated_of:
                        continue
                    nominated = of.nomination(plan.task_id)
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
            groups = regroup(groups, {plan.task_id for plan, _ in retry}) if retry else []
        if failures and self.preemption is not None:
            self.preemption.preempt(claim, group_of, failures, conflicts)
        if failures:
            app.queue.fail(claim.token, list(failures.items()), conflicts)
        self._count(len(claim.task_ids), placed, refused_total, len(failures), self.stats.preempted - preempted_before)
        return len(claim.task_ids)

    def _send(self, token: str, plans: list[Planned]) -> Future:
        """Commit a chunk: in the committer thread while the next is placed (``overlap``),
        else here and now."""
        if self.config.overlap:
            return self._committer.submit(self._commit, token, plans)
        done: Future = Future()
        done.set_result(self._commit(token, plans))
        return done

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
        """The ready nodes' total capacity, the measure of tenants' shares in a claim
        (kept by the node cache as it reads nodes)."""
        return self.cache.ready_capacity

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
        replaced, changed = self.cache.take_replaced(), self.cache.take_changed()
        if (self._membership != self.cache.membership or len(self._everywhere) != len(nodes)
                or not replaced <= self._rows.keys()):
            self._membership = self.cache.membership
            self._everywhere = list(nodes.values())
            self._rows = {node.name: i for i, node in enumerate(self._everywhere)}
            replaced = changed = set()  # a new list: the placer lays it out anew
        else:
            for name in replaced:
                self._everywhere[self._rows[name]] = nodes[name]
        self.placer.replaced(replaced, changed)
        self.placer.tainted = [nodes[name] for name in self.cache.tainted if name in nodes]
        return self._everywhere

    def _place(self, group: Group, nodes: dict[str, Node], everywhere: list[Node], job_counts: dict[str, int],
               faults, independent: bool = False, rules=None) -> Placement:
        """Place one group: a pinned group only on its node; a nominated group on its
        nominated node first (kube's fast path), then anywhere."""
        place = partial(self.placer.place, job=group.spec, job_counts=job_counts, faults=faults,
                        independent=independent, **({"rules": rules, "domains": self.rules.counts} if rules else {}))
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

    def _group(self, task_ids: list[str]) -> list[Group]:
        """Group claimed tasks by job, spec version and pinned node: each group is a set of
        identical tasks that the placement engine places from one node ordering."""
        store = self.app.store
        rows = store.claimed(task_ids)
        groups: dict[tuple, Group] = {}
        orphans = []
        run, tenant = 0, None  # runs of one tenant in claim order (claim.lua's fair order)
        # A claim takes a job's tasks together: a task like the one before it (same job,
        # version, pin and nomination) joins that task's group without looking it up again.
        last: tuple = ()
        last_group: Group | None = None
        for task_id, (job_id, version, pin, nominated, raw) in zip(task_ids, rows):
            if (job_id, version, pin, nominated) == last and not raw:
                if last_group is None:
                    orphans.append(task_id)
                    continue
                if last_group.nominated_of is not None and nominated:
                    last_group.nominated_of[task_id] = nominated
                last_group.task_ids.append(task_id)
                continue
            last, last_group = (job_id, version, pin, nominated), None
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
            last_group = groups[key]
            last_group.task_ids.append(task_id)
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

    def _refresh(self, job_ids: set[str], now_ms: int, quotas: bool = False, domains: list[str] | None = None):
        """The nodes brought up to date and, in the same round trip, the tasks of each job
        per node (for spread and max_per_node), its recent failures per node, (with
        ``quotas``) the namespace's quota and usage and (with ``domains``) those jobs'
        tasks per topology domain, kept in :attr:`rules`."""
        store, ordered = self.app.store, sorted(job_ids)
        since = now_ms - self.config.fault_window_ms

        def also(pipe):
            store.queue_job_tallies(pipe, ordered, since)
            if quotas:
                store.queue_quota_and_usage(pipe)
            if domains:
                store.queue_domain_counts(pipe, domains)

        nodes, replies = self.cache.refresh_with(now_ms, also)
        counts, faults = store.read_job_tallies(ordered, replies[0])
        quota, usage = store.read_quota_and_usage(replies[1:3]) if quotas else ({}, {})
        if domains:
            self.rules.read(store.read_domain_counts(domains, replies[-len(domains):]))
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


def _gang_waits(spec: JobSpec, need: int, why: str, nodes: int, found: dict[str, int] | None = None) -> dict:
    """The one explanation every task of a gang that waits carries."""
    message = gang_waits_message(spec, need, why)
    return {"nodes_evaluated": max(nodes, 1), "reasons": found or {"gang waits whole": 1}, "gang": spec.id,
            "message": message}


def _explanation(explanation, nodes: int) -> dict:
    if explanation is None:
        return {"nodes_evaluated": nodes, "reasons": {}, "message": "no node had room in this batch."}
    return explanation.to_dict()

"""The one place that builds Redis key names.

Every key of a namespace carries the hash tag ``{ns}``, so a namespace lives in one
Redis Cluster slot (multi-key Lua scripts stay legal) while namespaces spread out.
Names are plain and readable, for ``redis-cli``: ``sched:{default}:q:active``.
"""

from __future__ import annotations

from functools import cached_property

from scheduler.model.names import check_namespace


class Keys:
    def __init__(self, namespace: str = "default"):
        self.namespace = check_namespace(namespace)  # a SpecError (one sentence) when not valid
        self.prefix = f"sched:{{{namespace}}}:"

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # The scheduling queue (see queue.py for how tasks move between these).
    @cached_property
    def active(self) -> str:
        return self._key("q", "active")

    @cached_property
    def backoff(self) -> str:
        return self._key("q", "backoff")

    @cached_property
    def unschedulable(self) -> str:
        return self._key("q", "unschedulable")

    @cached_property
    def inflight(self) -> str:
        return self._key("q", "inflight")

    @cached_property
    def waiting(self) -> str:
        """ZSET of the pending tasks of jobs held by their ``after`` dependencies, scored as
        in ``q:active`` (where they go, unchanged, once the dependencies hold)."""
        return self._key("q", "waiting")

    @cached_property
    def leases(self) -> str:
        """HASH task id -> fencing token of the claim that holds it."""
        return self._key("q", "leases")

    @cached_property
    def enqueue_seq(self) -> str:
        """Counter giving each new task its place among tasks of the same priority."""
        return self._key("q", "seq")

    @cached_property
    def cycle(self) -> str:
        """Counter of claims (kube's schedulingCycle); each claim's value is its fencing token."""
        return self._key("q", "cycle")

    @cached_property
    def move_cycle(self) -> str:
        """The cycle at the last cluster event (kube's moveRequestCycle)."""
        return self._key("q", "move_cycle")

    @cached_property
    def moved_cycle(self) -> str:
        """The move_cycle whose unschedulable tasks have been moved back (by any worker)."""
        return self._key("q", "moved_cycle")

    @cached_property
    def wake(self) -> str:
        """LIST of tokens: a script that makes tasks claimable pushes one, and an idle
        worker waits on it (``BLPOP``) instead of polling the queue."""
        return self._key("q", "wake")

    # Nodes.
    @cached_property
    def nodes(self) -> str:
        return self._key("nodes")

    @cached_property
    def node_changes(self) -> str:
        """ZSET node -> sequence number of its last change: the worker caches' change feed."""
        return self._key("nodes", "changes")

    @cached_property
    def node_seq(self) -> str:
        return self._key("nodes", "seq")

    @cached_property
    def node_deltas(self) -> str:
        """ZSET of what each commit did to each node, scored by its change sequence: other
        workers apply these instead of re-reading the node."""
        return self._key("nodes", "deltas")

    @cached_property
    def resources(self) -> str:
        """SET of every resource name some node has (cpu, memory, gpu...)."""
        return self._key("resources")

    def node(self, name: str) -> str:
        return f"{self.prefix}node:{name}"  # written out: a few calls per placement

    def node_tasks(self, name: str) -> str:
        """SET of the live (assigned or running) task ids on a node."""
        return f"{self.prefix}node:{name}:tasks"

    @cached_property
    def agents(self) -> str:
        """SET of nodes run by an agent: only these go down when their heartbeat lapses."""
        return self._key("agents")

    @cached_property
    def agent_ttls(self) -> str:
        """HASH node -> the TTL (ms) its agent gives its heartbeat: how long a heartbeat
        checker waits, after it first sees the heartbeat missing, before the node is down."""
        return self._key("agents", "ttl")

    @cached_property
    def node_epoch(self) -> str:
        """Counter bumped when a node is added, changed or removed (not by placements):
        tells reconcilers that global jobs may need tasks added or taken away."""
        return self._key("nodes", "epoch")

    @cached_property
    def nodes_noexecute(self) -> str:
        """SET: nodes with a NoExecute taint (the evictions look at these)."""
        return self._key("nodes", "noexecute")

    def heartbeat(self, name: str) -> str:
        return self._key("node", name, "heartbeat")

    def node_history(self, name: str) -> str:
        """LIST of who paused, drained or activated the node, oldest first (history.lua)."""
        return self._key("node", name, "history")

    # Jobs and tasks.
    @cached_property
    def jobs(self) -> str:
        return self._key("jobs")

    @cached_property
    def jobs_by_id(self) -> str:
        """Every job id in a ZSET of score 0: lists of jobs are read a page at a time, in
        id order (ZRANGE BYLEX), from it."""
        return self._key("jobs:byid")

    @cached_property
    def global_jobs(self) -> str:
        """SET of the ids of global jobs (the ones node changes may give or take tasks)."""
        return self._key("jobs", "global")

    @cached_property
    def filling(self) -> str:
        """ZSET job id -> when a submit began queueing more tasks than one call takes (ms);
        the job hash holds a ``filling:<version>:<first index>`` field until they all exist."""
        return self._key("jobs", "filling")

    @cached_property
    def held(self) -> str:
        """ZSET job id -> when it began waiting for its ``after`` dependencies (ms): the
        jobs the workers' upkeep checks (control/dependencies.py)."""
        return self._key("jobs", "held")

    @cached_property
    def deadlines(self) -> str:
        """ZSET job id -> when its ``deadline`` passes (ms): batch jobs stopped then if still running."""
        return self._key("jobs", "deadlines")

    @cached_property
    def launchers(self) -> str:
        """ZSET periodic job id -> its next launch (ms; +inf while suspended or when its
        schedule has no more ticks): the launcher's heap (control/periodic.py)."""
        return self._key("jobs", "periodic")

    def job_children(self, job_id: str) -> str:
        """ZSET child job id -> when it was launched (ms): a periodic or parameterized job's launches."""
        return self._key("job", job_id, "children")

    def dispatch_tokens(self, job_id: str) -> str:
        """HASH idempotency token -> the child job a dispatch with it made."""
        return self._key("job", job_id, "tokens")

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def job_tasks(self, job_id: str) -> str:
        """ZSET task id -> its index in the job (scale down stops the newest first)."""
        return f"{self.prefix}job:{job_id}:tasks"

    def job_history(self, job_id: str) -> str:
        """LIST of who submitted, scaled, stopped or reverted the job, oldest first (history.lua)."""
        return self._key("job", job_id, "history")

    def task(self, task_id: str) -> str:
        return f"{self.prefix}task:{task_id}"

    def task_output(self, task_id: str) -> str:
        """HASH of what the task printed (see scheduler/control/output.py)."""
        return self._key("task", task_id, "output")

    # Deployments (see deployments.py).
    @cached_property
    def deployments(self) -> str:
        """ZSET deployment id -> when it was opened (ms): every deployment, for listing."""
        return self._key("deployments")

    @cached_property
    def active_deployments(self) -> str:
        """ZSET deployment id -> when it was opened (ms): the ones workers still advance."""
        return self._key("deployments", "active")

    def deployment(self, deployment_id: str) -> str:
        """HASH of one deployment: ``<job>@<version>``, the version it rolls out."""
        return self._key("deployment", deployment_id)

    def job_deployments(self, job_id: str) -> str:
        """ZSET deployment id -> the version it rolls out: a job's deployments."""
        return self._key("job", job_id, "deployments")

    # Moves (sched rebalance; moves.py).
    @cached_property
    def moves(self) -> str:
        """ZSET move id -> plan * 10000 + its index in the plan: every move kept, in order."""
        return self._key("moves")

    @cached_property
    def moves_active(self) -> str:
        """ZSET of the moves in progress, scored as in ``moves``: the ones workers advance."""
        return self._key("moves", "active")

    @cached_property
    def moves_tasks(self) -> str:
        """HASH task id -> the move in progress it belongs to (the task it moves, and its new task)."""
        return self._key("moves", "tasks")

    @cached_property
    def moves_ended(self) -> str:
        """ZSET move id -> when it ended (ms): what retention removes once old."""
        return self._key("moves", "ended")

    def move(self, move_id: str) -> str:
        """HASH of one move, ``<plan>-<index>``."""
        return self._key("move", move_id)

    @cached_property
    def rebalance(self) -> str:
        """HASH: ``plans`` (the last plan's id) and ``last_run`` (ms: the workers' own last rebalance)."""
        return self._key("rebalance")

    def task_attempts(self, task_id: str) -> str:
        """LIST of the outcomes of the task's failed placement attempts, oldest first (fail.lua)."""
        return self._key("task", task_id, "attempts")

    # Disruption budgets (budgets.py) and drains (drains.py).
    @cached_property
    def budgets(self) -> str:
        """ZSET job id -> when its disruption budget was last counted (ms; 0: not yet): the
        jobs with a budget, which the workers' upkeep counts."""
        return self._key("jobs", "budgets")

    def budget(self, job_id: str) -> str:
        """HASH: the job's disruption budget as last counted, less the disruptions since
        (expected, healthy, desired, checked, budget, counted_at, evictions)."""
        return self._key("budget", job_id)

    def budget_disrupted(self, job_id: str) -> str:
        """ZSET task id -> when its disruption was granted or counted (ms): kube's
        DisruptedPods, until a later count has seen the task end."""
        return self._key("budget", job_id, "disrupted")

    @cached_property
    def drains(self) -> str:
        """HASH node -> when its drain began (ms): the drains in progress, which the
        workers' upkeep advances."""
        return self._key("nodes", "drains")

    def drain(self, name: str) -> str:
        """HASH: the node's last drain (state, deadline, force, what it waits for...)."""
        return self._key("drain", name)

    # Retention (scheduler/control/retention.py; docs/redis-keys.md, Retention).
    @cached_property
    def ended(self) -> str:
        """ZSET task id -> when it ended (ms): tasks that ended since the workers' upkeep
        last looked (every script that ends a task adds it; gc_note.lua takes it out)."""
        return self._key("tasks", "ended")

    def job_ended(self, job_id: str) -> str:
        """ZSET task id -> when it ended (ms; ``inf`` for a batch or sysbatch job's slot
        outcome, kept with its job): the job's ended tasks, as counted by the upkeep."""
        return self._key("job", job_id, "ended")

    def job_holds(self, job_id: str) -> str:
        """SET of what still needs the job (for instance a job that waits for it): a job
        with a member here is not removed."""
        return self._key("job", job_id, "holds")

    @cached_property
    def jobs_ended(self) -> str:
        """ZSET job id -> when retention next has to look at its ended tasks (ms; 0: now)."""
        return self._key("jobs", "ended")

    @cached_property
    def jobs_finished(self) -> str:
        """ZSET job id -> when it finished (ms): finished jobs kept for the namespace's
        ``job_retention``."""
        return self._key("jobs", "finished")

    @cached_property
    def jobs_expiring(self) -> str:
        """ZSET job id -> when it is removed (ms): finished jobs with a ``ttl_after_finished``."""
        return self._key("jobs", "expiring")

    @cached_property
    def layout(self) -> str:
        """STRING: the version of the namespace's key layout (scheduler/state/layout.py)."""
        return self._key("layout")

    def task_keys(self, task_id: str) -> list[str]:
        """Every key that belongs to one task alone: removed with it."""
        return [self.task(task_id), self.task_output(task_id), self.task_attempts(task_id)]

    def job_keys(self, job_id: str) -> list[str]:
        """Every key that belongs to one job alone (its tasks' and deployments' apart):
        removed with it by ``gc_job.lua``, whatever its type. A feature that gives a job a
        key of its own adds it here; the first five are in this order for gc_job.lua."""
        return [self.job(job_id), self.job_tasks(job_id), self.job_ended(job_id), self.job_deployments(job_id),
                self.job_holds(job_id), self.job_history(job_id), self.faults(job_id), self.tally_job(job_id),
                self.tally_dom(job_id), self.job_children(job_id), self.dispatch_tokens(job_id),
                self.budget(job_id), self.budget_disrupted(job_id)]

    @cached_property
    def job_indexes(self) -> list[str]:
        """Every key of the namespace that holds job ids as members (SET, ZSET) or fields
        (HASH): the job's id is taken out of each when it is removed. A feature that keeps
        a new index of jobs adds it here; the first ten are in this order for gc_job.lua."""
        return [self.jobs, self.global_jobs, self.job_shares, self.filling, self.jobs_ended, self.jobs_finished,
                self.jobs_expiring, self.job_labels, self.job_anti, self.held, self.deadlines, self.launchers,
                self.jobs_by_id, self.budgets]

    def node_keys(self, name: str) -> list[str]:
        """Every key that belongs to one node alone: removed with it (``node_rm.lua``)."""
        return [self.node(name), self.node_tasks(name), self.heartbeat(name), self.node_history(name), self.drain(name)]

    @cached_property
    def node_indexes(self) -> list[str]:
        """Every key that holds node names as members or fields, the change feed
        (``nodes:changes``) apart: the name is taken out of each when the node is removed."""
        return [self.nodes, self.agents, self.agent_ttls, self.drains]

    def faults(self, job_id: str) -> str:
        """ZSET "node|task" -> failure time (ms): faulty-node detection per job."""
        return f"{self.prefix}faults:{job_id}"

    # Tallies kept by the Lua commit and release.
    def tally_job(self, job_id: str) -> str:
        return f"{self.prefix}tally:job:{job_id}"

    def tally_dom(self, job_id: str) -> str:
        """HASH ``<attribute>=<value>`` (and ``*``) -> live tasks of a job counted by topology
        domain (only jobs with labels or domain rules: scheduler/model/domains.py)."""
        return f"{self.prefix}tally:dom:{job_id}"

    @cached_property
    def rules_gen(self) -> str:
        """Counter bumped whenever jobs:labels or jobs:anti changes: a placement whose
        selectors were resolved before is refused at commit."""
        return self._key("rules", "gen")

    @cached_property
    def job_labels(self) -> str:
        """HASH job -> its labels (JSON), for jobs with labels: what selectors match."""
        return self._key("jobs", "labels")

    @cached_property
    def job_anti(self) -> str:
        """HASH job -> its required job_anti_affinity entries (JSON), which keep other jobs away too."""
        return self._key("jobs", "anti")

    @cached_property
    def tally_priority(self) -> str:
        """HASH priority -> live tasks at that priority (is anything low enough to preempt?)."""
        return self._key("tally", "priority")

    @cached_property
    def usage(self) -> str:
        """HASH of what live tasks hold, kept by commit.lua and released by finish.lua and
        preempt.lua: ``<resource>`` and ``tasks`` for the namespace, ``tenant:<name>:<resource>``
        and ``tenant:<name>:tasks`` per tenant."""
        return self._key("usage")

    @cached_property
    def quota(self) -> str:
        """HASH resource (or ``tasks``) -> the namespace's limit (``sched quota set``)."""
        return self._key("quota")

    @cached_property
    def tenants(self) -> str:
        """HASH tenant -> weight (``sched tenant set``); unlisted tenants weigh 1."""
        return self._key("tenants")

    @cached_property
    def history(self) -> str:
        """LIST of who changed the namespace's quota or tenant weights, oldest first (history.lua)."""
        return self._key("history")

    @cached_property
    def job_shares(self) -> str:
        """HASH job id -> ``tenant|gang size|cpu=500,memory=...`` (one task's needs): what
        claim.lua needs to order claims by dominant share and keep gangs whole."""
        return self._key("jobs", "shares")

    @cached_property
    def stats(self) -> str:
        """HASH of counters the workers keep (placed, refused, unplaced, batches...)."""
        return self._key("stats")

    def lock(self, name: str) -> str:
        return self._key("lock", name)

    # Events and agents.
    @cached_property
    def events(self) -> str:
        """The pub/sub channel every change is announced on."""
        return self._key("events")

    @cached_property
    def stream(self) -> str:
        """STREAM of the same announcements, kept to a bound (see stream.py)."""
        return self._key("stream")

    @cached_property
    def config(self) -> str:
        """HASH of the namespace's settings kept in Redis: ``stream_maxlen`` and the
        retention settings (scheduler/model/retention.py)."""
        return self._key("config")

    @cached_property
    def series(self) -> str:
        """LIST of samples of the namespace over time, for the dashboard's charts (series.py)."""
        return self._key("series")

    @cached_property
    def pools(self) -> str:
        """HASH pool name -> the pool as JSON: the catalogue of node shapes ``sched capacity``
        scales by (pools.py; at most ``MOST_POOLS``)."""
        return self._key("pools")

    @cached_property
    def capacity(self) -> str:
        """HASH of the last capacity answer and what its hooks did (capacity.py): ``last``,
        ``digest``, ``at``, ``unneeded``, ``up_at``, ``down_at``."""
        return self._key("capacity")

    @cached_property
    def restoring(self) -> str:
        """STRING naming the snapshot a restore is writing into the namespace (snapshots.py)."""
        return self._key("restoring")

    def rq_queue_name(self, node: str) -> str:
        """The RQ queue a node's agent works from (RQ adds its own ``rq:queue:`` prefix)."""
        return f"sched-{self.namespace}-{node}"

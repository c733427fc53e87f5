"""Invariant checks over one namespace's state in Redis.

The properties the scheduler promises, checked from the outside by reading everything:
no node is overcommitted (in a resource, or in task slots: a node whose agent has slots
holds no more live tasks than that); a node's allocation is exactly the sum of its live tasks'
allocations; host ports, task counts and every tally agree with the tasks; and every
task is in exactly one place (one queue while pending, no queue once placed or ended).
The tests and ``sched bench`` both use it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from scheduler.model import LIVE_STATES, PENDING
from scheduler.model.domains import TOTAL
from scheduler.state.replication import namespace_replicas
from scheduler.state.store import Store


@dataclass
class AuditReport:
    tasks: int = 0
    overcommits: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said, but not a broken invariant
    states: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < 200:
            self.problems.append(text)


def audit(store: Store) -> AuditReport:
    report = AuditReport()
    nodes = {n.name: n for n in store.nodes()}
    tasks = store.tasks(store.all_task_ids())
    report.tasks = len(tasks)
    tallies = store.tallies(list(nodes), store.job_ids())
    queues = tallies.queues

    allocated: dict[str, Counter] = defaultdict(Counter)
    live_ids: dict[str, set[str]] = defaultdict(set)
    ports: dict[str, dict[int, str]] = defaultdict(dict)
    per_job: dict[str, Counter] = defaultdict(Counter)
    per_domain: dict[str, Counter] = defaultdict(Counter)
    for task in tasks:
        state, task_id = task.state, task.id
        report.states[state] += 1
        where = [name for name, members in queues.items() if task_id in members]
        if state == PENDING and len(where) != 1:
            report.problem(f"pending task {task_id} is in {len(where)} queues ({', '.join(where) or 'none'})")
        if state != PENDING and where:
            report.problem(f"{state} task {task_id} is still in {', '.join(where)}")
        if state in LIVE_STATES:
            node = task.node
            if node not in nodes:
                report.problem(f"{state} task {task_id} is on unknown node {node!r}")
                continue
            allocated[node].update(task.allocated)
            live_ids[node].add(task_id)
            per_job[task.job][node] += 1
            if task.domains is not None:
                per_domain[task.job].update((*task.domains, TOTAL))
            for port in task.ports:
                if port in ports[node]:
                    report.problem(f"host port {port} on {node} held by {ports[node][port]} and {task_id}")
                ports[node][port] = task_id

    for name, node in nodes.items():
        members = tallies.node_tasks.get(name, set())
        for resource, capacity in node.capacity.items():
            used = node.allocated.get(resource, 0)
            if used > capacity:
                report.overcommits += 1
                report.problem(f"node {name} overcommitted: {resource} {used} > {capacity}")
        for resource in set(node.allocated) | set(allocated[name]):
            if node.allocated.get(resource, 0) != allocated[name].get(resource, 0):
                report.problem(f"node {name} {resource} allocated {node.allocated.get(resource, 0)} "
                               f"but its tasks hold {allocated[name].get(resource, 0)}")
        if node.ports != ports[name]:
            report.problem(f"node {name} host ports {sorted(node.ports)} differ from its tasks' {sorted(ports[name])}")
        count = len(live_ids[name])
        if node.slots and count > node.slots:
            report.overcommits += 1
            report.problem(f"node {name} has {count} live tasks for {node.slots} task slot"
                           f"{'s' if node.slots != 1 else ''}")
        if node.tasks != count or set(members) != live_ids[name]:
            report.problem(f"node {name} task count {node.tasks}, set {len(members)}, but {count} live tasks")
    held = store.held_job_ids()
    for task_id in tallies.queues.get("waiting", ()):
        job = task_id.rpartition(".")[0]
        if job not in held:
            report.problem(f"task {task_id} waits in q:waiting but job {job} is not held by its dependencies")
    by_priority = Counter(t.priority for t in tasks if t.live)
    recorded_priority = {p: c for p, c in tallies.priority.items() if c}
    if recorded_priority != dict(by_priority):
        report.problem(f"tally:priority {recorded_priority} differs from live tasks {dict(by_priority)}")
    for job_id, tally in tallies.jobs.items():
        recorded = {n: c for n, c in tally.items() if c != 0}
        if recorded != dict(per_job[job_id]):
            report.problem(f"job {job_id} tally {recorded} differs from its live tasks {dict(per_job[job_id])}")
    for job_id, counted in store.domain_counts(store.job_ids()).items():
        if counted != dict(per_domain[job_id]):
            report.problem(f"job {job_id} tally:dom {counted} differs from its live tasks' domains "
                           f"{dict(per_domain[job_id])}")
    replicas_note(store, report)
    return report


def replicas_note(store: Store, report: AuditReport) -> None:
    """With ``--wait-replicas N``, a note when the namespace's master has fewer than N
    replicas in sync: acknowledged writes may then be lost with it, or are refused."""
    wanted = store.scripts.wait_replicas
    if wanted <= 0:
        return
    replicas = namespace_replicas(store)
    if replicas < wanted:
        mode = store.scripts.watch.on_missing
        then = "writes go on without waiting for replicas" if mode == "write" else "writes are refused"
        report.notes.append(f"the namespace's master has {replicas} replica(s) in sync, fewer than the {wanted} that "
                            f"--wait-replicas asks for: {then} (--on-missing-replicas {mode})")


def repair(store: Store) -> dict:
    """Make the bookkeeping agree with the task hashes (the truth): node allocations, host
    ports, task counts and task sets, ``tally:job``, ``tally:dom``, ``tally:priority``, and the queues (a
    pending task in no queue goes back to ``q:active``, one in several stays in one; an
    ended or placed task leaves them). A live task on a node that no longer exists is
    marked lost and replaced. Returns what it changed: ``{"problems": [...before],
    "requeued": n, "lost": [...], "replacements": {...}}``, empty problems when there was
    nothing to do.

    Not atomic with concurrent commits: run it when no worker is placing in the
    namespace (at a worker's start, or with the workers stopped), then audit again."""
    from scheduler.control import reconcile  # control imports control; kept local to keep audit light

    before = audit(store)
    if before.ok:
        return {"problems": [], "requeued": 0, "lost": [], "replacements": {}}
    nodes = {n.name: n for n in store.nodes()}
    tasks = store.tasks(store.all_task_ids())
    tallies = store.tallies(list(nodes), store.job_ids())
    queue_order = ("active", "backoff", "unschedulable", "inflight", "waiting")
    held = store.held_job_ids()
    book = {name: {"capacity": dict(n.capacity), "allocated": Counter(), "ports": {}, "tasks": []}
            for name, n in nodes.items()}
    jobs: dict[str, Counter] = {job_id: Counter() for job_id in tallies.jobs}
    domains: dict[str, Counter] = {job_id: Counter() for job_id in tallies.jobs}
    priority: Counter = Counter()
    stale: dict[str, list[str]] = defaultdict(list)
    requeue: list[tuple[str, int]] = []
    lost: list[tuple[str, str]] = []
    orphans: list = []
    for task in tasks:
        where = [name for name in queue_order if task.id in tallies.queues[name]]
        if task.state == PENDING:
            if not where:
                requeue.append((task.id, task.priority, task.job in held))
            for name in where[1:]:  # kept in the first (active before backoff ...)
                stale[name].append(task.id)
            continue
        for name in where:
            stale[name].append(task.id)
        if task.state not in LIVE_STATES:
            continue
        if task.node not in book:
            lost.append((task.id, f"node {task.node} no longer exists (found by audit --repair)"))
            orphans.append(task)
            continue
        node = book[task.node]
        node["allocated"].update(task.allocated)
        node["tasks"].append(task.id)
        for port in task.ports:
            node["ports"][port] = task.id
        jobs.setdefault(task.job, Counter())[task.node] += 1
        if task.domains is not None:
            domains.setdefault(task.job, Counter()).update((*task.domains, TOTAL))
        priority[task.priority] += 1
    for node in book.values():
        node["allocated"] = {r: node["allocated"].get(r, 0) for r in set(node["capacity"]) | set(node["allocated"])}
    store.rewrite_bookkeeping(book, {j: dict(c) for j, c in jobs.items()}, dict(priority), dict(stale), requeue, lost,
                              {j: dict(c) for j, c in domains.items()})
    replacements: dict[str, list[str]] = {}
    by_job = Counter(task.job for task in orphans)
    for job_id, count in by_job.items():
        job = store.get_job(job_id)
        if job["status"] == reconcile.RUNNING_JOB and job["spec"]["type"] != "global":
            replacements[job_id] = reconcile.add_tasks(store, job_id, count)
    return {"problems": before.problems, "requeued": len(requeue), "lost": [t for t, _ in lost],
            "replacements": replacements}

"""The whole cluster read at once, for the engine to work on a copy of it (``sched
capacity``): every node, every live task and every pending task with the specs of their
job versions, the running global jobs, the index the placement rules resolve selectors
with, and the quota.

A handful of pipelined round trips, whatever the cluster's size: node names, then node
hashes and task sets with the queues, then task hashes, then specs. What is read is a
moment's view, not a transaction: a plan made on it is advice, and whatever acts on it
goes through the commit, which checks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from scheduler.model import LIVE_STATES, PENDING, JobSpec, Node, Task
from scheduler.model.job_affinity import JobAffinity, parse_job_affinity
from scheduler.state.hashes import hgetall_many
from scheduler.state.jobs import parse_stored
from scheduler.state.namespace import NamespaceStore
from scheduler.state.nodes import node_from_hash

PENDING_QUEUES = ("active", "backoff", "unschedulable", "inflight")  # not waiting: held by dependencies


@dataclass
class ClusterState:
    nodes: list[Node]
    live: list[Task]  # assigned or running, on their nodes
    pending: list[Task]  # in the four scheduling queues, in queue order (priority, then age)
    specs: dict[tuple[str, int], JobSpec]  # (job, version) -> spec, for every task read
    current: dict[str, JobSpec]  # job -> its current spec, for every job of a task read and the global jobs
    global_jobs: list[str]  # running jobs with one task per eligible node
    rules_gen: str = ""
    job_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    job_anti: dict[str, tuple[JobAffinity, ...]] = field(default_factory=dict)
    quota: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


class ClusterStore(NamespaceStore):
    def cluster_state(self) -> ClusterState:
        k = self.keys
        names = sorted(self.client.smembers(k.nodes))
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.smembers(k.node_tasks(name))
            for queue in PENDING_QUEUES:
                pipe.zrange(getattr(k, queue), 0, -1, withscores=True)
            pipe.smembers(k.global_jobs)
            pipe.get(k.rules_gen)
            pipe.hgetall(k.job_labels)
            pipe.hgetall(k.job_anti)
            pipe.hgetall(k.quota)
            pipe.hgetall(k.usage)
            replies = pipe.execute()
        sets, rest = replies[:len(names)], replies[len(names):]
        queued, (globals_, gen, labels, anti, quota, usage) = rest[:len(PENDING_QUEUES)], rest[len(PENDING_QUEUES):]
        nodes = [node_from_hash(fields) for fields in hgetall_many(self.client, [k.node(n) for n in names]) if fields]
        live_ids = sorted({task_id for members in sets for task_id in members})
        scored: dict[str, float] = {}
        for entries in queued:
            for task_id, score in entries:
                scored.setdefault(task_id, score)
        pending_ids = sorted(scored, key=lambda t: (scored[t], t))
        rows = hgetall_many(self.client, [k.task(t) for t in live_ids + pending_ids])
        live = [Task.from_hash(f) for f in rows[:len(live_ids)] if f and f.get("state") in LIVE_STATES]
        pending = [Task.from_hash(f) for f in rows[len(live_ids):] if f and f.get("state") == PENDING]
        specs, current = self._specs({(t.job, t.version) for t in live + pending}, set(globals_))
        return ClusterState(
            nodes=nodes, live=[t for t in live if (t.job, t.version) in specs],
            pending=[t for t in pending if (t.job, t.version) in specs], specs=specs, current=current,
            global_jobs=sorted(j for j in globals_ if j in current), rules_gen=gen or "",
            job_labels={job: orjson.loads(text) for job, text in labels.items()},
            job_anti={job: parse_job_affinity(orjson.loads(text), job, "job_anti_affinity")
                      for job, text in anti.items()},
            quota={r: int(v) for r, v in quota.items()},
            usage={r: int(v) for r, v in usage.items() if not r.startswith("tenant:")})

    def _specs(self, versions: set[tuple[str, int]], global_jobs: set[str]):
        """The spec of each (job, version), and each job's current spec (a running global
        job's only: the others' are read for budgets from the versions' jobs too)."""
        k = self.keys
        wanted = sorted(versions)
        jobs = sorted({job for job, _ in wanted} | global_jobs)
        with self.client.pipeline(transaction=False) as pipe:
            for job, version in wanted:
                pipe.hget(k.job(job), f"spec:{version}")
            for job in jobs:
                pipe.hmget(k.job(job), "spec", "status")
            replies = pipe.execute()
        specs = {key: parse_stored(text) for key, text in zip(wanted, replies[:len(wanted)]) if text is not None}
        current = {}
        for job, (text, status) in zip(jobs, replies[len(wanted):]):
            if text is not None and (job not in global_jobs or (status or "running") == "running"):
                current[job] = parse_stored(text)
        return specs, current

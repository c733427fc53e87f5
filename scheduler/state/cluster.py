"""The whole cluster read for a copy to plan on (``scheduler/control/cluster_read.py``):
every node, the live tasks on each, the jobs they belong to, the rule index and the
domain counts, in a few round trips.

What a plan read is recorded first (:class:`Reading`: ``nodes:epoch``, every node's change
sequence, ``rules:gen``), before the nodes: a node changed after that has a later sequence,
so applying the plan can tell that it read something older than what is there now.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.model import Node, Task
from scheduler.model.states import LIVE_STATES
from scheduler.state.hashes import hgetall_many, hmget_many
from scheduler.state.namespace import NamespaceStore
from scheduler.state.nodes import node_from_hash

JOB_FIELDS = ("version", "status", "spec", "deployment", "updated")
# What a copy needs of each live task (a task hash holds more: its explanation, output...).
TASK_FIELDS = ("id", "job", "version", "state", "node", "priority", "alloc", "ports", "domains", "started_at", "health")


@dataclass
class Reading:
    """What a read of the cluster saw before it read the nodes: the node epoch (nodes
    added, removed, relabelled), each node's change sequence (``nodes:changes``) and the
    rules generation."""

    epoch: str = ""
    seqs: dict[str, int] = field(default_factory=dict)
    gen: str = ""


@dataclass
class ClusterState:
    """The raw read: nodes, live tasks (the fields of ``TASK_FIELDS``), and per job of a live task its hash's
    ``version``, ``status``, current ``spec`` text, ``deployment`` and ``updated`` (when
    it last changed); the jobs with a deployment in progress."""

    reading: Reading
    nodes: list[Node]
    tasks: list[Task]
    jobs: dict[str, dict[str, str]]
    deploying: set[str]


class ClusterStore(NamespaceStore):
    def read_cluster(self) -> ClusterState:
        """Every node and every live task, with their jobs' fields (a few pipelined round trips)."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(k.node_epoch)
            pipe.zrange(k.node_changes, 0, -1, withscores=True)
            pipe.get(k.rules_gen)
            pipe.smembers(k.nodes)
            pipe.zrange(k.active_deployments, 0, -1)
            epoch, changes, gen, names, deployments = pipe.execute()
        reading = Reading(epoch or "", {name: int(seq) for name, seq in changes}, gen or "")
        names = sorted(names)
        nodes = [node_from_hash(fields) for fields in hgetall_many(self.client, [k.node(n) for n in names]) if fields]
        with self.client.pipeline(transaction=False) as pipe:
            for node in nodes:
                pipe.smembers(k.node_tasks(node.name))
            members = pipe.execute()
        ids = sorted({task_id for names_on in members for task_id in names_on})
        tasks = [Task.from_hash(fields) for fields in hmget_many(self.client, [k.task(t) for t in ids], TASK_FIELDS)
                 if fields.get("state") in LIVE_STATES]
        jobs = self.jobs_fields(sorted({t.job for t in tasks}))
        return ClusterState(reading, nodes, tasks, jobs, {d.rpartition("@")[0] for d in deployments})

    def jobs_fields(self, job_ids: list[str]) -> dict[str, dict[str, str]]:
        """``version``, ``status``, ``spec``, ``deployment`` and ``updated`` of each job (absent ones left out)."""
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hmget(self.keys.job(job_id), *JOB_FIELDS)
            rows = pipe.execute()
        return {job_id: {name: value for name, value in zip(JOB_FIELDS, row) if value is not None}
                for job_id, row in zip(job_ids, rows) if row[0] is not None}

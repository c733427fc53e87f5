"""What the scripts keep beside the tasks: ``tally:job:<id>``, ``tally:priority``, the
jobs' failures per node (``faults:<job>``, read back with ``tallies.lua``), read for
placing, preempting and auditing, and rewritten from the tasks by a repair.
"""

from __future__ import annotations

import dataclasses

from scheduler.state.namespace import NamespaceStore

# A failure of a job's task on a node counts towards "faulty" for 5 minutes: the step that
# ends a task as failed records it in faults:<job> and drops the older entries (end_task
# in lua/_lib.lua).
FAULT_WINDOW_MS = 300_000


@dataclasses.dataclass
class Tallies:
    """What the scripts keep beside the tasks, read at once (for checking them against
    the tasks: see ``scheduler.control.audit``)."""

    queues: dict[str, set[str]]  # active, backoff, unschedulable, inflight, waiting -> task ids
    node_tasks: dict[str, set[str]]  # node -> its task set
    priority: dict[int, int]  # tally:priority
    jobs: dict[str, dict[str, int]]  # job -> tally:job, node -> live tasks


class TallyStore(NamespaceStore):
    def tallies(self, nodes: list[str], jobs: list[str]) -> Tallies:
        k = self.keys
        queues = ("active", "backoff", "unschedulable", "inflight", "waiting")
        with self.client.pipeline(transaction=False) as pipe:
            for name in queues:
                pipe.zrange(getattr(k, name), 0, -1)
            for name in nodes:
                pipe.smembers(k.node_tasks(name))
            pipe.hgetall(k.tally_priority)
            for job_id in jobs:
                pipe.zrange(k.tally_job(job_id), 0, -1, withscores=True)
            replies = iter(pipe.execute())
        return Tallies(
            queues={name: set(next(replies)) for name in queues},
            node_tasks={name: set(next(replies)) for name in nodes},
            priority={int(p): int(c) for p, c in next(replies).items()},
            jobs={job_id: {n: int(c) for n, c in next(replies)} for job_id in jobs})

    def live_priorities(self) -> dict[int, int]:
        """Priority -> how many live tasks have it (``tally:priority``)."""
        return {int(p): int(n) for p, n in self.client.hgetall(self.keys.tally_priority).items()}

    def job_tally(self, job_id: str) -> dict[str, int]:
        """Node -> the job's live tasks there (``tally:job:<id>``)."""
        return {name: int(n) for name, n in self.client.zrange(self.keys.tally_job(job_id), 0, -1, withscores=True)}

    def queue_job_tallies(self, pipe, job_ids: list[str], faults_since_ms: int) -> None:
        """Queue ``tallies.lua`` on ``pipe`` (by SHA: see :meth:`Scripts.queue`): each job's
        tasks per node, and its failures per node since ``faults_since_ms`` by tasks of
        its current version. Read the reply with :meth:`read_job_tallies`."""
        k = self.keys
        keys = [key for job_id in job_ids for key in (k.tally_job(job_id), k.faults(job_id), k.job(job_id))]
        self.scripts.queue(pipe, "tallies", keys, [faults_since_ms])

    @staticmethod
    def read_job_tallies(job_ids: list[str], reply: list) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """(job -> node -> live tasks, job -> node -> recent failures of its current version,
        only for jobs with some)."""
        counts: dict[str, dict[str, int]] = {}
        faults: dict[str, dict[str, int]] = {}
        for i, job_id in enumerate(job_ids):
            flat = reply[2 * i]
            counts[job_id] = {flat[j]: int(float(flat[j + 1])) for j in range(0, len(flat), 2)}
            per_node: dict[str, int] = {}
            for entry in reply[2 * i + 1]:
                node = entry.split("|", 1)[0]
                per_node[node] = per_node.get(node, 0) + 1
            if per_node:
                faults[job_id] = per_node
        return counts, faults

    # Repair (scheduler.control.audit.repair): the bookkeeping rewritten from the tasks.
    def rewrite_bookkeeping(self, nodes: dict[str, dict], jobs: dict[str, dict[str, int]], priority: dict[int, int],
                            stale: dict[str, list[str]], requeue: list[tuple[str, int, bool]],
                            lost: list[tuple[str, str]], domains: dict[str, dict[str, int]] | None = None) -> None:
        """Make the bookkeeping say what the tasks say, in one MULTI/EXEC (one slot):
        ``nodes``: name -> {"capacity", "allocated", "ports" (port -> task), "tasks" (live ids)},
        written to the node hash and its task set;
        ``jobs``: job -> node -> live tasks (``tally:job``); ``priority``: ``tally:priority``;
        ``stale``: queue name -> task ids to take out of it; ``requeue``: (task, priority,
        held) pending in no queue, put back in ``q:active`` (``q:waiting`` when its job is
        held by its dependencies); ``lost``: (task, message) live on a node that no longer
        exists, marked lost (not counted anywhere); ``domains``: job -> its ``tally:dom``
        (what its live tasks' domains fields say)."""
        from scheduler.state.queue import queue_score

        k = self.keys
        sequence = self.client.incrby(k.enqueue_seq, len(requeue)) - len(requeue) if requeue else 0
        # Every rewritten node goes on the change feed, so that running workers read it again.
        changed = self.client.incrby(k.node_seq, len(nodes)) - len(nodes) if nodes else 0
        now = self.now_ms()
        with self.client.pipeline(transaction=True) as pipe:
            if nodes:
                pipe.zadd(k.node_changes, {name: changed + i for i, name in enumerate(nodes, 1)})
            for name, node in nodes.items():
                current = self.client.hkeys(k.node(name))
                gone = [f for f in current if (f.startswith("alloc:") and f[6:] not in node["allocated"])
                        or (f.startswith("port:") and int(f[5:]) not in node["ports"])]
                if gone:
                    pipe.hdel(k.node(name), *gone)
                mapping = {"tasks": len(node["tasks"]), **{f"alloc:{r}": a for r, a in node["allocated"].items()},
                           **{f"port:{p}": t for p, t in node["ports"].items()}}
                pipe.hset(k.node(name), mapping=mapping)
                pipe.delete(k.node_tasks(name))
                if node["tasks"]:
                    pipe.sadd(k.node_tasks(name), *node["tasks"])
            for job_id, counts in jobs.items():
                pipe.delete(k.tally_job(job_id))
                if counts:
                    pipe.zadd(k.tally_job(job_id), counts)
            for job_id, counts in (domains or {}).items():
                pipe.delete(k.tally_dom(job_id))
                if counts:
                    pipe.hset(k.tally_dom(job_id), mapping=counts)
            pipe.delete(k.tally_priority)
            if priority:
                pipe.hset(k.tally_priority, mapping={str(p): c for p, c in priority.items()})
            for name, ids in stale.items():
                if ids:
                    pipe.zrem(getattr(k, name), *ids)
            for offset, (task_id, task_priority, held) in enumerate(requeue):
                pipe.zadd(k.waiting if held else k.active, {task_id: queue_score(task_priority, sequence + offset + 1)})
            for task_id, message in lost:
                pipe.hset(k.task(task_id), mapping={"state": "lost", "message": message, "ended_at": now})
            pipe.execute()

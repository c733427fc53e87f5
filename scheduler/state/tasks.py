"""Tasks in Redis: reading them, starting and ending them (``start.lua``,
``finish.lua``), their output, and what a worker reads of the
tasks it claimed (``claimed.lua``).
"""

from __future__ import annotations

import orjson

from scheduler.model import LIVE_STATES, STOPPED, Task
from scheduler.model.errors import NotFound
from scheduler.model.task import parse_allocation
from scheduler.state.hashes import hgetall_many, hmget_many, smembers_many
from scheduler.state.namespace import NamespaceStore
from scheduler.state.tallies import FAULT_WINDOW_MS


# What preemption weighs of a live task (live_tasks_on), as its hash names them.
VICTIM_FIELDS = ("job", "version", "state", "node", "priority", "alloc", "ports", "assigned_at", "domains")


class TaskStore(NamespaceStore):
    def get_task(self, task_id: str) -> Task:
        fields = self.client.hgetall(self.keys.task(task_id))
        if not fields:
            raise NotFound(f"task {task_id!r} does not exist.")
        return Task.from_hash(fields)

    def tasks(self, task_ids: list[str]) -> list[Task]:
        """The tasks that exist among ``task_ids``, in that order."""
        return [Task.from_hash(fields) for fields in hgetall_many(self.client, [self.keys.task(t) for t in task_ids])
                if fields]

    def start_task(self, task_id: str, node: str, token: str = "") -> bool:
        """``start.lua``: assigned -> running, if the task is still assigned to ``node``.
        With a ``token`` (one per run), a start resent after its reply was lost is
        recognised as the same run's and answers True again."""
        k = self.keys
        return bool(self.scripts.start(keys=[k.task(task_id), k.stream, k.config], args=[node, self.events_arg, token]))

    def save_output(self, task_id: str, fields: dict) -> None:
        """``output.lua``: keep what the task printed, if the task still exists."""
        if fields:
            self.scripts.output(keys=[self.keys.task(task_id), self.keys.task_output(task_id)],
                                args=[x for pair in fields.items() for x in pair])

    def task_output(self, task_id: str) -> dict[str, str]:
        """What the task printed (empty when nothing was captured)."""
        return self.client.hgetall(self.keys.task_output(task_id))

    def finish(self, tasks: list[Task], state: str, message: str = "") -> list[str]:
        """End tasks (read with :meth:`tasks`) in ``state``: pending ones leave the queue, live
        ones give their resources back (and, ended as failed, count in ``faults:<job>``).
        Returns, per task, what finish.lua reported."""
        k = self.keys
        keys = [k.active, k.backoff, k.unschedulable, k.inflight, k.leases, k.node_changes,
                k.node_seq, k.cycle, k.move_cycle, k.tally_priority]
        args = [self.events_arg, FAULT_WINDOW_MS]
        for task in tasks:
            node = task.node if task.live else ""
            held = node or task.nominated_node  # a pending preemptor's nomination goes with it
            keys += [k.task(task.id), k.node(held), k.node_tasks(node), k.tally_job(task.job), k.faults(task.job),
                     k.tally_dom(task.job)]
            args += [task.id, state, message, node]
        keys += [k.stream, k.config, k.usage, k.ended, k.waiting]
        return self.scripts.finish(keys=keys, args=[*args, self.scripts.now_arg()]) if tasks else []

    def finish_ids(self, task_ids: list[str], state: str = STOPPED, message: str = "", attempts: int = 3) -> dict:
        """End tasks by id, re-reading any that were placed while we looked."""
        outcome: dict[str, str] = {}
        pending = list(task_ids)
        for _ in range(attempts):
            tasks = self.tasks(pending)
            results = self.finish(tasks, state, message)
            pending = []
            for task, result in zip(tasks, results):
                if result == "elsewhere":
                    pending.append(task.id)
                else:
                    outcome[task.id] = result
            if not pending:
                break
        return outcome

    def live_tasks_on(self, nodes: list[str]) -> dict[str, list[Task]]:
        """The live tasks on each of ``nodes``, by task id, with what preemption weighs of
        each (:data:`VICTIM_FIELDS`; the others are left at their defaults): two round
        trips, however many nodes and tasks."""
        k = self.keys
        members = smembers_many(self.client, [k.node_tasks(name) for name in nodes])
        ids = [(name, task_id) for name, names in zip(nodes, members) for task_id in sorted(names)]
        rows = hmget_many(self.client, [k.task(task_id) for _, task_id in ids], VICTIM_FIELDS)
        out: dict[str, list[Task]] = {}
        for (name, task_id), row in zip(ids, rows):
            if row.get("state") in LIVE_STATES:
                domains = row.get("domains")
                out.setdefault(name, []).append(Task(
                    id=task_id, job=row.get("job", ""), version=int(row.get("version") or 0), state=row["state"],
                    node=row.get("node", ""), priority=int(row.get("priority") or 50),
                    allocated=parse_allocation(row.get("alloc")),
                    ports=tuple(int(p) for p in row.get("ports", "").split(",") if p),
                    assigned_ms=int(row.get("assigned_at") or 0),
                    domains=tuple(orjson.loads(domains)) if domains else None))
        return out

    # What a worker reads per batch.
    def claimed(self, task_ids: list[str]) -> list[list]:
        """``claimed.lua``: per claimed task, (job, version, pin, nominated node, the job's
        current spec text)."""
        k = self.keys
        return self.scripts.claimed(keys=[*(k.task(t) for t in task_ids),
                                          *(k.job(t.rpartition(".")[0]) for t in task_ids)])

    def created_ms(self, task_ids: list[str]) -> list[int]:
        """Each task's creation time (Redis ms; 0 if gone), in one pipelined round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hget(self.keys.task(task_id), "created")
            return [int(value or 0) for value in pipe.execute()]

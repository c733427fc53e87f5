"""Tasks: listing them, and why each is where it is."""

from __future__ import annotations

import orjson

from scheduler.client.base import ClientBase
from scheduler.control import budgets, dependencies, starting
from scheduler.model import LIVE_STATES, PENDING, TASK_STATES, SpecError, Task


class TaskClient(ClientBase):
    """Read tasks and their explanations."""

    def task(self, task_id: str) -> Task:
        return self.store.get_task(task_id)

    def tasks(self, job: str | None = None, state: str | None = None, node: str | None = None) -> list[Task]:
        """Tasks, optionally only one job's, in one state, or on one node."""
        if state is not None and state not in TASK_STATES:
            raise SpecError(f"state {state!r} is not one of {', '.join(TASK_STATES)}.")
        if job is not None:
            self.store.get_job(job)
            ids = self.store.job_task_ids(job)
        else:
            if node is not None:
                self.store.get_node(node)
            ids = self.store.all_task_ids()
        return [t for t in self.store.tasks(ids)
                if (state is None or t.state == state) and (node is None or t.node == node)]

    def explain(self, task_id: str) -> dict:
        """Why the task is where it is (the ``sched task explain --json`` record): for a
        pending task, how many nodes were evaluated and what each lacked."""
        task = self.store.get_task(task_id)
        # The last attempt's explanation matters only while the task is still pending.
        explanation = orjson.loads(task.explanation) if task.explanation and task.state == PENDING else None
        record = {"id": task.id, "state": task.state, "version": task.version,
                  "nodes_evaluated": explanation["nodes_evaluated"] if explanation else 0,
                  "reasons": explanation["reasons"] if explanation else {},
                  "message": explain_message(task, explanation)}
        waits = starting.not_started(self.store, task)  # placed, but kept from starting
        if waits is not None:
            record.update(reasons={waits[0]: 1}, message=waits[1])
        if task.state == PENDING and self.store.is_waiting(task.id):  # held by its job's dependencies
            spec = self._job_spec_or_none(task.job)
            waits = dependencies.waiting_for(self.store, spec) if spec is not None else []
            record.update(queue="waiting", waiting_for=waits, reasons={"waiting for dependencies": 1},
                          message=(" and ".join(waits) or "waiting for its dependencies to be checked") + ".")
        if task.nominated_node:
            record["nominated_node"] = task.nominated_node
        if task.current_health:  # a running task its agent has looked at
            record["health"] = task.current_health
            if task.health_check:
                record["health_check"] = task.health_check
        spec = self._job_spec_or_none(task.job)
        if spec is not None and spec.gang:
            record["gang"] = {"job": spec.id, "size": spec.replicas, "min_available": spec.gang,
                              "waits": bool(explanation and explanation.get("gang"))}  # waits whole, with its gang
        if spec is not None and spec.tenant != "default":
            record["tenant"] = spec.tenant
        if task.live:
            drain = self.store.drain_record(task.node)
            if drain.get("state") == "draining":  # its node is being drained: what the drain waits for
                record["drain"] = {"node": task.node, "message": drain.get("message", "")}
                record["message"] += f" Node {task.node} is draining: {drain.get('message', '')}."
        if spec is not None and spec.disruption_budget is not None:
            record["budget"] = budgets.status(self.store, task.job)
        return record

    def _job_spec_or_none(self, job_id: str):
        try:
            return self.store.job_spec(job_id)
        except Exception:
            return None


def explain_message(task: Task, explanation: dict | None) -> str:
    """Why ``task`` is where it is, in words: its last attempt's ``explanation`` (a pending
    task's), else what its state says."""
    if explanation:
        return explanation["message"]
    if task.state in LIVE_STATES:
        return f"placed on node {task.node}."
    if task.state == PENDING:
        return "waiting for a scheduler worker; no attempt has been made yet."
    return task.message or f"{task.state}."


def task_record(t: Task) -> dict:
    """A task as ``sched task ls --json`` and ``GET /v1/tasks`` give it."""
    return {"id": t.id, "job": t.job, "state": t.state, "node": t.node or None, "priority": t.priority,
            "attempts": t.attempts, "version": t.version, "health": t.current_health or None}

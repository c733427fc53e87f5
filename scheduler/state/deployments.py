"""Deployments in Redis: a hash per deployment, the job's list of them, the namespace's
list and the set still in progress, with the scripts that change them
(``deployment_open.lua``, ``deployment_set.lua``) and a task's health (``task_health.lua``).

A deployment is named ``<job>@<version>`` (the version it rolls out) and readable with
``redis-cli HGETALL sched:{ns}:deployment:web@2``; its fields are listed in
docs/redis-keys.md. Every change of state is one compare-and-set script, so a worker and
a person (``sched deployment pause``) cannot both move it.
"""

from __future__ import annotations

import redis

from scheduler.model.errors import NotFound, RedisUnavailable
from scheduler.state.namespace import NamespaceStore

RUNNING, PAUSED, AWAITING_PROMOTION = "running", "paused", "awaiting_promotion"
SUCCESSFUL, FAILED, REVERTED, CANCELLED = "successful", "failed", "reverted", "cancelled"
IN_PROGRESS = (RUNNING, PAUSED, AWAITING_PROMOTION)
DEPLOYMENT_STATES = (*IN_PROGRESS, SUCCESSFUL, FAILED, REVERTED, CANCELLED)
COUNTS = ("desired", "placed", "healthy", "unhealthy")
_INTS = ("from", "to", "created", "updated", "progress_at", "resumed_at", "canary", "promoted", "stable", "next_at",
         *(f"{side}_{count}" for side in ("from", "to") for count in COUNTS))


def deployment_id(job_id: str, version: int) -> str:
    return f"{job_id}@{version}"


def decode(fields: dict[str, str]) -> dict:
    """A deployment's hash as a record: numbers as numbers, the counts per version grouped."""
    record = {name: int(fields[name]) if name in _INTS and fields[name] != "" else fields[name] for name in fields}
    for side in ("from", "to"):
        record[f"{side}_counts"] = {count: record.pop(f"{side}_{count}", 0) for count in COUNTS}
    record.setdefault("message", "")
    return record


class DeploymentStore(NamespaceStore):
    def open_deployment(self, job_id: str, read: str, previous: str, job_fields: dict, shares: str,
                        fields: dict) -> int | None:
        """``deployment_open.lua``: write the job's new version (``job_fields``, no tasks) and
        open deployment ``fields["id"]`` if the job is still as ``read`` (``job_state``) with
        ``previous`` as its deployment; cancel ``previous`` if it is in progress. Returns the
        time (ms) or None if the job changed. Never resent: a timeout is one sentence."""
        k = self.keys
        new_id = fields["id"]
        args = [read, self.events_arg, job_id, previous, shares, new_id, len(job_fields)]
        for name, value in job_fields.items():
            args += [name, value]
        args.append(len(fields))
        for name, value in fields.items():
            args += [name, value]
        keys = [k.job(job_id), k.job_shares, k.deployments, k.active_deployments, k.job_deployments(job_id),
                k.deployment(new_id), k.deployment(previous or new_id), k.stream, k.config]
        try:
            reply = self.scripts.deployment_open(keys=keys, args=args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(
                f"Redis did not answer while job {job_id!r} was being updated ({str(exc).rstrip('.')}); it may or "
                f"may not have been applied: look with `sched deployment ls --job {job_id}`.") from None
        return int(reply[1]) if reply[0] else None

    def set_deployment(self, deployment: str, job_id: str, expect: tuple[str, ...] = (), state: str = "",
                       fields: dict | None = None, stable: bool = False) -> tuple[bool, str]:
        """``deployment_set.lua``: write ``fields`` and move to ``state`` if the deployment is
        in one of ``expect`` (any when empty); ``stable`` records its version as the job's
        last healthy one. Returns (done, the state it is in now)."""
        k = self.keys
        args = [self.events_arg, ",".join(expect), state, int(stable), len(fields or {})]
        for name, value in (fields or {}).items():
            args += [name, value]
        reply = self.scripts.deployment_set(keys=[k.deployment(deployment), k.active_deployments, k.job(job_id), k.stream,
                                                  k.config],
                                            args=args)
        return bool(reply[0]), reply[1]

    def get_deployment(self, deployment: str) -> dict:
        fields = self.client.hgetall(self.keys.deployment(deployment))
        if not fields:
            raise NotFound(f"deployment {deployment!r} does not exist.")
        return decode(fields)

    def deployments(self, job_id: str | None = None, limit: int = 100) -> list[dict]:
        """Deployments, newest first: the job's, or the namespace's."""
        k = self.keys
        key = k.job_deployments(job_id) if job_id else k.deployments
        ids = self.client.zrevrange(key, 0, limit - 1)
        with self.client.pipeline(transaction=False) as pipe:
            for deployment in ids:
                pipe.hgetall(k.deployment(deployment))
            rows = pipe.execute()
        return [decode(row) for row in rows if row]

    def active_deployment_ids(self) -> list[str]:
        """Deployments still in progress (or owing a revert), oldest first."""
        return self.client.zrange(self.keys.active_deployments, 0, -1)

    def set_task_health(self, task_id: str, node: str, health: str, message: str = "") -> bool:
        """``task_health.lua``: record the health of a task running on ``node``. Returns
        whether it changed."""
        k = self.keys
        return bool(self.scripts.task_health(keys=[k.task(task_id), k.stream, k.config],
                                              args=[node, health, self.events_arg, message]))

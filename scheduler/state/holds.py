"""Jobs held by their ``after`` dependencies: ``jobs:held``, the ``held`` field of a job's
hash, and its tasks in ``q:waiting`` (``unhold.lua`` lets them go). What a dependency's
state is, and whether it holds, is decided in ``control/dependencies.py``."""

from __future__ import annotations

from scheduler.state.namespace import NamespaceStore

UNHOLD_CHUNK = 500  # tasks per unhold.lua call


class HoldStore(NamespaceStore):
    def hold(self, job_id: str) -> None:
        """List the job among the held ones (before the submit that writes its ``held``
        field: an entry whose job turns out not held is dropped by the upkeep)."""
        self.client.zadd(self.keys.held, {job_id: self.now_ms()}, nx=True)

    def held_jobs(self, limit: int = 1000) -> list[str]:
        """The held jobs, longest waiting first (at most ``limit``)."""
        return self.client.zrange(self.keys.held, 0, limit - 1)

    def held_job_ids(self) -> set[str]:
        """Every job listed in ``jobs:held``."""
        return set(self.client.zrange(self.keys.held, 0, -1))

    def unhold(self, job_id: str) -> int:
        """Let the job's waiting tasks go (``unhold.lua``, a chunk per call, until the job
        leaves ``jobs:held``). Returns how many tasks moved to ``q:active``."""
        k = self.keys
        moved, start = 0, 0
        while start >= 0:
            done, start = self.scripts.unhold(keys=[k.job(job_id), k.held, k.waiting, k.active, k.job_tasks(job_id),
                                                    k.wake, k.stream, k.config],
                                              args=[self.events_arg, job_id, start, UNHOLD_CHUNK])
            moved += int(done)
            start = int(start)
        return moved

    def forget_hold(self, job_id: str) -> None:
        """The job is not held any more (it failed or stopped; its tasks have ended)."""
        with self.client.pipeline(transaction=False) as pipe:  # the field first: the entry is what the upkeep follows
            pipe.hdel(self.keys.job(job_id), "held")
            pipe.zrem(self.keys.held, job_id)
            pipe.execute()

    def need(self, job_ids: list[str], by: str) -> None:
        """``by`` waits for each of ``job_ids``: retention keeps them (``job:<id>:holds``)
        until it no longer waits."""
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.sadd(self.keys.job_holds(job_id), by)
            pipe.execute()

    def no_longer_need(self, job_ids: list[str], by: str) -> None:
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.srem(self.keys.job_holds(job_id), by)
            pipe.execute()

    def is_waiting(self, task_id: str) -> bool:
        return self.client.zscore(self.keys.waiting, task_id) is not None

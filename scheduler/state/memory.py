"""Redis memory as a namespace sees it: what the server uses and may use, and what one
live task, job and node of the namespace takes (``MEMORY USAGE`` of their keys, averaged
over a sample), for ``sched server status``, ``sched config show`` and the workers'
warning when used memory passes 80% of ``maxmemory``.
"""

from __future__ import annotations

import redis
from redis.cluster import RedisCluster

from scheduler.state.namespace import NamespaceStore

SAMPLE = 20  # keys-owning things sampled per kind
HIGH = 0.8  # the share of maxmemory past which workers warn
LOW = 0.7  # back under this, a later crossing warns again
WARNED = "memory-high"  # the lock that makes the warning once per namespace


class MemoryStore(NamespaceStore):
    def redis_memory(self) -> dict:
        """``{used_memory, maxmemory, maxmemory_policy}`` of the server holding the
        namespace (maxmemory 0: no limit)."""
        client = self.client
        if isinstance(client, RedisCluster):  # the master serving the namespace's slot
            info = client.info("memory", target_nodes=client.get_node_from_key(self.keys.active))
        else:
            info = client.info("memory")
        if info and "used_memory" not in info:  # a reply per node
            info = next(iter(info.values()))
        return {"used_memory": int(info.get("used_memory", 0)), "maxmemory": int(info.get("maxmemory", 0)),
                "maxmemory_policy": str(info.get("maxmemory_policy", ""))}

    def _bytes(self, keys: list[str]) -> int:
        with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.memory_usage(key, samples=0)
            return sum(int(n or 0) for n in pipe.execute())

    def memory_report(self) -> dict:
        """The server's memory, the namespace's live tasks, jobs and nodes, and the bytes
        each takes on average (over up to ``SAMPLE`` of each; 0 when there is none)."""
        k = self.keys
        report = self.redis_memory()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.scard(k.jobs)
            pipe.scard(k.nodes)
            pipe.hget(k.usage, "tasks")
            pipe.srandmember(k.jobs, SAMPLE)
            pipe.srandmember(k.nodes, SAMPLE)
            jobs, nodes, live, some_jobs, some_nodes = pipe.execute()
        live_ids: list[str] = []
        for name in some_nodes:
            live_ids += self.client.srandmember(k.node_tasks(name), SAMPLE - len(live_ids))
            if len(live_ids) >= SAMPLE:
                break
        report.update({
            "live_tasks": int(live or 0), "jobs": int(jobs), "nodes": int(nodes),
            "bytes_per_live_task": self._mean([k.task_keys(t) for t in live_ids]),
            "bytes_per_job": self._mean([k.job_keys(j) for j in some_jobs]),
            "bytes_per_node": self._mean([k.node_keys(n) for n in some_nodes]),
        })
        return report

    def _mean(self, groups: list[list[str]]) -> int:
        if not groups:
            return 0
        return round(self._bytes([key for group in groups for key in group]) / len(groups))

    def memory_high(self, memory: dict) -> bool | None:
        """True when used memory is past ``HIGH`` of maxmemory, False when back under
        ``LOW``, None in between or without a limit."""
        limit = memory["maxmemory"]
        if not limit:
            return None
        share = memory["used_memory"] / limit
        return True if share > HIGH else False if share < LOW else None

    def first_to_warn(self) -> bool:
        """Whether this caller is the first to warn of high memory in this namespace
        since it was last back under ``LOW`` (the warning is then its to record)."""
        return self.take_lock(WARNED, 7 * 86_400_000)

    def memory_back_under(self) -> None:
        self.release_lock(WARNED)


MEMORY_ERRORS = (redis.ResponseError,)  # INFO or MEMORY refused to a user whose role lacks them

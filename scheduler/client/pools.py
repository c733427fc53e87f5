"""Pools: the catalogue of node shapes ``sched capacity`` may add (``sched pool``)."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.model.pools import make_pool


class PoolClient(ClientBase):
    """Add, list and remove pools."""

    def add_pool(self, name: str, *, cpu, memory, gpu=None, resources: dict | None = None,
                 labels: dict | list | None = None, engine_labels: dict | list | None = None,
                 taints: list[str] | None = None, os: str = "linux", arch: str = "amd64", role: str = "worker",
                 plugins: list[str] | None = None, cost: float = 0.0, min_nodes: int = 0,
                 max_nodes: int | None = None, priority: int = 0) -> dict:
        """Add a pool, or replace the one of that name: one more node of it would have
        this capacity (``cpu``, ``memory``, ``gpu``, other ``resources``, as ``add_node``
        takes them), labels, taints and platform, and cost ``cost``. ``min_nodes`` and
        ``max_nodes`` bound how many of its nodes the cluster keeps and adds; the priority
        expander prefers the highest ``priority``. Returns the pool (``created``: whether
        it is new)."""
        pool = make_pool(name, cpu=cpu, memory=memory, gpu=gpu, resources=resources, labels=labels,
                         engine_labels=engine_labels, taints=list(taints or ()), os=os, arch=arch, role=role,
                         plugins=plugins, cost=cost, min_nodes=min_nodes, max_nodes=max_nodes, priority=priority)
        created = self.store.put_pool(pool)
        self._record("pool-add" if created else "pool-update", pool=name)
        return {**pool.to_dict(), "created": created}

    def pools(self) -> list[dict]:
        """Every pool, by name, with how many nodes of the cluster belong to it (``nodes``)."""
        from scheduler.model.pools import pool_of

        pools = self.store.pools()
        counts = {pool.name: 0 for pool in pools}
        for node in self.store.nodes():
            pool = pool_of(node, pools)
            if pool is not None:
                counts[pool.name] += 1
        return [{**pool.to_dict(), "nodes": counts[pool.name]} for pool in pools]

    def pool(self, name: str) -> dict:
        return self.store.get_pool(name).to_dict()

    def remove_pool(self, name: str) -> bool:
        """Remove a pool from the catalogue (its nodes stay); False when there was none."""
        removed = self.store.remove_pool(name)
        if removed:
            self._record("pool-rm", pool=name)
        return removed

"""Quotas, usage and tenants: the limits of a namespace (``quota``), what its live tasks
hold (``usage``, written by the scripts), and the tenants' fair-share weights
(``tenants``).
"""

from __future__ import annotations

from scheduler.state.namespace import NamespaceStore


class QuotaStore(NamespaceStore):
    def quota(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.client.hgetall(self.keys.quota).items()}

    def set_quota(self, limits: dict[str, int]) -> None:
        if limits:
            self.client.hset(self.keys.quota, mapping={k: int(v) for k, v in limits.items()})

    def remove_quota(self) -> bool:
        return bool(self.client.delete(self.keys.quota))

    def usage(self) -> dict[str, int]:
        """The usage hash: namespace totals and ``tenant:<t>:<resource>``."""
        return {k: int(v) for k, v in self.client.hgetall(self.keys.usage).items()}

    def quota_and_usage(self) -> tuple[dict[str, int], dict[str, int]]:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.quota)
            pipe.hgetall(self.keys.usage)
            quota, usage = pipe.execute()
        return {k: int(v) for k, v in quota.items()}, {k: int(v) for k, v in usage.items()}

    def queue_quota_and_usage(self, pipe) -> None:
        pipe.hgetall(self.keys.quota)
        pipe.hgetall(self.keys.usage)

    @staticmethod
    def read_quota_and_usage(replies) -> tuple[dict[str, int], dict[str, int]]:
        quota, usage = replies
        return ({k: int(v) for k, v in quota.items()},
                {k: int(v) for k, v in usage.items() if not k.startswith("tenant:")})

    def tenant_weights(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.client.hgetall(self.keys.tenants).items()}

    def set_tenant_weight(self, tenant: str, weight: float) -> None:
        self.client.hset(self.keys.tenants, tenant, repr(float(weight)) if weight != int(weight) else int(weight))

    def remove_tenant(self, tenant: str) -> bool:
        return bool(self.client.hdel(self.keys.tenants, tenant))

    def quota_namespaces(self) -> list[str]:
        """Namespaces that have a quota (a SCAN: for ``sched quota ls``)."""
        found = set()
        for key in self.client.scan_iter(match="sched:{*}:quota", count=1000):
            found.add(key[len("sched:{"):-len("}:quota")])
        return sorted(found)

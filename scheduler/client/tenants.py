"""Tenants: their weights in fair share, usage and dominant share."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.model import SpecError


class TenantClient(ClientBase):
    """Set, read and remove tenants."""

    def set_tenant(self, name: str, weight: float) -> dict:
        from scheduler.model.names import check_tenant
        check_tenant(name)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise SpecError(f"tenant {name}: weight must be a number above 0.")
        self.store.set_tenant_weight(name, weight)
        self._record("tenant-set", tenant=name, weight=f"{weight:g}")
        return next(t for t in self.tenants() if t["name"] == name)

    def remove_tenant(self, name: str) -> bool:
        removed = self.store.remove_tenant(name)
        self._record("tenant-rm", tenant=name, removed=removed)
        return removed

    def tenants(self) -> list[dict]:
        """Each tenant (with a weight, or holding resources): weight, usage, and dominant
        share (the largest of usage / cluster capacity over resources, divided by weight)."""
        weights, usage = self.store.tenant_weights(), self.store.usage()
        capacity: dict[str, int] = {}
        for node in self.store.nodes():
            if node.status == "ready":
                for r, amount in node.capacity.items():
                    capacity[r] = capacity.get(r, 0) + amount
        names = set(weights)
        per: dict[str, dict[str, int]] = {}
        for key, value in usage.items():
            if key.startswith("tenant:"):
                _, tenant, resource = key.split(":", 2)
                names.add(tenant)
                per.setdefault(tenant, {})[resource] = value
        out = []
        for name in sorted(names):
            used = per.get(name, {})
            weight = weights.get(name, 1.0)
            top = max([used.get(r, 0) / c for r, c in capacity.items() if c > 0] or [0.0])
            out.append({"name": name, "weight": weight, "used": used, "dominant_share": round(top / weight, 4)})
        return out

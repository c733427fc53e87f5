"""Quotas: a namespace's limits and usage."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.model import SpecError
from scheduler.model.quantities import format_quantity
from scheduler.state.app import App


class QuotaClient(ClientBase):
    """Set, read and remove namespace quotas."""

    def set_quota(self, *, cpu=None, memory=None, tasks: int | None = None, resources: dict | None = None) -> dict:
        """Set this namespace's quota (limits not given are left as they are); returns it."""
        from scheduler.model.quantities import parse_resources
        raw = dict(resources or {})
        if cpu is not None:
            raw["cpu"] = cpu
        if memory is not None:
            raw["memory"] = memory
        limits = parse_resources(raw, "quota") if raw else {}
        if tasks is not None:
            if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0:
                raise SpecError("quota tasks must be a whole number of 0 or more.")
            limits["tasks"] = tasks
        self.store.set_quota(limits)
        record = self.quota()
        self._record("quota-set", quota=_quantities(record["quota"]))
        return record

    def remove_quota(self) -> bool:
        removed = self.store.remove_quota()
        self._record("quota-rm", removed=removed)
        return removed

    def quota(self) -> dict:
        """This namespace's quota and usage: {namespace, quota: {resource: limit}, used: {...}}."""
        quota, usage = self.store.quota(), self.store.usage()
        used = {k: v for k, v in usage.items() if not k.startswith("tenant:")}
        return {"namespace": self.namespace, "quota": quota, "used": used}

    def quotas(self) -> list[dict]:
        """Every namespace with a quota in this Redis, with its usage."""
        out = []
        for ns in self.store.quota_namespaces():
            other = self if ns == self.namespace else type(self)(app=App(client=self.app.client, namespace=ns))
            out.append(other.quota())
        return out


def _quantities(values: dict) -> str:
    """Limits in words, as history details: ``cpu=4,memory=8Gi,tasks=10``."""
    return ",".join(f"{k}={v if k == 'tasks' else format_quantity(k, v)}" for k, v in sorted(values.items()))

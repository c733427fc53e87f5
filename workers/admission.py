"""How many tasks of a group a namespace's quota and the job's ``parallelism`` admit,
counted as the worker plans: the rule of ``fit.over_quota`` (which commit.lua enforces),
applied one task after another to the usage read with the nodes, and the job's live
tasks as its tallies say; so the worker does not plan what the commit would refuse."""

from __future__ import annotations

from scheduler.engine.fit import over_quota
from scheduler.model import JobSpec
from scheduler.model.quantities import format_quantity


def admit(namespace: str, spec: JobSpec, count: int, usage: dict[str, int], quota: dict[str, int]):
    """How many of ``count`` tasks of ``spec`` the namespace's quota admits (the rule of
    ``fit.over_quota``, one task after another), and why the next one is refused."""
    if not quota:
        return count, ""
    used = dict(usage)
    for admitted in range(count):
        reason = over_quota(namespace, spec.resources, used, quota)
        if reason is not None:
            resource = reason.rsplit(" ", 2)[-2]
            have = used.get(resource, 0)
            need = 1 if resource == "tasks" else spec.resources.get(resource, 0)
            return admitted, (f"{reason}: {format_quantity(resource, have)}/{format_quantity(resource, quota[resource])} "
                              f"used, task needs {format_quantity(resource, need)}.")
        use(used, spec, 1)
    return count, ""


def use(usage: dict[str, int], spec: JobSpec, count: int) -> None:
    if count:
        for resource, amount in spec.resources.items():
            usage[resource] = usage.get(resource, 0) + amount * count
        usage["tasks"] = usage.get("tasks", 0) + count


def within_parallelism(spec: JobSpec, count: int, live: int):
    """How many of ``count`` tasks of ``spec`` its ``parallelism`` admits beside its
    ``live`` tasks (commit.lua's rule), and why the next one waits."""
    if not spec.parallelism or live + count <= spec.parallelism:
        return count, ""
    allowed = max(0, spec.parallelism - live)
    return allowed, (f"job {spec.id} runs its parallelism of {spec.parallelism}: {live + allowed} of its tasks are "
                     f"live or being placed.")

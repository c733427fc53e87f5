"""The groups of a claimed batch and the order they are placed in.

A group is a set of identical tasks (same job, spec version, pinned node and nominated
node) that the placement engine places from one node ordering; :func:`batches` gives the
groups of a batch in placement order, one-task jobs of one placement shape merged into
one pass, bin-packed jobs' larger tasks first among groups of one priority (first-fit
decreasing: the small tasks then fill the room the large ones leave, rather than the
large ones finding it taken in pieces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from scheduler.engine.placement import placement_shape
from scheduler.model import BINPACK, JobSpec
from scheduler.model.constraints import pins_a_node


@dataclass
class Group:
    """Identical tasks: same job, same spec version, same pinned node (global jobs), same
    nominated node (a preemptor's next attempt tries its nominated node first). A gang's
    members are one group whatever their nominations (a gang preempts as a whole, each
    member nominated to its own node): ``nominated_of`` gives each member's."""

    spec: JobSpec
    pin: str
    nominated: str
    task_ids: list[str]
    nominated_of: dict[str, str] | None = None

    def nomination(self, task_id: str) -> str:
        return self.nominated or (self.nominated_of or {}).get(task_id, "")


def batches(groups: list[Group], counts: dict[str, dict[str, int]], faults: dict[str, dict[str, int]],
            node: Mapping[str, float] | None = None):
    """``node``: a typical node's capacity per resource (the mean), which measures how
    large a task is; none: claim order within a priority."""
    if len({group.spec.tenant for group in groups}) > 1:
        # Several tenants: claim.lua's order is theirs by dominant share (priority first
        # within a tenant); placing in it keeps a contended batch fair.
        yield from ((group, False) for group in groups)
        return
    yield from _one_tenant_batches(groups, counts, faults, node or {})


def _one_tenant_batches(groups: list[Group], counts: dict[str, dict[str, int]], faults: dict[str, dict[str, int]],
                        node: Mapping[str, float]):
    """The groups to place, in order (claim order: priority first), each with whether its
    tasks are independent: groups of one task, of a job with nothing placed and no recent
    failures, not pinned or nominated, are merged by :func:`placement_shape` into one
    placement pass, at the place of the first of them.

    Among groups of one priority, those pinned to a node (a global job's task, or a
    ``node.hostname==``/``node.name==``/``node.id==`` constraint) come first, as SwarmKit
    schedules tasks with node constraints first: the free tasks after them see their load
    and go elsewhere, rather than take the one node the pinned ones can use. Then
    bin-packed jobs' larger tasks first (:func:`size`), in the places bin-packed groups
    hold: spread jobs keep claim order (a large task first would take a whole node that a
    spread of small ones leaves for it)."""
    groups = _larger_bin_packed_first(sorted(groups, key=lambda group: (-group.spec.priority, not _pinned(group))),
                                      node)
    classes: dict[tuple, list[Group]] = {}
    for group in groups:
        spec = group.spec
        if (len(group.task_ids) == 1 and not group.pin and not group.nominated and not counts.get(spec.id)
                and spec.id not in faults and not spec.rules):  # a job's rules are its own
            classes.setdefault(placement_shape(spec), []).append(group)
    merged: dict[int, list[Group]] = {}  # id of a class's first group -> the class
    for members in classes.values():
        if len(members) > 1 and len({group.spec.id for group in members}) == len(members):  # one task per job
            merged[id(members[0])] = members
    within = {id(group) for members in merged.values() for group in members}
    for group in groups:
        members = merged.get(id(group))
        if members is not None:
            yield Group(group.spec, "", "", [member.task_ids[0] for member in members]), True
        elif id(group) not in within:
            yield group, False


def _larger_bin_packed_first(groups: list[Group], node: Mapping[str, float]) -> list[Group]:
    """``groups`` (in order of priority and pinning) with the bin-packed ones of each such
    run reordered among their own places, largest first (stable)."""
    out = list(groups)
    start = 0
    while start < len(out):
        run_key = (out[start].spec.priority, _pinned(out[start]))
        end = start
        while end < len(out) and (out[end].spec.priority, _pinned(out[end])) == run_key:
            end += 1
        places = [i for i in range(start, end) if out[i].spec.strategy == BINPACK]
        for i, group in zip(places, sorted((out[i] for i in places), key=lambda g: -size(g.spec, node))):
            out[i] = group
        start = end
    return out


def size(spec: JobSpec, node: Mapping[str, float]) -> float:
    """How large one task of ``spec`` is: the sum over resources of its request as a
    fraction of a typical node's capacity (FFDAvgSum, Panigrahy et al., "Heuristics for
    Vector Bin Packing", 2011)."""
    return sum(amount / node[resource] for resource, amount in spec.resources.items()
               if amount > 0 and node.get(resource, 0) > 0)


def _pinned(group: Group) -> bool:
    return bool(group.pin) or pins_a_node(group.spec.constraints)


def regroup(groups: list[Group], keep: set[str]) -> list[Group]:
    kept = [Group(g.spec, g.pin, g.nominated, [t for t in g.task_ids if t in keep], g.nominated_of) for g in groups]
    return [g for g in kept if g.task_ids]

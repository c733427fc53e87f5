"""Topology spread (kube's ``topologySpreadConstraints``), over the job's own tasks or
those of the jobs its ``match`` names.

``topology_spread: [{attribute: node.labels.zone, max_skew: 1, when_unsatisfiable:
DoNotSchedule, min_domains: 3}]``: a task may go to a domain only if, after it, that
domain holds at most ``max_skew`` more counted tasks than the domain holding the fewest
(the global minimum over the eligible domains: values of the attribute on the nodes that
pass the job's constraints, platform and plugins, whatever their status or taints; with
fewer than ``min_domains`` of them, the minimum is 0). A node without the attribute is
in no domain: ``DoNotSchedule`` never places there. ``ScheduleAnyway`` only prefers the
domains with fewer tasks. ``DoNotSchedule`` is enforced by the commit
(``scheduler/engine/topology_spread.py``, ``lua/commit.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.constraints import attribute_getter
from scheduler.model.domains import domain_attribute
from scheduler.model.errors import SpecError
from scheduler.model.fields import check_fields
from scheduler.model.quantities import whole
from scheduler.model.selectors import Selector, parse_selector

DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"


@dataclass(frozen=True, slots=True)
class TopologySpread:
    attribute: str  # as counted (node.id is node.name)
    max_skew: int
    hard: bool  # DoNotSchedule
    min_domains: int  # 0: not given
    selector: Selector | None  # None: the job's own tasks
    written: str  # the attribute as written

    def raw(self) -> dict:
        out: dict = {"attribute": self.written, "max_skew": self.max_skew,
                     "when_unsatisfiable": DO_NOT_SCHEDULE if self.hard else SCHEDULE_ANYWAY}
        if self.min_domains:
            out["min_domains"] = self.min_domains
        if self.selector is not None:
            out.update(self.selector.raw())
        return out


def parse_topology_spread(raw, job: str) -> tuple[TopologySpread, ...]:
    if raw is None:
        return ()
    example = "[{attribute: node.labels.zone, max_skew: 1, when_unsatisfiable: DoNotSchedule}]"
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: topology_spread must be a list such as {example}.")
    out = []
    for i, item in enumerate(raw):
        what = f"job {job}: topology_spread[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{what} must be a mapping with an attribute, such as {example[1:-1]}.")
        check_fields(item, ("attribute", "max_skew", "when_unsatisfiable", "min_domains", "match",
                            "match_expressions"), what)
        if not isinstance(item.get("attribute"), str):
            raise SpecError(f"{what} needs an attribute, the topology domain such as node.labels.zone "
                            f"(kube's topologyKey).")
        written = item["attribute"].strip()
        attribute_getter(written, f"{what} attribute")
        given = item.get("max_skew", 1)
        skew = whole(given)
        if skew is None or not 1 <= skew <= 1_000_000:
            raise SpecError(f"{what} max_skew must be a whole number from 1 to 1000000, not {given!r}.")
        when = item.get("when_unsatisfiable", DO_NOT_SCHEDULE)
        if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise SpecError(f"{what} when_unsatisfiable {when!r} is not one of DoNotSchedule, ScheduleAnyway.")
        min_domains = whole(item.get("min_domains", 0))
        if "min_domains" in item:
            if min_domains is None or not 1 <= min_domains <= 10_000:
                raise SpecError(f"{what} min_domains must be a whole number from 1 to 10000, "
                                f"not {item['min_domains']!r}.")
            if when != DO_NOT_SCHEDULE:
                raise SpecError(f"{what} min_domains applies to when_unsatisfiable: DoNotSchedule only.")
        selector = parse_selector(item, what, required=False)
        out.append(TopologySpread(domain_attribute(written), skew, when == DO_NOT_SCHEDULE, min_domains, selector,
                                  written))
    return tuple(out)

"""Job affinity and anti-affinity (kube's inter-pod affinity): place a job's tasks in (or
away from) topology domains that hold a live task of the jobs a selector matches.

``job_affinity: [{match: {app: db}, attribute: node.hostname, required: true}]`` or with
``weight: 1..100`` instead of ``required`` (soft: preferred, kube's weighted terms).
``job_anti_affinity`` takes the same entries. Required entries are enforced by the commit
(``scheduler/engine/job_affinity.py``, ``lua/commit.lua``), with kube's semantics: every
required affinity entry must be met; the first task of a job whose required affinity
matches no live task yet may go anywhere when the job's own labels meet the selector;
required anti-affinity is symmetric (a running job's keeps new tasks of the jobs it
matches away as well); a node without the attribute meets no affinity entry and every
anti-affinity entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.constraints import attribute_getter
from scheduler.model.domains import domain_attribute
from scheduler.model.errors import SpecError
from scheduler.model.fields import check_fields
from scheduler.model.quantities import whole
from scheduler.model.selectors import Selector, parse_selector


@dataclass(frozen=True, slots=True)
class JobAffinity:
    selector: Selector
    attribute: str  # as counted (node.id is node.name)
    required: bool
    weight: int  # soft entries: 1..100 (0 for required ones)
    written: str

    def raw(self) -> dict:
        out = {**self.selector.raw(), "attribute": self.written}
        return {**out, "required": True} if self.required else {**out, "weight": self.weight}


def parse_job_affinity(raw, job: str, field: str) -> tuple[JobAffinity, ...]:
    if raw is None:
        return ()
    example = "[{match: {app: db}, attribute: node.hostname, required: true}]"
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: {field} must be a list such as {example}.")
    out = []
    for i, item in enumerate(raw):
        what = f"job {job}: {field}[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{what} must be a mapping such as {example[1:-1]}.")
        check_fields(item, ("match", "match_expressions", "attribute", "required", "weight"), what)
        written = item.get("attribute")
        if not isinstance(written, str):
            raise SpecError(f"{what} needs an attribute, the topology domain such as node.hostname or "
                            f"node.labels.zone.")
        written = written.strip()
        attribute_getter(written, f"{what} attribute")
        required = item.get("required", False)
        if not isinstance(required, bool):
            raise SpecError(f"{what} required must be true or false.")
        weight = item.get("weight")
        if required == (weight is not None):
            raise SpecError(f"{what} needs either required: true or a weight from 1 to 100 (soft), not both.")
        if weight is not None and (whole(weight) is None or not 1 <= whole(weight) <= 100):
            raise SpecError(f"{what} weight must be a whole number from 1 to 100, not {weight!r}.")
        weight = whole(weight)
        selector = parse_selector(item, what)
        out.append(JobAffinity(selector, domain_attribute(written), required, weight or 0, written))
    return tuple(out)

"""Soft node affinities (Nomad's ``affinity``): nodes to prefer, or with a negative
weight to avoid, without ever making a task wait.

``affinities: [{attribute: node.labels.zone, operator: "==", value: eu-1, weight: 50}]``
takes any constraint key and operator (``==`` by default; ``=`` is ``==``), and a weight
from -100 to 100 other than 0 (50 by default). A node scores the sum of the weights of
the entries it matches over the sum of their sizes (Nomad's node affinity score, from -1
to 1), combined with the strategy (``scheduler/engine/affinity.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.constraints import Constraint, parse_constraint_at
from scheduler.model.errors import SpecError
from scheduler.model.fields import check_fields
from scheduler.model.quantities import whole

DEFAULT_WEIGHT = 50


@dataclass(frozen=True, slots=True)
class Affinity:
    constraint: Constraint
    weight: int

    def raw(self) -> dict:
        c = self.constraint
        out = {"attribute": c.key, "operator": c.op}
        if c.value:
            out["value"] = c.value
        return {**out, "weight": self.weight}


def parse_affinities(raw, job: str) -> tuple[Affinity, ...]:
    if raw is None:
        return ()
    example = "[{attribute: node.labels.zone, operator: '==', value: eu-1, weight: 50}]"
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: affinities must be a list such as {example}.")
    out = []
    for i, item in enumerate(raw):
        what = f"job {job}: affinities[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{what} must be a mapping with an attribute, such as {example[1:-1]}.")
        check_fields(item, ("attribute", "operator", "value", "weight"), what)
        if not isinstance(item.get("attribute"), str):
            raise SpecError(f"{what} needs an attribute, such as {example[1:-1]}.")
        operator = item.get("operator", "==")
        operator = "==" if operator == "=" else operator
        if not isinstance(operator, str) or operator == "distinct_property":
            raise SpecError(f"{what} operator {operator!r} is not a constraint operator an affinity may use.")
        value = item.get("value", "")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what} value must be a string or number.")
        given = item.get("weight", DEFAULT_WEIGHT)
        weight = whole(given)
        if weight is None or not -100 <= weight <= 100 or weight == 0:
            raise SpecError(f"{what} weight must be a whole number from -100 to 100 other than 0, not {given!r}.")
        text = f"{item['attribute'].strip()} {operator} {value}".strip()
        if operator in ("==", "!=", "<", "<=", ">", ">="):
            text = f"{item['attribute'].strip()}{operator}{value}"
        constraint = parse_constraint_at(text, what)
        if constraint.op != operator:
            raise SpecError(f"{what} operator {operator!r} is not a constraint operator.")
        out.append(Affinity(constraint, weight))
    return tuple(out)

"""A job's disruption budget: how many of its tasks voluntary disruptions (a drain, a
rebalance) may take down at once, kube's PodDisruptionBudget.

``disruption_budget: {max_unavailable: 1}`` (or ``"25%"``) or ``{min_available: 3}`` (or
``"75%"``), counted over the job's healthy running tasks (``scheduler/engine/budgets.py``
has the arithmetic). Service and global jobs take either field, as a count or a
percentage of their expected tasks. Batch and sysbatch jobs take only a whole
``min_available``: their tasks run to completion and are not replaced, so there is no
steady count to take a share of, as kube allows only an integer ``minAvailable`` for pods
whose controller has no scale. Every error is one sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.fields import check_fields
from scheduler.model.quantities import whole
from scheduler.model.states import RUN_TO_COMPLETION

MAX_UNAVAILABLE, MIN_AVAILABLE = "max_unavailable", "min_available"
_FIELDS = (MAX_UNAVAILABLE, MIN_AVAILABLE)
_PERCENT = re.compile(r"^([0-9]{1,3})%$")
_ASCII_SPACE = " \t\n\r\f\v"  # what the JSON Schema's pattern allows around it
MAX_COUNT = 1_000_000


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """Exactly one of the two is set: a whole number, or a percentage written ``"25%"``."""

    max_unavailable: int | str | None = None
    min_available: int | str | None = None

    @property
    def field(self) -> str:
        return MAX_UNAVAILABLE if self.max_unavailable is not None else MIN_AVAILABLE

    @property
    def value(self) -> int | str:
        return self.max_unavailable if self.max_unavailable is not None else self.min_available  # type: ignore[return-value]

    def __str__(self) -> str:
        return f"{self.field} {self.value}"


def percent(value: int | str) -> int | None:
    """The percentage a value is written as (``"25%"`` -> 25), or None for a count."""
    if isinstance(value, str):
        return int(_PERCENT.match(value).group(1))  # type: ignore[union-attr]
    return None


def _value(raw, name: str, job: str):
    where = f"job {job}: disruption_budget.{name}"
    if isinstance(raw, str):
        match = _PERCENT.match(raw.strip(_ASCII_SPACE))
        if match is None:
            raise SpecError(f"{where} must be a whole number or a percentage such as \"25%\", not {raw!r}.")
        if int(match.group(1)) > 100:
            raise SpecError(f"{where} must be a percentage from 0% to 100%, not {raw!r}.")
        return f"{int(match.group(1))}%"
    count = whole(raw)  # 3, or 3.0 as JSON may write it
    if count is None:
        raise SpecError(f"{where} must be a whole number or a percentage such as \"25%\", not {raw!r}.")
    if not 0 <= count <= MAX_COUNT:
        raise SpecError(f"{where} must be a whole number from 0 to {MAX_COUNT}, not {raw}.")
    return count


def parse_disruption_budget(raw, job: str, job_type: str) -> DisruptionBudget | None:
    """The ``disruption_budget`` block of job ``job`` of type ``job_type`` (None when absent)."""
    if raw is None:
        return None
    where = f"job {job}: disruption_budget"
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a mapping such as {{max_unavailable: 1}} or {{min_available: \"75%\"}}.")
    check_fields(raw, _FIELDS, where)
    if len(raw) != 1:
        raise SpecError(f"{where} takes one of max_unavailable or min_available, "
                        f"{'not both' if raw else 'and has neither'}.")
    name, value = next(iter(raw.items()))
    parsed = _value(value, name, job)
    if job_type in RUN_TO_COMPLETION and (name != MIN_AVAILABLE or isinstance(parsed, str)):
        raise SpecError(f"{where} of a {job_type} job takes only a whole min_available, not {name} {parsed}: its "
                        f"tasks run to completion, so it has no steady count of tasks to measure that against.")
    return DisruptionBudget(**{name: parsed})


def disruption_budget_raw(budget: DisruptionBudget) -> dict:
    """The block as stored and shown (a percentage as ``"25%"``)."""
    return {budget.field: budget.value}

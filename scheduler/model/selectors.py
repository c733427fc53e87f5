"""Label selectors: which jobs a rule counts, by their ``labels`` (kube's label selectors).

``match: {app: db}`` requires each label to have that value; ``match_expressions: [{key,
operator: In|NotIn|Exists|DoesNotExist, values}]`` are kube's other requirements. All must
hold. Only jobs with labels have their tasks counted by domain, so a selector must require
some label (an equality, ``In`` or ``Exists``): one that a job without labels would meet
is refused rather than silently never matching such a job.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.names import parse_labels

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def holds(self, labels: dict[str, str]) -> bool:
        if self.operator == EXISTS:
            return self.key in labels
        if self.operator == DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator == IN:
            return labels.get(self.key) in self.values
        return self.key not in labels or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        return f"{self.key} {'in' if self.operator == IN else 'notin'} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Selector:
    match: tuple[tuple[str, str], ...] = ()  # sorted (label, value) pairs
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in self.match:
            if labels.get(key) != value:
                return False
        return all(requirement.holds(labels) for requirement in self.expressions)

    def __str__(self) -> str:
        """kube's text form: ``app=db,tier in (a,b)``."""
        return ",".join([f"{key}={value}" for key, value in self.match] + [str(r) for r in self.expressions])

    def raw(self) -> dict:
        out: dict = {}
        if self.match:
            out["match"] = dict(self.match)
        if self.expressions:
            out["match_expressions"] = [{"key": r.key, "operator": r.operator,
                                         **({"values": list(r.values)} if r.values else {})}
                                        for r in self.expressions]
        return out


def parse_selector(item: dict, what: str, required: bool = True) -> Selector | None:
    """The selector of a rule entry (its ``match`` and ``match_expressions``), or None when
    it has neither and ``required`` is False."""
    match, expressions = item.get("match"), item.get("match_expressions")
    if match is None and expressions is None:
        if required:
            raise SpecError(f"{what} needs match (labels of the jobs it is about, such as {{app: db}}) or "
                            f"match_expressions.")
        return None
    pairs: dict[str, str] = {}
    if match is not None:
        if not isinstance(match, dict):
            raise SpecError(f"{what} match must be a mapping of label to value, such as {{app: db}}.")
        pairs = parse_labels(match, f"{what} match")
    requirements = []
    if expressions is not None:
        if not isinstance(expressions, list):
            raise SpecError(f"{what} match_expressions must be a list such as [{{key: tier, operator: In, "
                            f"values: [web]}}].")
        for i, expression in enumerate(expressions):
            where = f"{what} match_expressions[{i}]"
            if not isinstance(expression, dict) or not set(expression) <= {"key", "operator", "values"}:
                raise SpecError(f"{where} must be {{key, operator, values}}.")
            key, operator = expression.get("key"), expression.get("operator")
            parse_labels({key: ""} if isinstance(key, str) else {None: ""}, f"{where}")
            if operator not in OPERATORS:
                raise SpecError(f"{where} operator {operator!r} is not one of {', '.join(OPERATORS)}.")
            values = expression.get("values")
            if operator in (IN, NOT_IN):
                if (not isinstance(values, list) or not values
                        or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values)):
                    raise SpecError(f"{where}: {operator} needs a non-empty list of values.")
                requirements.append(Requirement(key, operator, tuple(sorted({str(v) for v in values}))))
            else:
                if values:
                    raise SpecError(f"{where}: {operator} takes no values.")
                requirements.append(Requirement(key, operator))
    selector = Selector(tuple(sorted(pairs.items())), tuple(requirements))
    if selector.matches({}):
        raise SpecError(f"{what} must require some label (match, or match_expressions with In or Exists): only "
                        f"jobs with labels are counted, and this selector would match jobs without any.")
    return selector

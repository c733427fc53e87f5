"""Placement constraints: SwarmKit's ``key==value`` / ``key!=value`` over node attributes,
extended with Nomad's operators (``<``, ``<=``, ``>``, ``>=``, ``regexp``, ``in``,
``is_set``, ``is_not_set``, ``version``, ``semver``, ``set_contains``,
``set_contains_any``, ``distinct_property``).

Every operator but ``distinct_property`` looks at the node alone. ``distinct_property``
(``node.labels.rack distinct_property 2``: at most 2 live tasks of the job per rack
value) depends on where the job's tasks are: it is parsed here, with the others, and
enforced as a domain rule (``scheduler/engine/distinct_property.py``, and the commit).

A constraint is parsed once, at submit time (an unknown key or operator is a spec error
then, never a silent mismatch later), and evaluated against many nodes.
A missing label compares as the empty string, as in SwarmKit.

Architectures are compared by their canonical name on both sides, as SwarmKit's platform
filter does: ``x86_64`` (and ``x86-64``) is ``amd64``, ``aarch64`` is ``arm64``. A node
reporting ``x86_64`` satisfies ``node.platform.arch==amd64`` and the other way round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from scheduler.model.errors import SpecError
from scheduler.model.versions import version_test

ARCH_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64"}


def normalize_arch(arch: str) -> str:
    """The canonical name of an architecture (SwarmKit's: ``x86_64`` -> ``amd64``,
    ``aarch64`` -> ``arm64``); other names unchanged."""
    return ARCH_ALIASES.get(arch.casefold(), arch)


_FIXED_KEYS: dict[str, Callable] = {
    "node.id": lambda node: node.name,
    "node.name": lambda node: node.name,
    "node.hostname": lambda node: node.hostname,
    "node.role": lambda node: node.role,
    "node.platform.os": lambda node: node.os,
    "node.platform.arch": lambda node: normalize_arch(node.arch),
}
_LABEL_PREFIXES = {"node.labels.": "labels", "engine.labels.": "engine_labels"}
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")

# The first operator in the text splits key from value (a key holds none of ``=!<>``);
# at one position the longest wins, so that ``<=`` is not read as ``<``.
_SYMBOL_OP_RE = re.compile(r"==|!=|<=|>=|<|>")
_WORD_OPS = ("regexp", "in", "is_set", "is_not_set", "version", "semver", "set_contains", "set_contains_any",
             "distinct_property")
_UNARY_OPS = ("is_set", "is_not_set")
DISTINCT = "distinct_property"


def attribute_getter(key: str, what: str = "constraint") -> Callable:
    """The function reading ``key`` (``node.labels.zone``...) from a node; unknown keys are errors."""
    getter = _FIXED_KEYS.get(key)
    if getter is not None:
        return getter
    for prefix, field_name in _LABEL_PREFIXES.items():
        if key.startswith(prefix):
            label = key[len(prefix):]
            if not _LABEL_KEY_RE.fullmatch(label):
                raise SpecError(f"{what} key {key!r} has an invalid label name.")
            return lambda node, f=field_name, k=label: getattr(node, f).get(k, "")
    known = ", ".join(list(_FIXED_KEYS) + ["node.labels.<key>", "engine.labels.<key>"])
    raise SpecError(f"{what} key {key!r} is not known; use one of {known}.")


_NUMBER_RE = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")


def _as_number(text: str):
    """A decimal number, or None. Not ``float()``: "nan", "inf" and "1_000" are text here."""
    return float(text) if _NUMBER_RE.fullmatch(text) else None


@dataclass(frozen=True, slots=True)
class Constraint:
    """One parsed expression, e.g. ``node.labels.zone==eu-1``."""

    key: str
    op: str
    value: str
    text: str
    get: Callable = field(compare=False, repr=False)
    test: Callable = field(compare=False, repr=False)

    def matches(self, node) -> bool:
        return self.test(self.get(node))

    @property
    def dynamic(self) -> bool:
        """Whether it depends on where the job's tasks are (``distinct_property``), not on
        the node alone."""
        return self.op == DISTINCT

    @property
    def limit(self) -> int:
        """``distinct_property``'s most tasks per value (1 when not written)."""
        return int(self.value) if self.value else 1

    def __str__(self) -> str:
        return self.text


def _tester(op: str, value: str, text: str) -> Callable[[str], bool]:
    if op == "==":
        folded = value.casefold()
        return lambda actual: actual.casefold() == folded
    if op == "!=":
        folded = value.casefold()
        return lambda actual: actual.casefold() != folded
    if op == "is_set":
        return lambda actual: actual != ""
    if op == "is_not_set":
        return lambda actual: actual == ""
    if op == "in":
        choices = frozenset(part.strip().casefold() for part in value.split(",") if part.strip())
        if not choices:
            raise SpecError(f"constraint {text!r} needs a comma-separated list after 'in'.")
        return lambda actual: actual.casefold() in choices
    if op in ("version", "semver"):
        test = version_test(value, strict=op == "semver")
        if test is None:
            raise SpecError(f"constraint {text!r} has an invalid {op} constraint {value!r}; write comparisons such as "
                            f"'>= 1.2, < 2' (operators =, !=, >, <, >=, <={', ~>' if op == 'version' else ''}).")
        return test
    if op in ("set_contains", "set_contains_any"):
        wanted = frozenset(part.strip() for part in value.split(",") if part.strip())
        if not wanted:
            raise SpecError(f"constraint {text!r} needs a comma-separated list after {op!r}.")
        if op == "set_contains":
            return lambda actual: wanted <= {part.strip() for part in actual.split(",")}
        return lambda actual: not wanted.isdisjoint({part.strip() for part in actual.split(",")})
    if op == DISTINCT:
        if value and (not value.isdigit() or not 1 <= int(value) <= 1_000_000):
            raise SpecError(f"constraint {text!r}: distinct_property takes a whole number of tasks from 1 to "
                            f"1000000, or none for 1.")
        return lambda actual: True  # enforced where the job's tasks are counted
    if op == "regexp":
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise SpecError(f"constraint {text!r} has an invalid regular expression: {exc}.") from None
        return lambda actual: pattern.search(actual) is not None
    # Ordering: numeric when both sides are numbers, otherwise by string.
    number = _as_number(value)
    compare = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
               ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}[op]

    def ordered(actual: str) -> bool:
        if actual == "":
            return False
        actual_number = _as_number(actual)
        if number is not None and actual_number is not None:
            return compare(actual_number, number)
        return compare(actual, value)

    return ordered


def parse_constraint(text) -> Constraint:
    """Parse one expression; raise :class:`SpecError` naming the problem."""
    if not isinstance(text, str):
        raise SpecError(f"constraint {text!r} must be a non-empty string such as 'node.labels.zone==eu-1'.")
    return _parse_text(text)


@lru_cache(maxsize=1024)  # workers parse every job's spec; most jobs share their few constraints
def _parse_text(text: str) -> Constraint:
    if not text.strip():
        raise SpecError(f"constraint {text!r} must be a non-empty string such as 'node.labels.zone==eu-1'.")
    expr = text.strip()
    parts = expr.split(None, 2)
    if len(parts) >= 2 and parts[1] in _WORD_OPS and not _SYMBOL_OP_RE.search(parts[0]):
        key, op = parts[0], parts[1]
        value = parts[2].strip() if len(parts) == 3 else ""
        if op in _UNARY_OPS and value:
            raise SpecError(f"constraint {expr!r}: {op} takes no value.")
        if op not in _UNARY_OPS and op != DISTINCT and not value:
            raise SpecError(f"constraint {expr!r}: {op} needs a value.")
        return _build(key, op, value, expr)
    match = _SYMBOL_OP_RE.search(expr)
    if match:
        key, value = expr[:match.start()], expr[match.end():]
        return _build(key.strip(), match.group(), value.strip(), expr)
    raise SpecError(
        f"constraint {expr!r} has no operator; write key==value, key!=value, key<value, "
        f"'key in a,b', 'key regexp RE', 'key is_set', 'key is_not_set', 'key version >= 1.2', "
        f"'key semver >= 1.2.0', 'key set_contains a,b', 'key set_contains_any a,b' or 'key distinct_property N'."
    )


def _build(key: str, op: str, value: str, expr: str) -> Constraint:
    if not key:
        raise SpecError(f"constraint {expr!r} has no key before {op!r}.")
    if any(c in key for c in " =!<>"):
        raise SpecError(f"constraint {expr!r} has an invalid key {key!r}.")
    getter = attribute_getter(key)
    wanted = value
    if key == "node.platform.arch" and op in ("==", "!=", "in"):  # both sides canonical
        wanted = ",".join(normalize_arch(part.strip()) for part in value.split(",")) if op == "in" \
            else normalize_arch(value)
    return Constraint(key=key, op=op, value=value, text=expr, get=getter, test=_tester(op, wanted, expr))


NODE_KEYS = ("node.id", "node.name", "node.hostname")


def pins_a_node(constraints) -> bool:
    """Whether these constraints name one node (``node.hostname==X``, ``node.name==X`` or
    ``node.id==X``): SwarmKit places such tasks before the others of a batch."""
    return any(c.op == "==" and c.key in NODE_KEYS for c in constraints)


def parse_constraint_at(text, what: str) -> Constraint:
    """:func:`parse_constraint`, its refusal saying where the text stands (``what``, such
    as ``job web: constraints[0]``), as the spec's other errors do."""
    try:
        return parse_constraint(text)
    except SpecError as exc:
        raise SpecError(f"{what} {str(exc).removeprefix('constraint ')}") from None


def parse_constraints(texts, job: str | None = None) -> tuple[Constraint, ...]:
    where = f"job {job}: constraints" if job is not None else "constraints"
    if texts is None:
        return ()
    if not isinstance(texts, (list, tuple)):
        raise SpecError(f"{where} must be a list of strings such as ['node.labels.zone==eu-1'].")
    if job is None:
        return tuple(parse_constraint(text) for text in texts)
    return tuple(parse_constraint_at(text, f"{where}[{i}]") for i, text in enumerate(texts))

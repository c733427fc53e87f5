"""``filter``: which records of a list to keep, in the manner of Nomad's filter
expressions: clauses joined by ``and``, each ``<field> <op> <value>``:

    status == "running"
    type != "service" and priority >= 50
    id matches "^web-"            (a regular expression, searched)
    status in ["failed", "complete"]

Fields are the list's record fields (case does not matter: ``Status`` is ``status``);
values are JSON strings or numbers. A clause ``id matches "^<text>"`` whose text is plain
(no other regular expression characters) also narrows the index range read, as Nomad's
``prefix`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import orjson

from scheduler.tools.api.problems import Problem

_STRING = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'  # a JSON string
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"
_VALUE = f"(?:{_STRING}|{_NUMBER})"
_OPS = r"==|!=|>=|<=|>|<|not matches|matches|not in|in"
_LIST = rf"\[ *(?:{_VALUE}(?: *, *{_VALUE})*)? *\]"
_CLAUSE = re.compile(rf" *([A-Za-z_]+) *({_OPS}) *({_VALUE}|{_LIST}) *")
_AND = re.compile(r" +and +")
_PLAIN = re.compile(r"[A-Za-z0-9_-]*")
MAX_FILTER = 1000


@dataclass(frozen=True)
class Filter:
    test: Callable[[dict], bool]
    prefix: str = ""  # every kept record's id starts with it


def pattern(fields: tuple[str, ...]) -> str:
    """The filter's grammar over ``fields`` as a JSON Schema pattern (ECMA 262: field
    names in either case spelt out, as it has no flag for case)."""
    names = "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name) for name in fields)
    clause = f" *(?:{names}) *(?:{_OPS}) *(?:{_VALUE}|{_LIST}) *"
    return f"^{clause}(?: +and +{clause})*$"


def parse(text: str | None, fields: tuple[str, ...]) -> Filter:
    """The filter ``text`` says, over records with ``fields`` (400 for one it cannot read)."""
    if not text:
        return Filter(lambda record: True)
    if len(text) > MAX_FILTER:
        raise Problem(400, f"the filter is longer than {MAX_FILTER} characters.")
    tests, prefix = [], ""
    for clause in _AND.split(text.strip(" ")):
        match = _CLAUSE.fullmatch(clause)
        if match is None:
            raise Problem(400, f"the filter clause {clause[:80]!r} is not <field> <op> <value>, such as "
                               f'status == "running" (ops ==, !=, <, <=, >, >=, matches, in).')
        field, op, raw = match.group(1).lower(), match.group(2), match.group(3)
        if field not in fields:
            raise Problem(400, f"the filter names no field {field!r}; the fields are {', '.join(fields)}.")
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise Problem(400, f"the filter value {raw[:80]} is not a JSON string, number or list.") from None
        tests.append(_test(field, op, value))
        if field == "id" and op == "matches" and isinstance(value, str) and value.startswith("^") \
                and _PLAIN.fullmatch(value[1:]) and len(value) > len(prefix) + 1:
            prefix = value[1:]
    return Filter(lambda record: all(test(record) for test in tests), prefix)


def _test(field: str, op: str, value) -> Callable[[dict], bool]:
    if op in ("matches", "not matches"):
        if not isinstance(value, str):
            raise Problem(422, f"{op} takes a regular expression in quotes.")
        try:
            pattern = re.compile(value)
        except re.error as exc:  # the filter reads, but its expression does not compile: what it says cannot be done
            raise Problem(422, f"the filter's regular expression {value[:80]!r} is not valid: {exc}.") from None
        found = op == "matches"
        return lambda record: (pattern.search(str(record.get(field, ""))) is not None) == found
    if op in ("in", "not in"):
        if not isinstance(value, list):
            raise Problem(422, f"{op} takes a list, such as [\"failed\", \"complete\"].")
        inside = op == "in"
        return lambda record: (record.get(field) in value) == inside
    compare = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
               ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}[op]

    def test(record: dict) -> bool:
        try:
            return compare(record.get(field), value)
        except TypeError:  # an order between a number and a text, or null
            return False

    return test

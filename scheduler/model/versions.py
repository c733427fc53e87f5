"""Versions for the ``version`` and ``semver`` constraint operators, as Nomad defines them.

``version`` follows HashiCorp's go-version, which Nomad's ``version`` operator uses: a
version is ``v?`` and dot-separated numbers (any count, padded to three), an optional
pre-release (``-rc1``, or glued on: ``1.0beta``) and build metadata (``+ent``, ignored
when ordering). A constraint is a comma-separated list of ``op version`` with ``=``
(or none), ``!=``, ``>``, ``<``, ``>=``, ``<=`` and ``~>`` (pessimistic: ``~> 1.2``
means ``>= 1.2, < 2``; ``~> 1.2.3`` means ``>= 1.2.3, < 1.3``). Pre-releases follow
go-version's rule: a constraint without a pre-release never matches a pre-release
version, and one with a pre-release matches only pre-releases of the same numbers.

``semver`` is strict Semantic Versioning 2.0 (Nomad's ``semver`` operator): one to three
numbers, a pre-release only after ``-``, SemVer's precedence (a pre-release sorts before
its release; its dot-separated identifiers compare numerically when both are numbers,
else by ASCII, numbers first, and a longer list of equal identifiers sorts after), build
metadata ignored; pre-releases take part in every comparison, and there is no ``~>``.

A node value that is not a version never meets either operator.
"""

from __future__ import annotations

import re
from typing import Callable

# go-version's VersionRegexpRaw and (for semver, with the numbers limited to three)
# SemverRegexpRaw: group 1 the numbers, 4 or 7 the pre-release, 10 the metadata.
_ID = r"[0-9A-Za-z\-~]"
_VERSION_RE = re.compile(
    rf"v?([0-9]+(\.[0-9]+)*?)(-([0-9]+{_ID}*(\.{_ID}+)*)|(-?([A-Za-z\-~]+{_ID}*(\.{_ID}+)*)))?"
    rf"(\+({_ID}+(\.{_ID}+)*))?")
_SEMVER_RE = re.compile(
    rf"v?([0-9]+(\.[0-9]+){{0,2}})(-([0-9]+{_ID}*(\.{_ID}+)*)|(-([A-Za-z\-~]+{_ID}*(\.{_ID}+)*)))?"
    rf"(\+({_ID}+(\.{_ID}+)*))?")
_OPS_RE = re.compile(r"\s*(~>|!=|>=|<=|=|>|<|)\s*(\S+)\s*")


class Version:
    """A parsed version: its numbers (at least three), the count written, pre-release, metadata."""

    __slots__ = ("segments", "written", "pre", "metadata")

    def __init__(self, segments: tuple[int, ...], written: int, pre: str, metadata: str):
        self.segments, self.written, self.pre, self.metadata = segments, written, pre, metadata

    def __repr__(self) -> str:
        return f"Version({'.'.join(map(str, self.segments))}{'-' + self.pre if self.pre else ''})"


def _parse(text: str, pattern: re.Pattern) -> Version | None:
    match = pattern.fullmatch(text.strip())
    if match is None:
        return None
    numbers = [int(part) for part in match.group(1).split(".")]
    if any(n >= 2**63 for n in numbers):
        return None  # go-version parses into int64
    written = len(numbers)
    numbers += [0] * (3 - len(numbers))
    return Version(tuple(numbers), written, match.group(7) or match.group(4) or "", match.group(10) or "")


def parse_version(text: str) -> Version | None:
    """A go-version version, or None."""
    return _parse(text, _VERSION_RE)


def parse_semver(text: str) -> Version | None:
    """A strict SemVer 2.0 version of one to three numbers, or None."""
    return _parse(text, _SEMVER_RE)


def _sign(a, b) -> int:
    return (a > b) - (a < b)


def _go_part(a: str, b: str) -> int:
    """go-version's comparePart: numbers before words; an empty part loses to a word and
    beats a number."""
    if a == b:
        return 0
    a_num, b_num = a.isdigit(), b.isdigit()
    if a == "":
        return -1 if b_num else 1
    if b == "":
        return 1 if a_num else -1
    if a_num and not b_num:
        return -1
    if b_num and not a_num:
        return 1
    if not a_num:
        return 1 if a > b else -1
    return 1 if int(a) > int(b) else -1


def go_compare(v: Version, other: Version) -> int:
    """go-version's Compare: -1, 0 or 1."""
    if v.segments == other.segments:
        if v.pre == other.pre:
            return 0
        if not v.pre:
            return 1
        if not other.pre:
            return -1
        mine, theirs = v.pre.split("."), other.pre.split(".")
        for i in range(max(len(mine), len(theirs))):
            part = _go_part(mine[i] if i < len(mine) else "", theirs[i] if i < len(theirs) else "")
            if part:
                return part
        return 0
    a, b = v.segments, other.segments
    for i in range(max(len(a), len(b))):
        if i >= len(a):
            return 0 if not any(b[i:]) else -1
        if i >= len(b):
            return 0 if not any(a[i:]) else 1
        if a[i] != b[i]:
            return _sign(a[i], b[i])
    return 0


def semver_compare(v: Version, other: Version) -> int:
    """SemVer 2.0 precedence: -1, 0 or 1 (metadata ignored)."""
    if v.segments != other.segments:
        return _sign(v.segments, other.segments)
    if v.pre == other.pre:
        return 0
    if not v.pre or not other.pre:
        return 1 if not v.pre else -1
    for a, b in zip(v.pre.split("."), other.pre.split(".")):
        if a == b:
            continue
        if a.isdigit() and b.isdigit():
            return _sign(int(a), int(b))
        if a.isdigit() != b.isdigit():
            return -1 if a.isdigit() else 1
        return _sign(a, b)
    return _sign(len(v.pre.split(".")), len(other.pre.split(".")))


def _prerelease_ok(v: Version, c: Version) -> bool:
    """go-version's prereleaseCheck."""
    if c.pre and v.pre:
        return v.segments == c.segments
    return not (v.pre and not c.pre)


def _pessimistic(v: Version, c: Version) -> bool:
    if not _prerelease_ok(v, c) or (c.pre and not v.pre) or go_compare(v, c) < 0:
        return False
    if len(c.segments) > len(v.segments):
        return False
    if any(v.segments[i] != c.segments[i] for i in range(c.written - 1)):
        return False
    last = len(c.segments) - 1
    return c.segments[last] <= v.segments[last]


def _go_check(op: str, c: Version) -> Callable[[Version], bool]:
    if op in ("", "="):
        return lambda v: go_compare(v, c) == 0
    if op == "!=":
        return lambda v: go_compare(v, c) != 0
    if op == "~>":
        return lambda v: _pessimistic(v, c)
    wanted = {">": (1,), "<": (-1,), ">=": (0, 1), "<=": (-1, 0)}[op]
    return lambda v: _prerelease_ok(v, c) and go_compare(v, c) in wanted


def _semver_check(op: str, c: Version) -> Callable[[Version], bool]:
    wanted = {"": (0,), "=": (0,), "!=": (-1, 1), ">": (1,), "<": (-1,), ">=": (0, 1), "<=": (-1, 0)}[op]
    return lambda v: semver_compare(v, c) in wanted


def version_test(text: str, strict: bool) -> Callable[[str], bool] | None:
    """A test of a node value against the constraint list ``text`` (``>= 5.10, < 6``), or
    None when ``text`` is not one (``strict``: semver's rules, else go-version's)."""
    parse = parse_semver if strict else parse_version
    checks = []
    for single in text.split(","):
        match = _OPS_RE.fullmatch(single)
        if match is None or (strict and match.group(1) == "~>"):
            return None
        bound = parse(match.group(2))
        if bound is None:
            return None
        checks.append((_semver_check if strict else _go_check)(match.group(1), bound))

    def test(actual: str) -> bool:
        version = parse(actual)
        return version is not None and all(check(version) for check in checks)

    return test

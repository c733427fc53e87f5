"""Node taints and job tolerations, with kube's matching rules.

A taint (``sched node taint NODE KEY[=VALUE]:EFFECT``) keeps work off a node unless the
job tolerates it: ``NoSchedule`` refuses new tasks, ``PreferNoSchedule`` only ranks the
node last, ``NoExecute`` refuses new tasks and evicts running ones that do not tolerate
it; one tolerated for ``toleration_seconds`` is evicted that long after it was placed on
the node, or after the taint was added if it was there first (kube's taint manager
counts from when it finds the pod on the tainted node). Such a node ranks after every
node that would keep the task (``scheduler/engine/taints.py``), and one tolerated for 0
seconds refuses the task as an untolerated taint does: it would be evicted as it lands.

A toleration ``{key, operator, value, effect}`` tolerates a taint when its effect is
empty or the taint's, and its key is empty (with ``Exists``: every taint) or the taint's,
and, with ``Equal`` (the default), its value is the taint's.

In the node hash a node's taints are one field, ``taints``: space-separated
``key=value:Effect`` (``key:Effect`` for an empty value), a ``NoExecute`` taint followed
by ``@<ms>``, when it was added (Redis time). ``lua/commit.lua`` reads the same text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.quantities import whole

NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
EQUAL, EXISTS = "Equal", "Exists"
# Keys as labels; values of up to 63 letters, digits, '_', '.' and '-' (kube's).
_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,252}")
_VALUE_RE = re.compile(r"[A-Za-z0-9_.-]{0,63}")
_TEXT_RE = re.compile(r"([^=:@\s]+)(?:=([^:@\s]*))?:([A-Za-z]+)(?:@(\d+))?")
MAX_TOLERATION_S = 365 * 86_400


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    added_ms: int = 0  # NoExecute: when the taint was added (toleration_seconds count from it)

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    @property
    def refuses(self) -> bool:
        """Whether a task that does not tolerate it may not be placed on the node."""
        return self.effect != PREFER_NO_SCHEDULE

    def same(self, other: Taint) -> bool:
        return (self.key, self.value, self.effect) == (other.key, other.value, other.effect)


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""  # "" tolerates every effect
    seconds: int | None = None  # NoExecute: how long a running task stays after the taint (None: for ever)

    def tolerates(self, taint: Taint) -> bool:
        """kube's ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == EXISTS or self.value == taint.value

    def raw(self) -> dict:
        out: dict = {"key": self.key, "operator": self.operator} if self.key else {"operator": self.operator}
        if self.operator == EQUAL:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.seconds is not None:
            out["toleration_seconds"] = self.seconds
        return out


def _effect(effect, what: str) -> str:
    if effect not in EFFECTS:
        raise SpecError(f"{what} effect {effect!r} is not one of {', '.join(EFFECTS)}.")
    return effect


def parse_taint(text, added_ms: int = 0) -> Taint:
    """``KEY[=VALUE]:EFFECT`` (``dedicated=gpu:NoSchedule``, ``spot:PreferNoSchedule``)."""
    if not isinstance(text, str) or ":" not in text:
        raise SpecError(f"taint {text!r} must look like KEY[=VALUE]:EFFECT, such as dedicated=gpu:NoSchedule.")
    head, _, effect = text.strip().rpartition(":")
    key, _, value = head.partition("=")
    if not _KEY_RE.fullmatch(key):
        raise SpecError(f"taint {text!r} has an invalid key {key!r}; use letters, digits, '.', '/', '-' and '_'.")
    if not _VALUE_RE.fullmatch(value):
        raise SpecError(f"taint {text!r} has an invalid value {value!r}; use up to 63 letters, digits, '.', '-' "
                        f"and '_'.")
    _effect(effect, f"taint {text!r}:")
    return Taint(key, value, effect, added_ms if effect == NO_EXECUTE else 0)


def parse_taints(texts) -> tuple[Taint, ...]:
    """Taints from ``--taint`` options, each once (the last of a key and effect wins, as kube keeps one)."""
    out: dict[tuple[str, str], Taint] = {}
    for text in texts or ():
        taint = parse_taint(text)
        out[(taint.key, taint.effect)] = taint
    return tuple(out.values())


def taints_text(taints) -> str:
    """The node hash's ``taints`` field."""
    return " ".join(f"{taint}@{taint.added_ms}" if taint.effect == NO_EXECUTE else str(taint) for taint in taints)


def taints_from_text(text: str | None) -> tuple[Taint, ...]:
    if not text:
        return ()
    out = []
    for entry in text.split():
        match = _TEXT_RE.fullmatch(entry)
        if match is not None:
            key, value, effect, added = match.groups()
            out.append(Taint(key, value or "", effect, int(added or 0)))
    return tuple(out)


def tolerance_s(taint: Taint, tolerations) -> float | None:
    """How long (s) ``tolerations`` let a task stay under ``taint``: None when none tolerates
    it, ``math.inf`` for ever, else the shortest ``toleration_seconds`` of those that
    tolerate it (kube's getMinTolerationTime)."""
    matching = [t for t in tolerations if t.tolerates(taint)]
    if not matching:
        return None
    limits = [t.seconds for t in matching if t.seconds is not None]
    return min(limits) if limits else math.inf


def untolerated(taints, tolerations) -> Taint | None:
    """The first of ``taints`` that refuses a task with these ``tolerations`` (kube's
    TaintToleration filter: NoSchedule and NoExecute), or None. A NoExecute taint
    tolerated for 0 seconds refuses too: the task would be evicted as it lands."""
    for taint in taints:
        if taint.effect != PREFER_NO_SCHEDULE:
            seconds = tolerance_s(taint, tolerations)
            if seconds is None or seconds == 0:
                return taint
    return None


def intolerable_preferences(taints, tolerations) -> int:
    """How many PreferNoSchedule taints the task does not tolerate (kube's TaintToleration score)."""
    return sum(1 for taint in taints
               if taint.effect == PREFER_NO_SCHEDULE and not any(t.tolerates(taint) for t in tolerations))


def parse_tolerations(raw, job: str) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    example = "[{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]"
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: tolerations must be a list such as {example}.")
    out = []
    for i, item in enumerate(raw):
        what = f"job {job}: tolerations[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{what} must be a mapping such as {{key: dedicated, operator: Equal, value: gpu}}.")
        unknown = set(item) - {"key", "operator", "value", "effect", "toleration_seconds"}
        if unknown:
            raise SpecError(f"{what} has unknown field {sorted(unknown, key=str)[0]!r}; known fields are effect, key, "
                            f"operator, toleration_seconds, value.")
        key, operator, value = item.get("key", ""), item.get("operator", EQUAL), item.get("value", "")
        if operator not in (EQUAL, EXISTS):
            raise SpecError(f"{what} operator {operator!r} is not one of Equal, Exists.")
        if not isinstance(key, str) or (key and not _KEY_RE.fullmatch(key)):
            raise SpecError(f"{what} key {key!r} is not valid; use letters, digits, '.', '/', '-' and '_'.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what} value must be a string.")
        value = str(value)
        if not key and operator != EXISTS:
            raise SpecError(f"{what} has no key, so its operator must be Exists (it then tolerates every taint).")
        if operator == EXISTS and value:
            raise SpecError(f"{what}: operator Exists takes no value.")
        effect = item.get("effect")
        effect = "" if effect is None else effect
        if effect != "":
            _effect(effect, what)
        seconds = item.get("toleration_seconds")
        if seconds is not None:
            given, seconds = seconds, whole(seconds)
            if seconds is None or not 0 <= seconds <= MAX_TOLERATION_S:
                raise SpecError(f"{what} toleration_seconds must be a whole number of seconds from 0 to "
                                f"{MAX_TOLERATION_S}, not {given!r}.")
            if effect != NO_EXECUTE:
                raise SpecError(f"{what} toleration_seconds applies to effect NoExecute only.")
        out.append(Toleration(key, operator, value, effect, seconds))
    return tuple(out)


def eviction(taints, tolerations, placed_ms: int = 0) -> tuple[int, Taint] | None:
    """When a task with these ``tolerations``, placed on the node at ``placed_ms``, is
    evicted by the ``NoExecute`` taints among ``taints`` (ms, Redis time), and by which;
    None if it may stay. kube's taint manager: a taint no toleration tolerates evicts at
    once (0); one tolerated only for ``toleration_seconds`` evicts that long after the
    task met it: after the task was placed, or after the taint was added if the task was
    there first."""
    soonest: tuple[int, Taint] | None = None
    for taint in taints:
        if taint.effect != NO_EXECUTE:
            continue
        seconds = tolerance_s(taint, tolerations)
        if seconds is None:
            return 0, taint
        if seconds != math.inf:
            at = max(taint.added_ms, placed_ms) + 1000 * int(seconds)
            if soonest is None or at < soonest[0]:
                soonest = (at, taint)
    return soonest

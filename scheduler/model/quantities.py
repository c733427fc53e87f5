"""Resource quantities: parse what people write (``0.5``, ``500m``, ``256MiB``, ``1Gi``, ``2G``)
into the integers the scheduler stores and compares.

Everything is an integer so that Python and Lua compare exactly the same numbers:
cpu in millicores, memory in bytes, any other resource (``gpu``, ``fpga``...) in units.
"""

from __future__ import annotations

import re

from scheduler.model.errors import SpecError

CPU = "cpu"
MEMORY = "memory"

# Bounds that catch typos (``cpu: 4000`` meant as millicores, memory in bits...) without
# limiting any real machine: a million cores, a pebibyte of memory, a million devices.
MAX_MILLICORES = 1_000_000 * 1000
MAX_BYTES = 2**50
MAX_UNITS = 1_000_000

_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_MEMORY_RE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtTpP]i?)?[bB]?\s*")
_CPU_RE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(m?)\s*")
_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")

# Names that mean cpu or memory but would be taken as a generic resource no node has
# (``cpus: 1`` would wait forever as "insufficient cpus"): a word for cores or memory,
# alone or with a unit or count after it. ``gpu`` and the like are none of these.
_LOOKALIKES = (
    (CPU, re.compile(r"(?:v|n|num_?)?(?:cpus?|cores?|vcores?|processors?|millicores?)"
                     r"(?:[_-]?(?:count|cores?|m|millis|millicores?))?")),
    (MEMORY, re.compile(r"(?:mem|memory|memorys|memories|ram)(?:[_-]?(?:[kmgtp]i?b?|bytes?))?")),
)
_HOW = {CPU: "in cores (0.5) or millicores (500m)", MEMORY: "with a unit (256Mi, 1Gi)"}


def whole(value) -> int | None:
    """``value`` as an int when it is a whole number, written ``2`` or ``2.0`` (JSON
    Schema's ``integer`` is the same for both); None for anything else (``true``, ``2.5``,
    ``"2"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{what} must be a number or a quantity string, not {value!r}.")
    if value != value or value in (float("inf"), float("-inf")):
        raise SpecError(f"{what} must be a finite number, not {value!r}.")
    return value


def parse_cpu(value, what: str = "cpu") -> int:
    """Cores as a number or string (``2``, ``0.5``, ``"500m"``) -> millicores."""
    if isinstance(value, str):
        match = _CPU_RE.fullmatch(value)
        if not match:
            raise SpecError(f"{what} {value!r} is not a cpu quantity; write cores like 0.5 or millicores like 500m.")
        amount = float(match.group(1)) * (1 if match.group(2) else 1000)
    else:
        amount = _number(value, what) * 1000
    return _bounded(round(amount), MAX_MILLICORES, what, value)


def parse_memory(value, what: str = "memory") -> int:
    """Bytes as a number or string (``268435456``, ``256MiB``, ``1Gi``, ``2G``) -> bytes."""
    if isinstance(value, str):
        match = _MEMORY_RE.fullmatch(value)
        if not match:
            raise SpecError(f"{what} {value!r} is not a memory quantity; write it like 256MiB, 1Gi or 2G.")
        if match.group(2) == "m":
            number = match.group(1)
            raise SpecError(f"{what} {value!r} is ambiguous (millibytes in Kubernetes); write {number}Mi or {number}M.")
        unit = (match.group(2) or "").lower()
        factor = _BINARY.get(unit) or _DECIMAL.get(unit) or 1
        amount = float(match.group(1)) * factor
    else:
        amount = _number(value, what)
    return _bounded(round(amount), MAX_BYTES, what, value)


def parse_units(value, what: str) -> int:
    """A countable resource such as ``gpu: 2`` -> units (whole numbers only)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, str):
        raise SpecError(f"{what} counts whole units (like 1 or 2), not {value!r}.")
    amount = _number(value, what)
    if amount != int(amount):
        raise SpecError(f"{what} must be a whole number, not {value!r}.")
    return _bounded(int(amount), MAX_UNITS, what, value)


def _bounded(amount: int, limit: int, what: str, original) -> int:
    if amount < 0:
        raise SpecError(f"{what} must not be negative, got {original!r}.")
    if amount > limit:
        raise SpecError(f"{what} {original!r} is larger than any machine this scheduler accepts.")
    return amount


def parse_resources(raw, what: str = "resources") -> dict[str, int]:
    """A mapping such as ``{cpu: 0.5, memory: 256MiB, gpu: 1}`` -> ``{"cpu": 500, "memory": ..., "gpu": 1}``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping of resource names to amounts, like {{cpu: 0.5, memory: 256MiB}}.")
    parsed: dict[str, int] = {}
    for name, value in raw.items():
        meant = lookalike(name)
        if meant is not None:
            raise SpecError(f"{what} has an unknown resource {name!r}; did you mean {meant!r}? "
                            f"Write {meant} {_HOW[meant]}.")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise SpecError(f"{what} has an invalid resource name {name!r}; use lowercase letters, digits, - and _.")
        label = f"{what}.{name}"
        if name == CPU:
            parsed[name] = parse_cpu(value, label)
        elif name == MEMORY:
            parsed[name] = parse_memory(value, label)
        else:
            try:
                parsed[name] = parse_units(value, label)
            except SpecError:
                meant = misspelt(name, value)
                if meant is None:
                    raise
                raise SpecError(f"{what} has an unknown resource {name!r}; did you mean {meant!r}? Resources other "
                                f"than cpu and memory count whole units.") from None
    return parsed


def misspelt(name: str, value) -> str | None:
    """``cpu`` or ``memory`` when ``value`` is an amount of it (a fraction, ``500m``,
    ``256MiB``: no count of units) and ``name`` is spelt nearly like it (``memroy``,
    ``cpuu``; not ``gpu``, whose count ``2`` is fine and whose ``2Gi`` is no typo of a
    name), else None."""
    from difflib import SequenceMatcher  # only on the way to an error

    for meant, parse in ((MEMORY, parse_memory), (CPU, parse_cpu)):
        try:
            parse(value)
        except SpecError:
            continue
        if SequenceMatcher(None, name, meant).ratio() >= 0.7:
            return meant
    return None


def lookalike(name) -> str | None:
    """``cpu`` or ``memory`` when ``name`` is another way of writing it (``cpus``, ``mem``,
    ``ram``, ``memory_mb``, ``CPU``...), else None."""
    if not isinstance(name, str) or name in (CPU, MEMORY):
        return None
    folded = name.strip().lower()
    for meant, pattern in _LOOKALIKES:
        if pattern.fullmatch(folded):
            return meant
    return None


# Every unit memory is written in, largest first, binary and decimal side by side: the
# first that divides an amount exactly is the one people wrote it in (10G, not 9765625Ki).
_MEMORY_UNITS = (("Pi", 2**50), ("P", 10**15), ("Ti", 2**40), ("T", 10**12), ("Gi", 2**30), ("G", 10**9),
                 ("Mi", 2**20), ("M", 10**6), ("Ki", 2**10), ("k", 10**3))


def format_quantity(name: str, amount: int) -> str:
    """The inverse for display: 500 -> ``500m``, 2000 -> ``2``, 268435456 -> ``256Mi``,
    10**10 -> ``10G`` (from Ki up; fewer bytes are shown as a number)."""
    if name == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if name == MEMORY:
        for unit, factor in _MEMORY_UNITS:
            if unit not in ("Pi", "P", "k") and amount % factor == 0 and amount >= factor:
                return f"{amount // factor}{unit}"
        if amount >= 2**30:
            return f"{amount / 2**30:.1f}Gi"
        if amount >= 2**20:
            return f"{amount / 2**20:.1f}Mi"
        return str(amount)
    return str(amount)


def format_memory_exact(amount: int) -> str | int:
    """Bytes as people write them, and exactly what :func:`parse_memory` reads back:
    536870912 -> ``512Mi``, 10**9 -> ``1G``, 10**10 -> ``10G``; bytes that no unit
    divides stay a number. For specs shown to people, which must stay the same spec when
    submitted again."""
    if amount > 0:
        for unit, factor in _MEMORY_UNITS:
            if amount % factor == 0:
                return f"{amount // factor}{unit}"
    return amount


def decimal_memory(amount: int) -> str | None:
    """The amount in the decimal unit it was most likely written in (``10G`` for 10**10
    bytes), when it is a whole number of decimal megabytes but not of mebibytes: what
    ``10GB`` or ``500M`` gives, which someone used to Docker's ``10g`` (binary) may not
    have meant. None otherwise."""
    if amount <= 0 or amount % 10**6 or amount % 2**20 == 0:
        return None
    for unit, factor in (("T", 10**12), ("G", 10**9), ("M", 10**6)):
        if amount % factor == 0:
            return f"{amount // factor}{unit}"
    return None

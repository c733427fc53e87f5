"""``periodic``: when a job is launched (Nomad's periodic block, kube's CronJob).

A periodic job runs no task itself: each tick of its schedule launches a child job
``<id>/periodic-<unix time>`` (control/periodic.py). This module is the schedule alone:
parsing the block and, given an instant, the next tick, with no clock of its own.

Cron expressions are those of Nomad's cronexpr: 5 fields (minute hour day month weekday),
6 (the same and a year), 7 (seconds first, a year last), or a macro (``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``); and
``@every <duration>`` (``@every 90s``, ``@every 1h30m``), counted from the submit. The
fields are read by croniter; the year field by this module (croniter's year matching
skips years). Times are wall-clock times in ``time_zone`` (default UTC), with Nomad's
behaviour across daylight saving changes: a tick whose wall-clock time does not exist
that day (the hour skipped in spring) is skipped, and one whose time occurs twice (the
hour repeated in autumn) is launched twice, once at each instant.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

from scheduler.model.errors import SpecError
from scheduler.model.quantities import whole

OVERLAPS = ("allow", "forbid", "replace")  # kube's concurrencyPolicy: Allow, Forbid, Replace
DEFAULT_STARTING_DEADLINE_S = 60
MAX_HISTORY = 1000
_MACROS = {
    "@yearly": "0 0 0 1 1 * *", "@annually": "0 0 0 1 1 * *", "@monthly": "0 0 0 1 * * *",
    "@weekly": "0 0 0 * * 0 *", "@daily": "0 0 0 * * * *", "@midnight": "0 0 0 * * * *",
    "@hourly": "0 0 * * * * *",
}
_DURATION_RE = re.compile(r"(?:(\d+(?:\.\d+)?)(h|m|s))+")
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNITS = {"h": 3600, "m": 60, "s": 1}
_YEARS = range(1970, 2100)
_SLACK = timedelta(hours=3)  # more than any zone's change of offset: beyond it, wall order is instant order
_MAX_STEPS = 10_000  # wall-clock ticks looked at for one answer (a year of an every-hour cron is 8,760)
_FIELDS_HELP = ("write 5 fields (minute hour day month weekday), 6 with a year, 7 with seconds first and a "
                "year last, a macro such as @daily, or @every 10m")


@dataclass(frozen=True, slots=True)
class History:
    completed: int = 3
    failed: int = 1


@dataclass(frozen=True)
class Periodic:
    """A parsed ``periodic`` block: ``cron`` as written, and the schedule it stands for."""

    cron: str
    time_zone: str = "UTC"
    overlap: str = "allow"
    starting_deadline: float = DEFAULT_STARTING_DEADLINE_S
    history: History = field(default_factory=History)
    suspend: bool = False
    every_s: float = 0.0  # @every: the interval (s); 0 for a cron
    fields: str = ""  # the cron as croniter's 6 fields (seconds first), without the year
    years: frozenset[int] = frozenset()  # the years the cron allows (empty: any)

    @property
    def zone(self):
        return timezone.utc if self.time_zone == "UTC" else ZoneInfo(self.time_zone)

    def next_after(self, after_ms: int, anchor_ms: int = 0) -> int | None:
        """The first tick strictly after ``after_ms`` (ms since the epoch), or None when
        the schedule has no more (its last year is past). ``anchor_ms`` is when an
        ``@every`` schedule began (the job's submit)."""
        if self.every_s:
            step = int(self.every_s * 1000)
            if after_ms < anchor_ms:
                return anchor_ms
            return anchor_ms + ((after_ms - anchor_ms) // step + 1) * step
        return _next_cron(self, after_ms)

    def ticks(self, after_ms: int, until_ms: int, anchor_ms: int = 0, limit: int = 1000) -> list[int]:
        """Ticks in (after_ms, until_ms], the first ``limit`` of them."""
        out: list[int] = []
        at = after_ms
        while len(out) < limit:
            tick = self.next_after(at, anchor_ms)
            if tick is None or tick > until_ms:
                break
            out.append(tick)
            at = tick
        return out

    def first_launch(self, now_ms: int) -> int | float:
        """A new version's first tick: the first after ``now_ms`` (``math.inf``: none, or suspended)."""
        if self.suspend:
            return math.inf
        tick = self.next_after(now_ms, now_ms)
        return math.inf if tick is None else tick


def _next_cron(periodic: Periodic, after_ms: int) -> int | None:
    """The first instant after ``after_ms`` whose wall-clock time in the zone matches the
    cron: wall-clock times are walked in order (croniter, on naive times), each mapped to
    its instants in the zone (none in a gap, two in a repeated hour). Wall-clock order is
    instant order except inside a repeated hour, so the walk starts that much earlier and
    goes on that much past the first match."""
    zone = periodic.zone
    after = datetime.fromtimestamp(after_ms / 1000, timezone.utc)
    start = after.astimezone(zone).replace(tzinfo=None) - _repeated(zone, after) - timedelta(seconds=1)
    best: int | None = None
    best_wall: datetime | None = None
    steps = 0
    while steps < _MAX_STEPS:
        if periodic.years and start.year not in periodic.years:
            later = [y for y in periodic.years if y > start.year]
            if not later:
                break
            start = datetime(min(later), 1, 1) - timedelta(seconds=1)
        it = croniter(periodic.fields, start, second_at_beginning=True, max_years_between_matches=5)
        while steps < _MAX_STEPS:
            steps += 1
            try:
                candidate = it.get_next(datetime)
            except Exception:  # croniter found nothing within its search (no such date for years)
                return best
            if best_wall is not None and candidate > best_wall:
                return best
            if periodic.years and candidate.year not in periodic.years:
                start = candidate
                break
            for instant in _instants(candidate, zone):
                ms = int(instant.timestamp() * 1000)
                if ms > after_ms and (best is None or ms < best):
                    best, best_wall = ms, candidate + _fallen(zone, instant)
        else:
            break
    return best


def _fallen(zone, instant: datetime) -> timedelta:
    """How much wall-clock time repeated shortly before ``instant`` (an autumn change of the
    offset within the last hours): later wall-clock times up to that much may still come
    earlier, in the hour's first pass."""
    if zone is timezone.utc:
        return timedelta(0)
    return max(timedelta(0), (instant - _SLACK).astimezone(zone).utcoffset() - instant.astimezone(zone).utcoffset())


def _repeated(zone, instant: datetime) -> timedelta:
    """How much wall-clock time repeats soon after ``instant`` (an autumn change of the
    offset within the next hours), else nothing."""
    if zone is timezone.utc:
        return timedelta(0)
    return max(timedelta(0), instant.astimezone(zone).utcoffset() - (instant + _SLACK).astimezone(zone).utcoffset())


def _instants(wall: datetime, zone) -> list[datetime]:
    """The instants at which the clocks of ``zone`` show ``wall``: none when DST skips it,
    two when it repeats it."""
    if zone is timezone.utc:
        return [wall.replace(tzinfo=timezone.utc)]
    found = []
    for fold in (0, 1):
        local = wall.replace(tzinfo=zone, fold=fold)
        instant = local.astimezone(timezone.utc)
        if instant.astimezone(zone).replace(tzinfo=None) == wall and instant not in found:
            found.append(instant)
    return sorted(found)


def _parse_years(text: str, what: str) -> frozenset[int]:
    """cronexpr's year field (1970 to 2099, with ``*``, ``/``, ``,`` and ``-``); empty for any year."""
    if text == "*":
        return frozenset()
    years: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                low, high = _YEARS.start, _YEARS.stop - 1
            elif "-" in base:
                low, high = (int(v) for v in base.split("-", 1))
            else:
                low = int(base)
                high = _YEARS.stop - 1 if step_text else low
        except ValueError:
            raise SpecError(f"{what} has a year field {text!r} that is not a year, a range or a list of them "
                            f"(1970 to 2099).") from None
        if step < 1 or not (_YEARS.start <= low <= high < _YEARS.stop):
            raise SpecError(f"{what} has a year field {text!r} outside 1970 to 2099.")
        years.update(range(low, high + 1, step))
    return frozenset(years)


def parse_duration(text: str) -> float | None:
    """``90s``, ``10m``, ``1h30m`` (Go's form, as Nomad writes durations) in seconds; None if not one."""
    text = text.strip()
    if not _DURATION_RE.fullmatch(text):
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in _PART_RE.findall(text))


def parse_cron(cron, what: str) -> tuple[float, str, frozenset[int]]:
    """(every seconds, croniter's 6 fields, years) of a cron text; a SpecError naming it if
    it is not one."""
    if not isinstance(cron, str) or not cron.strip():
        raise SpecError(f"{what} must be a cron expression such as '0 2 * * *'; {_FIELDS_HELP}.")
    text = " ".join(cron.split())
    if text.startswith("@every"):
        seconds = parse_duration(text[len("@every"):])
        if seconds is None or seconds < 1:
            raise SpecError(f"{what} {cron!r} needs a duration of at least 1s after @every, such as "
                            f"'@every 30s' or '@every 1h30m'.")
        return seconds, "", frozenset()
    if text.startswith("@"):
        full = _MACROS.get(text.lower())
        if full is None:
            raise SpecError(f"{what} {cron!r} is not a macro cron knows; use one of "
                            f"{', '.join(sorted(_MACROS))} or @every <duration>.")
    else:
        parts = text.split(" ")
        if len(parts) == 5:
            full = " ".join(["0", *parts, "*"])
        elif len(parts) == 6:
            full = " ".join(["0", *parts])
        elif len(parts) == 7:
            full = text
        else:
            count = f"{len(parts)} field{'' if len(parts) == 1 else 's'}"
            raise SpecError(f"{what} {cron!r} has {count}; {_FIELDS_HELP}.")
    *six, year = full.split(" ")
    # cronexpr writes "the last Friday" as 5L; croniter as L5.
    six[5] = re.sub(r"\b([0-7])L\b", r"L\1", six[5], flags=re.IGNORECASE)
    fields = " ".join(six)
    if not croniter.is_valid(fields, second_at_beginning=True):
        raise SpecError(f"{what} {cron!r} is not a valid cron expression; {_FIELDS_HELP}.")
    return 0.0, fields, _parse_years(year, f"{what} {cron!r}")


def check_fires(periodic: Periodic, now_ms: int, what: str) -> None:
    """Refuse a cron that launches nothing from ``now_ms`` on: one that matches no date at
    all (30 February), or whose years are past."""
    if periodic.next_after(now_ms) is not None:
        return
    if periodic.next_after(0) is None or not periodic.years:
        raise SpecError(f"{what} {periodic.cron!r} never fires: no date matches it.")
    raise SpecError(f"{what} {periodic.cron!r} never fires again: its last year, {max(periodic.years)}, is past.")


def check_zone(name, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise SpecError(f"{what} must be a time zone name such as Europe/Berlin or UTC.")
    if name == "UTC":
        return name
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        import difflib

        close = difflib.get_close_matches(name, sorted(available_timezones()), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"{what} {name!r} is not a time zone this machine knows{hint}; use a name such as "
                        f"Europe/Berlin or UTC.") from None
    return name


def _int(value, what: str, low: int, high: int) -> int:
    number = whole(value)
    if number is None or not low <= number <= high:
        raise SpecError(f"{what} must be a whole number from {low} to {high}, not {value!r}.")
    return number


_KNOWN = ("cron", "time_zone", "overlap", "starting_deadline", "history", "suspend")


def parse_periodic(raw, job: str) -> Periodic | None:
    if raw is None:
        return None
    what = f"job {job}: periodic"
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping such as {{cron: '0 2 * * *'}}.")
    unknown = sorted(set(raw) - set(_KNOWN), key=str)
    if unknown:
        raise SpecError(f"{what} has unknown field {unknown[0]!r}; known fields are {', '.join(_KNOWN)}.")
    if "cron" not in raw:
        raise SpecError(f"{what} needs a cron, such as {{cron: '0 2 * * *'}} or {{cron: '@every 10m'}}.")
    every, fields, years = parse_cron(raw["cron"], f"{what}.cron")
    zone = check_zone(raw.get("time_zone", "UTC"), f"{what}.time_zone")
    overlap = raw.get("overlap", "allow")
    if overlap not in OVERLAPS:
        raise SpecError(f"{what}.overlap must be one of {', '.join(OVERLAPS)}, not {overlap!r}.")
    deadline = raw.get("starting_deadline", DEFAULT_STARTING_DEADLINE_S)
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not 0 < deadline <= 86_400 * 7:
        raise SpecError(f"{what}.starting_deadline must be a number of seconds above 0 and at most 604800, "
                        f"not {deadline!r}.")
    history = raw.get("history", {})
    if not isinstance(history, dict) or set(history) - {"completed", "failed"}:
        raise SpecError(f"{what}.history must be {{completed: <n>, failed: <n>}}.")
    kept = History(completed=_int(history.get("completed", 3), f"{what}.history.completed", 0, MAX_HISTORY),
                   failed=_int(history.get("failed", 1), f"{what}.history.failed", 0, MAX_HISTORY))
    suspend = raw.get("suspend", False)
    if not isinstance(suspend, bool):
        raise SpecError(f"{what}.suspend must be true or false.")
    return Periodic(cron=" ".join(raw["cron"].split()), time_zone=zone, overlap=overlap,
                    starting_deadline=float(deadline), history=kept, suspend=suspend, every_s=every,
                    fields=fields, years=years)


def periodic_raw(periodic: Periodic) -> dict:
    return {"cron": periodic.cron, "time_zone": periodic.time_zone, "overlap": periodic.overlap,
            "starting_deadline": periodic.starting_deadline,
            "history": {"completed": periodic.history.completed, "failed": periodic.history.failed},
            "suspend": periodic.suspend}

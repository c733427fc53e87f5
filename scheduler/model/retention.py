"""How long ended work is kept: a namespace's retention settings and a job's
``ttl_after_finished``.

Ended tasks of a job that still runs are kept for ``task_retention`` after they ended,
and at most ``ended_tasks_per_job`` of them (the newest); a batch job's results (each slot's task that
completed, or failed with no retry queued)
are its results and stay with the job, and so do a sysbatch job's (where it ran to its
end, which it does once per node). A job that finished (stopped, or a batch job
whose tasks have all ended) is removed with everything of it ``job_retention`` after it
finished, or its own ``ttl_after_finished`` (Kubernetes' name and meaning: seconds after
the job finished; 0 removes it as soon as the workers see it finished).

Durations are a number of seconds or a text such as ``90s``, ``30m``, ``1h``, ``7d``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from scheduler.model.errors import SpecError
from scheduler.model.quantities import whole

MAX_DURATION_S = 10 * 365 * 86_400  # ten years: long enough to mean "keep", short enough to stay a bound
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, None: 1}


def parse_duration(raw, what: str) -> float:
    """Seconds, from a number of seconds or a text with a unit (``90s``, ``30m``, ``1h``,
    ``7d``); ``what`` names the field in the one-sentence error."""
    value = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        match = _DURATION.match(raw.strip())
        if match:
            value = float(match.group(1)) * _UNIT_S[match.group(2)]
    if value is None or not 0 <= value <= MAX_DURATION_S:
        raise SpecError(f"{what} must be a duration of 0 or more (seconds, or such as 90s, 30m, 1h, 7d) up to "
                        f"ten years, not {raw!r}.")
    return value


def format_duration(seconds: float) -> str:
    """The shortest exact text for a duration: ``1h``, ``90s``, ``1.5s``."""
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def parse_ttl_after_finished(raw, job: str) -> int | None:
    """A job's ``ttl_after_finished`` as whole seconds (None: the namespace's
    ``job_retention``). Stored normalised as that number."""
    if raw is None:
        return None
    seconds = parse_duration(raw, f"job {job}: ttl_after_finished")
    if seconds != int(seconds):
        raise SpecError(f"job {job}: ttl_after_finished must be whole seconds, not {raw!r}.")
    return int(seconds)


@dataclass(frozen=True)
class Retention:
    """A namespace's retention settings (the ``config`` hash's fields of these names)."""

    task_retention: float = 3600.0  # seconds an ended task of a running job is kept
    ended_tasks_per_job: int = 100  # ended tasks kept per running job, the newest
    job_retention: float = 86_400.0  # seconds a finished job is kept (unless it has ttl_after_finished)

    @classmethod
    def from_config(cls, config: dict[str, str]) -> Retention:
        """The settings as stored (seconds and counts as text), defaults for those unset."""
        found = {}
        for f in fields(cls):
            if config.get(f.name) not in (None, ""):
                found[f.name] = int(config[f.name]) if f.type == "int" else float(config[f.name])
        return cls(**found)

    def as_config(self) -> dict[str, str]:
        return {f.name: f"{getattr(self, f.name):g}" for f in fields(self)}


SETTINGS = tuple(f.name for f in fields(Retention))
HELP = {
    "task_retention": "how long an ended task of a job that still runs is kept (its output and attempts too)",
    "ended_tasks_per_job": "how many ended tasks of a job that still runs are kept at most (the newest)",
    "job_retention": "how long a finished job (stopped, or batch with every task ended) is kept, unless its "
                     "spec has ttl_after_finished",
}


def parse_setting(name: str, raw) -> str:
    """A retention setting's value as stored (seconds or a count, as text), or a
    one-sentence error naming the setting."""
    if name == "ended_tasks_per_job":
        value = raw
        if isinstance(raw, str) and raw.strip().isdigit():
            value = int(raw.strip())
        value = whole(value)
        if value is None or not 0 <= value <= 1_000_000:
            raise SpecError(f"ended_tasks_per_job must be a whole number from 0 to 1000000, not {raw!r}.")
        return str(value)
    if name in SETTINGS:
        return f"{parse_duration(raw, name):g}"
    raise SpecError(f"{name!r} is not a retention setting; the settings are {', '.join(SETTINGS)}.")

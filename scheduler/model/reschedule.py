"""``reschedule``: what follows a failed task (Nomad's reschedule block, for every job type).

``reschedule: {delay: 5, delay_function: constant|exponential|fibonacci, max_delay: 300,
attempts: 10, interval: 3600, unlimited: false}``: a failed task is replaced after a delay
that grows with the failures of its slot (the task and the ones before it that it
replaces) inside ``interval``; at most ``attempts`` of them inside it, unless
``unlimited``. ``restart_delay`` and ``max_retries`` are shorthands for ``delay`` (with a
constant function) and ``attempts`` (over the job's whole life): a job without the block
keeps the behaviour they always had. Only failures count: a task lost with its node,
stopped by a drain or preempted is replaced at once, and its end is not an attempt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.quantities import whole

FUNCTIONS = ("constant", "exponential", "fibonacci")
MAX_ATTEMPTS = 1000
MAX_DELAY_S = 86_400


@dataclass(frozen=True, slots=True)
class Reschedule:
    delay: float = 1.0
    delay_function: str = "constant"
    max_delay: float = 3600.0
    attempts: int = 3
    interval: float = 0.0  # seconds; 0: the job's whole life
    unlimited: bool = False

    def delay_s(self, failures: int) -> float:
        """The delay before the replacement of the slot's ``failures``-th failure (1 for the first)."""
        n = max(1, failures)
        if self.delay_function == "exponential":
            value = self.delay * 2 ** min(n - 1, 60)
        elif self.delay_function == "fibonacci":
            a, b = 1, 1
            for _ in range(min(n, 90) - 1):
                a, b = b, a + b
            value = self.delay * a
        else:
            return self.delay
        return min(value, self.max_delay)

    def allows(self, failures: int) -> bool:
        """Whether a slot with ``failures`` failures (counted inside the interval, this one
        included) gets a replacement."""
        return self.unlimited or failures <= self.attempts


def _seconds(raw: dict, name: str, default: float, low: float, what: str, high: float = MAX_DELAY_S) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not low <= value <= high:
        raise SpecError(f"{what}.{name} must be a number of seconds from {low:g} to {high:g}, not {value!r}.")
    return float(value)


def parse_reschedule(raw, job: str, *, restart_delay: float, max_retries: int, unlimited: bool) -> Reschedule:
    """The job's policy: the block's fields where given, the shorthands' meaning for the
    rest (``unlimited`` is the job type's default: services and global jobs are replaced
    however often they fail)."""
    base = Reschedule(delay=restart_delay, attempts=max_retries, unlimited=unlimited)
    if raw is None:
        return base
    what = f"job {job}: reschedule"
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping such as {{delay: 5, delay_function: exponential, max_delay: 300}}.")
    known = ("delay", "delay_function", "max_delay", "attempts", "interval", "unlimited")
    unknown = sorted(set(raw) - set(known), key=str)
    if unknown:
        raise SpecError(f"{what} has unknown field {unknown[0]!r}; known fields are {', '.join(known)}.")
    function = raw.get("delay_function", "constant")
    if function not in FUNCTIONS:
        raise SpecError(f"{what}.delay_function must be one of {', '.join(FUNCTIONS)}, not {function!r}.")
    given = raw.get("attempts", max_retries)
    attempts = whole(given)
    if attempts is None or not 0 <= attempts <= MAX_ATTEMPTS:
        raise SpecError(f"{what}.attempts must be a whole number from 0 to {MAX_ATTEMPTS}, not {given!r}.")
    flag = raw.get("unlimited", unlimited if "attempts" not in raw else False)
    if not isinstance(flag, bool):
        raise SpecError(f"{what}.unlimited must be true or false.")
    delay = _seconds(raw, "delay", restart_delay, 0, what)
    max_delay = _seconds(raw, "max_delay", max(3600.0, delay), 0, what)
    if max_delay < delay:
        raise SpecError(f"{what}.max_delay ({max_delay:g}) is below delay ({delay:g}).")
    return Reschedule(delay=delay, delay_function=function, max_delay=max_delay, attempts=attempts,
                      interval=_seconds(raw, "interval", 0, 0, what, 365 * 86_400), unlimited=flag)


def reschedule_raw(r: Reschedule) -> dict:
    return {"delay": r.delay, "delay_function": r.delay_function, "max_delay": r.max_delay, "attempts": r.attempts,
            "interval": r.interval, "unlimited": r.unlimited}

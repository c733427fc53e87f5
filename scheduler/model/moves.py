"""Moves (``sched rebalance``): their states, and the namespace's rebalance settings.

A move replaces one running task of a service by a task of the same job on another node,
make before break:

- ``queued``: recorded with its plan, waiting for its turn;
- ``starting``: its turn came; its new task is being queued, pinned to the target;
- ``placing``: the new task is queued; the move waits for it to run and turn healthy
  (running, where the job has no health check);
- ``stopping``: the new task is healthy; the old task stops once its job's disruption
  budget allows;
- ``done``: the old task stopped;
- ``abandoned``: its new task could not be placed or never turned healthy within the
  deadline, or something changed under it (the job, the old task): the new task is
  stopped, the old one kept.

The settings live in the namespace's ``config`` hash with the retention settings:
``rebalance_interval`` (how often the workers rebalance on their own, 0: never),
``rebalance_strategy`` (which strategy they use) and ``rebalance_deadline`` (how long a
move waits for its new task).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from scheduler.model.errors import SchedError, SpecError
from scheduler.model.retention import parse_duration

QUEUED, STARTING, PLACING, STOPPING, DONE, ABANDONED = "queued", "starting", "placing", "stopping", "done", "abandoned"
MOVE_STATES = (QUEUED, STARTING, PLACING, STOPPING, DONE, ABANDONED)
IN_PROGRESS = (QUEUED, STARTING, PLACING, STOPPING)
ENDED = (DONE, ABANDONED)
POLICY_STRATEGIES = ("spread", "pack")


class StalePlan(SchedError):
    """A plan the cluster has moved on from: nothing of it was applied (one sentence: what changed)."""

    exit_code = 1


@dataclass(frozen=True)
class RebalanceSettings:
    """The ``config`` hash's fields of these names (defaults for those unset)."""

    rebalance_interval: float = 0.0  # seconds between the workers' own rebalances; 0: never (off)
    rebalance_strategy: str = "spread"
    rebalance_deadline: float = 300.0  # seconds a move waits for its new task to run healthy

    @classmethod
    def from_config(cls, config: dict[str, str]) -> RebalanceSettings:
        found: dict = {}
        for f in fields(cls):
            value = config.get(f.name)
            if value not in (None, ""):
                found[f.name] = value if f.name == "rebalance_strategy" else float(value)
        return cls(**found)


SETTINGS = tuple(f.name for f in fields(RebalanceSettings))
HELP = {
    "rebalance_interval": "how often the workers rebalance on their own (0: never)",
    "rebalance_strategy": "the strategy they rebalance with: spread or pack",
    "rebalance_deadline": "how long a move waits for its new task to run and turn healthy before it is abandoned",
}


def parse_setting(name: str, raw) -> str:
    """A rebalance setting's value as stored, or a one-sentence error naming the setting."""
    if name == "rebalance_strategy":
        if raw not in POLICY_STRATEGIES:
            raise SpecError(f"rebalance_strategy must be spread or pack, not {raw!r}.")
        return raw
    if name in SETTINGS:
        seconds = parse_duration(raw, name)
        if name == "rebalance_deadline" and seconds < 1:
            raise SpecError(f"rebalance_deadline must be at least 1s, not {raw!r}.")
        return f"{seconds:g}"
    raise SpecError(f"{name!r} is not a rebalance setting; the settings are {', '.join(SETTINGS)}.")

"""A move and the one step every strategy takes to find one.

A move is make before break: its task's replacement is placed on the target while the
task still holds its own node. So a move is tried on the copy the same way: the engine
places one more task of the job with the task's own node cordoned (and any node the
strategy keeps out), every rule held and the task still counted where it is; only then
is the task taken off its node. A strategy that finds the result no better takes the
trial back (:meth:`Mover.undo`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from scheduler.engine.cluster import Cluster, Resident
from scheduler.model import JobSpec


@dataclass
class Move:
    """Move ``task`` (of ``job``) from ``source`` to ``target``: found by ``strategy``,
    which improves ``score`` from ``before`` to ``after`` (lower is better when
    ``lower``), for the ``reason`` given."""

    task: str
    job: str
    source: str
    target: str
    strategy: str
    score: str
    before: float
    after: float
    reason: str
    lower: bool = True  # whether a lower score is the better one

    @property
    def gain(self) -> float:
        return self.before - self.after if self.lower else self.after - self.before

    def to_dict(self) -> dict:
        return {"task": self.task, "job": self.job, "from": self.source, "to": self.target,
                "strategy": self.strategy, "score": {"name": self.score, "before": _number(self.before),
                                                     "after": _number(self.after), "gain": _number(self.gain)},
                "reason": self.reason}


def _number(value: float):
    return int(value) if float(value).is_integer() else round(value, 2)


@dataclass
class Trial:
    """A replacement placed on the copy (``new``, on ``target``) for ``resident``, not yet kept."""

    resident: Resident
    new: str
    target: str


@dataclass
class Mover:
    """The moves of one plan, over one copy: at most ``limit`` (None: no limit), only of
    ``job``'s tasks when given, each task moved at most once."""

    cluster: Cluster
    limit: int | None = None
    job: str | None = None
    moves: list[Move] = field(default_factory=list)
    moved: set[str] = field(default_factory=set)

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.moves) >= self.limit

    def movable(self, resident: Resident) -> bool:
        return (resident.movable and resident.id not in self.moved and resident.id in self.cluster.tasks
                and (self.job is None or resident.job == self.job))

    def candidates(self, residents: Iterable[Resident]) -> list[Resident]:
        return [r for r in residents if self.movable(r)]

    def jobs(self) -> dict[str, list[Resident]]:
        """Each job with a task that may move, with its movable residents."""
        out: dict[str, list[Resident]] = {}
        for resident in self.cluster.tasks.values():
            if self.movable(resident):
                out.setdefault(resident.job, []).append(resident)
        return out

    def spec(self, resident: Resident) -> JobSpec:
        return self.cluster.specs[resident.job]

    def trial(self, resident: Resident, *, spec: JobSpec | None = None, away: Iterable[str] = ()) -> Trial | None:
        """Place a replacement of ``resident`` where the engine would (``spec``: the job's
        own, or a variant such as :meth:`Cluster.binpacked`), its node and ``away``
        cordoned; None when no node takes it."""
        if self.full:
            return None
        new = f"{resident.id}>"
        with self.cluster.cordoned([resident.node, *away]):
            target = self.cluster.place(spec or self.spec(resident), new)
        return None if target is None else Trial(resident, new, target)

    def undo(self, trial: Trial) -> None:
        self.cluster.remove(trial.new)

    def keep(self, trial: Trial, strategy: str, score: str, before: float, after: float, reason: str,
             lower: bool = True) -> Move:
        """Take the task off its node: the move is part of the plan."""
        resident = trial.resident
        self.cluster.remove(resident.id)
        self.moved.add(resident.id)
        move = Move(resident.id, resident.job, resident.node, trial.target, strategy, score, before, after, reason,
                    lower)
        self.moves.append(move)
        return move

"""A scheduler worker's own counts, returned when it stops (``sched worker --json``) and
summed over the cells of a process (workers/cells.py) and the processes of a supervisor."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStats:
    batches: int = 0
    claimed: int = 0
    placed: int = 0
    refused: int = 0
    unplaced: int = 0
    preempted: int = 0  # preemptors nominated (each evicted one or more victims)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

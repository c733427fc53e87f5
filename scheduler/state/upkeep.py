"""What a worker's upkeep has to look at, read in one round trip.

Each part of the upkeep (``SchedulerWorker.maintain``: deployments, drains, moves,
periodic launches, heartbeats, NoExecute evictions, unfinished submits, global jobs,
disruption budgets, held jobs, deadlines, the workers' own rebalance, retention) starts
by reading the index it works from, and most of the time finds it empty. :meth:`UpkeepStore.upkeep` reads how much each index holds (and the earliest
entries of those scored by time) together, so that the worker runs only the parts with
something to look at: one round trip instead of one or more per part. A part that an
entry added just after this read would have found finds it at the next upkeep, as it
would had it run a moment earlier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduler.model.moves import RebalanceSettings
from scheduler.model.retention import Retention
from scheduler.state.namespace import NamespaceStore


@dataclass(frozen=True)
class Upkeep:
    """How much each upkeep part's index holds; for the indexes scored by time, the
    earliest score (ms; None when empty)."""

    deployments: int = 0  # deployments in progress
    drains: int = 0  # drains in progress
    moves: int = 0  # moves in progress
    moves_ended: int = 0  # ended moves (kept a while)
    next_launch: float | None = None  # the earliest periodic launch (inf while suspended)
    agents: int = 0  # agent-run nodes, whose heartbeats are watched
    noexecute: int = 0  # nodes with a NoExecute taint
    filling: int = 0  # submits still queueing their tasks
    node_epoch: str | None = None
    held: int = 0  # jobs held by their dependencies
    deadlines: int = 0  # running jobs with a deadline
    budgets: int = 0  # jobs with a disruption budget
    uncounted_ends: int = 0  # ended tasks retention has not counted yet
    first_ended: float | None = None  # jobs:ended, the first job whose ended tasks are looked at
    first_finished: float | None = None  # jobs:finished, the first finished job
    first_expiring: float | None = None  # jobs:expiring, the first job's own removal time
    retention: Retention = field(default_factory=Retention)
    rebalance_interval: float = 0.0  # the workers' own rebalance (0: none)

    @property
    def launches(self) -> bool:
        return self.next_launch is not None and self.next_launch != math.inf

    def retention_due(self, now_ms: int | None) -> bool:
        """Whether a retention pass would find anything to do at ``now_ms`` (None: the
        time is not known here, so whether it holds anything at all): ends to count, a
        job's ended tasks past ``task_retention``, a finished job past ``job_retention``
        or its own ``ttl_after_finished`` (the same tests as the pass's)."""
        if self.uncounted_ends:
            return True
        if now_ms is None:
            return any(first is not None for first in (self.first_ended, self.first_finished, self.first_expiring))
        settings = self.retention
        return ((self.first_ended is not None and self.first_ended <= now_ms - int(settings.task_retention * 1000))
                or (self.first_finished is not None
                    and self.first_finished <= now_ms - int(settings.job_retention * 1000))
                or (self.first_expiring is not None and self.first_expiring <= now_ms))


class UpkeepStore(NamespaceStore):
    def upkeep(self) -> Upkeep:
        """What each upkeep part has to look at (:class:`Upkeep`), in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            self.queue_upkeep(pipe)
            return self.read_upkeep(pipe.execute())

    def queue_upkeep(self, pipe) -> None:
        """:meth:`upkeep`'s reads, queued on a pipeline; its replies go to :meth:`read_upkeep`."""
        k = self.keys
        pipe.zcard(k.active_deployments)
        pipe.hlen(k.drains)
        pipe.zcard(k.moves_active)
        pipe.zcard(k.moves_ended)
        pipe.zrange(k.launchers, 0, 0, withscores=True)
        pipe.scard(k.agents)
        pipe.scard(k.nodes_noexecute)
        pipe.zcard(k.filling)
        pipe.get(k.node_epoch)
        pipe.zcard(k.held)
        pipe.zcard(k.deadlines)
        pipe.zcard(k.budgets)
        pipe.zcard(k.ended)
        for key in (k.jobs_ended, k.jobs_finished, k.jobs_expiring):
            pipe.zrange(key, 0, 0, withscores=True)
        pipe.hgetall(k.config)

    @staticmethod
    def read_upkeep(replies: list) -> Upkeep:
        (deployments, drains, moves, moves_ended, launch, agents, noexecute, filling, epoch, held, deadlines,
         budgets, uncounted, ended, finished, expiring, config) = replies
        return Upkeep(deployments=deployments, drains=drains, moves=moves, moves_ended=moves_ended,
                      next_launch=_first(launch), agents=agents, noexecute=noexecute, filling=filling,
                      node_epoch=epoch, held=held, deadlines=deadlines, budgets=budgets, uncounted_ends=uncounted,
                      first_ended=_first(ended), first_finished=_first(finished), first_expiring=_first(expiring),
                      retention=Retention.from_config(config),
                      rebalance_interval=RebalanceSettings.from_config(config).rebalance_interval)


def _first(entries: list) -> float | None:
    """The score of a ``ZRANGE ... 0 0 WITHSCORES`` reply's entry (None when empty)."""
    return float(entries[0][1]) if entries else None

"""The scheduler worker's part in rebalancing: advancing the moves in progress (about
every 100 ms, with the deployments), and about once a second the workers' own rebalance
when ``rebalance_interval`` is set, and the removal of moves that ended long ago. Each
counted in the worker's metrics and logged."""

from __future__ import annotations

import logging

from scheduler.control import moves, rebalance
from scheduler.state.store import Store
from workers import metrics

log = logging.getLogger("sched.worker")


def advance(store: Store, name: str) -> None:
    done = moves.advance_all(store)
    metrics.MOVES.labels("started").inc(len(done.started))
    metrics.MOVES.labels("done").inc(len(done.done))
    metrics.MOVES.labels("abandoned").inc(len(done.abandoned))
    for move_id in done.abandoned:
        log.warning("%s: move %s abandoned: %s", name, move_id, store.get_move(move_id).get("message", ""))


def now_and_then(store: Store, name: str) -> None:
    """The workers' own rebalance, if due, and retention of ended moves."""
    done = rebalance.policy(store)
    if done is not None:
        metrics.REBALANCES.inc()
        applied = (done.get("applied") or {}).get("moves", [])
        metrics.REBALANCE_PLAN_SECONDS.observe(done["planned_ms"] / 1000)
        if applied:
            log.info("%s: rebalanced (%s): %d move(s) in plan %s", name, done["strategy"], len(applied),
                     done["applied"]["plan"])
    metrics.MOVES_IN_PROGRESS.set(len(store.active_move_ids()))
    store.prune_moves(store.clock_ms())

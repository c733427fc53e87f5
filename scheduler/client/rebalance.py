"""Rebalance: a plan of moves that puts running service tasks where they should be now
(``spread``: each service's spread back after nodes joined or left; ``pack``: the least
used nodes emptied), applied make before break, and the moves it made."""

from __future__ import annotations

import time

from scheduler.client.base import ClientBase
from scheduler.control import moves as advancing, rebalance
from scheduler.model.moves import ENDED


class RebalanceClient(ClientBase):
    """Plan and apply rebalances; list and wait for their moves."""

    def rebalance(self, strategy: str = "spread", max_moves: int | None = None, job: str | None = None,
                  dry_run: bool = False) -> dict:
        """Plan the moves ``strategy`` finds now (at most ``max_moves``, only of ``job``'s
        tasks when given) and, unless ``dry_run``, apply them: ``{strategy, moves, jobs,
        read, planned_ms, applied}``. Each move says its task, job, from, to, strategy,
        score (name, before, after, gain) and reason; ``jobs`` each moved job's skew
        before and after and its disruption budget; ``applied`` the plan id and its move
        ids. The moves are carried out by the workers (:meth:`moves`, :meth:`wait_moves`)."""
        done = rebalance.rebalance(self.store, strategy, max_moves, job, dry_run)
        if not dry_run:
            self._record_plan(done)
        return done

    def rebalance_plan(self, strategy: str = "spread", max_moves: int | None = None, job: str | None = None) -> dict:
        """The plan alone (:meth:`rebalance` with ``dry_run``), to apply later with :meth:`apply_rebalance`."""
        return rebalance.plan(self.store, strategy, max_moves, job)

    def apply_rebalance(self, plan: dict) -> dict:
        """Apply a plan made earlier, all or none: ``StalePlan`` (exit code 1) when the
        cluster changed since it was read. Returns ``{plan, moves}`` (the move ids)."""
        applied = rebalance.apply(self.store, plan)
        self._record_plan({**plan, "applied": applied})
        return applied

    def moves(self, limit: int = 100, active: bool = False) -> list[dict]:
        """Moves, oldest first: the newest ``limit``, or (``active``) those in progress."""
        return self.store.moves_list(self.store.active_move_ids() if active else None, limit)

    def move(self, move_id: str) -> dict:
        """One move: task, job, from, to, strategy, score, reason, state, new_task, message."""
        return self.store.get_move(move_id)

    def advance_moves(self) -> dict:
        """Advance the moves in progress once, as a worker's upkeep does (for a namespace
        served by no worker, or a test). Returns the moves started, done and abandoned."""
        done = advancing.advance_all(self.store)
        return {"started": done.started, "done": done.done, "abandoned": done.abandoned}

    def wait_moves(self, ids: list[str], timeout: float = 300.0, poll: float = 0.2) -> list[dict]:
        """Wait until every move of ``ids`` has ended (done or abandoned); returns them.
        Raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            moves = self.store.moves_list(list(ids))
            if all(move["state"] in ENDED for move in moves):
                return moves
            if time.monotonic() > deadline:
                left = [m["id"] for m in moves if m["state"] not in ENDED]
                raise TimeoutError(f"{len(left)} move(s) still in progress after {timeout:g} s: {', '.join(left[:5])}")
            time.sleep(poll)

    def _record_plan(self, done: dict) -> None:
        applied = done.get("applied") or {}
        if applied.get("plan") is not None:
            self._record("rebalance", plan=applied["plan"], strategy=done.get("strategy", ""),
                         moves=len(applied["moves"]))

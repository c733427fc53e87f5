"""Moves in Redis (``sched rebalance``): a hash per move, the namespace's list of them, the
set in progress and the tasks they hold, with the scripts that change them
(``move_open.lua``: a plan's moves, all or none, if the cluster is still as the plan read
it; ``move_set.lua``: a move's compare-and-set), and the rebalance settings.

A move is named ``<plan>-<index>`` and readable with ``redis-cli HGETALL
sched:{ns}:move:7-2``; its fields are listed in docs/redis-keys.md. Moves in progress are
bounded (``MAX_IN_PROGRESS``); ended ones are kept ``MOVES_RETENTION_MS``, and the newest
``MOVES_KEPT`` at most.
"""

from __future__ import annotations

import orjson
import redis

from scheduler.model.errors import NotFound, RedisUnavailable
from scheduler.model.moves import RebalanceSettings, StalePlan, parse_setting
from scheduler.state.namespace import NamespaceStore

MAX_IN_PROGRESS = 2000  # moves recorded and not yet ended, every plan together
MOVES_KEPT = 1000  # ended moves kept at most (the newest)
MOVES_RETENTION_MS = 3_600_000  # an ended move is removed an hour after it ended
PRUNE_STEP = 200  # ended moves removed per pass
_INTS = ("plan", "created", "updated", "ended", "started", "deadline", "from_index", "version")


def decode(fields: dict[str, str]) -> dict:
    """A move's hash as a record: numbers as numbers, its score as an object."""
    record: dict = {name: int(value) if name in _INTS and value != "" else value for name, value in fields.items()}
    if record.get("score"):
        record["score"] = orjson.loads(record["score"])
    for name in ("new_task", "message"):
        record.setdefault(name, "")
    return record


class MoveStore(NamespaceStore):
    def next_plan_id(self) -> int:
        return int(self.client.hincrby(self.keys.rebalance, "plans", 1))

    def open_moves(self, plan: int, epoch: str, seqs: dict[str, int | None], jobs: dict[str, dict],
                   moves: list[dict], limit: int = MAX_IN_PROGRESS) -> int:
        """``move_open.lua``: record ``moves`` (dicts with task, job, from, to, strategy,
        score, reason) as plan ``plan`` if nodes:epoch is still ``epoch``, each node of
        ``seqs`` still at its change sequence, each job of ``jobs`` at its ``version`` and
        ``updated``, and
        each task running where the move says and in no other move. Returns the time (ms);
        raises :class:`StalePlan` (what changed) otherwise. Never resent: a timeout is one
        sentence."""
        k = self.keys
        keys = [k.node_epoch, k.node_changes, k.moves, k.moves_active, k.moves_tasks, k.stream, k.config,
                *(k.job(job) for job in jobs)]
        args: list = [self.events_arg, plan, epoch, limit, len(seqs)]
        for node, seq in seqs.items():
            args += [node, "" if seq is None else int(seq)]
        args.append(len(jobs))
        for job, read in jobs.items():
            args += [job, read["version"], read["updated"]]
        args.append(len(moves))
        for i, move in enumerate(moves, 1):
            keys += [k.task(move["task"]), k.move(f"{plan}-{i}")]
            args += [move["task"], move["job"], move["from"], move["to"], move["strategy"],
                     orjson.dumps(move["score"]).decode(), move["reason"]]
        try:
            reply = self.scripts.move_open(keys=keys, args=[*args, self.scripts.now_arg()])
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(
                f"Redis did not answer while plan {plan}'s moves were being recorded ({str(exc).rstrip('.')}); they "
                f"may or may not have been: look with `sched rebalance ls`.") from None
        if not reply[0]:
            raise StalePlan(f"the plan was not applied: {reply[1]}.")
        return int(reply[1])

    def set_move(self, move_id: str, expect: tuple[str, ...] = (), state: str = "", fields: dict | None = None) -> tuple[bool, str]:
        """``move_set.lua``: write ``fields`` and move to ``state`` if the move is in one of
        ``expect`` (any when empty). Returns (done, the state it is in now)."""
        k = self.keys
        args: list = [self.events_arg, ",".join(expect), state, len(fields or {})]
        for name, value in (fields or {}).items():
            args += [name, value]
        reply = self.scripts.move_set(keys=[k.move(move_id), k.moves_active, k.moves_tasks, k.moves_ended, k.stream,
                                            k.config], args=[*args, self.scripts.now_arg()])
        return bool(reply[0]), reply[1]

    def get_move(self, move_id: str) -> dict:
        fields = self.client.hgetall(self.keys.move(move_id))
        if not fields:
            raise NotFound(f"move {move_id!r} does not exist.")
        return decode(fields)

    def active_move_ids(self) -> list[str]:
        """Moves in progress, in plan order."""
        return self.client.zrange(self.keys.moves_active, 0, -1)

    def moving_tasks(self) -> dict[str, str]:
        """Task id -> the move in progress it belongs to (the task moved, and its new task)."""
        return self.client.hgetall(self.keys.moves_tasks)

    def moves_list(self, ids: list[str] | None = None, limit: int = 100) -> list[dict]:
        """Moves by id, or the newest ``limit``, oldest first."""
        if ids is None:
            ids = list(reversed(self.client.zrevrange(self.keys.moves, 0, limit - 1)))
        with self.client.pipeline(transaction=False) as pipe:
            for move_id in ids:
                pipe.hgetall(self.keys.move(move_id))
            rows = pipe.execute()
        return [decode(row) for row in rows if row]

    def prune_moves(self, now_ms: int, keep_ms: int = MOVES_RETENTION_MS, kept: int = MOVES_KEPT) -> int:
        """Remove ended moves older than ``keep_ms``, and the oldest beyond ``kept``, at most
        ``PRUNE_STEP`` per call. Returns how many were removed."""
        k = self.keys
        old = self.client.zrangebyscore(k.moves_ended, "-inf", now_ms - keep_ms, start=0, num=PRUNE_STEP)
        extra = self.client.zcard(k.moves_ended) - kept - len(old)
        if extra > 0:
            old += [m for m in self.client.zrange(k.moves_ended, 0, len(old) + min(extra, PRUNE_STEP) - 1)
                    if m not in old]
        if not old:
            return 0
        with self.client.pipeline(transaction=False) as pipe:
            pipe.delete(*(k.move(m) for m in old))
            pipe.zrem(k.moves, *old)
            pipe.zrem(k.moves_ended, *old)
            pipe.execute()
        return len(old)

    # The workers' own rebalance (rebalance_interval).
    def rebalance_settings(self) -> RebalanceSettings:
        return RebalanceSettings.from_config(self.client.hgetall(self.keys.config))

    def set_rebalance_settings(self, values: dict) -> RebalanceSettings:
        """Set rebalance settings (name -> value as a user gives it), all or none."""
        stored = {name: parse_setting(name, value) for name, value in values.items()}
        if stored:
            self.client.hset(self.keys.config, mapping=stored)
        return self.rebalance_settings()

    def rebalance_due(self, now_ms: int, interval_ms: int) -> bool:
        """Whether the workers' own rebalance is due (its last run began ``interval_ms``
        ago or more); if so, records ``now_ms`` as its last run, so one worker runs it."""
        last = self.client.hget(self.keys.rebalance, "last_run")
        if last is not None and now_ms - int(last) < interval_ms:
            return False
        self.client.hset(self.keys.rebalance, "last_run", now_ms)
        return True

    def last_rebalance(self) -> int | None:
        last = self.client.hget(self.keys.rebalance, "last_run")
        return None if last is None else int(last)

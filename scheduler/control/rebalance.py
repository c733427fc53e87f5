"""``sched rebalance``: a plan of moves made on a copy of the cluster with the placement
engine (:mod:`scheduler.engine.rebalance`), and the plan applied: its moves recorded in
Redis, all or none, only if the cluster is still as the plan read it
(``move_open.lua``), then carried out make before break by the workers' upkeep
(:mod:`scheduler.control.moves`).

Only running tasks of running services at their current version move: never a batch,
global or sysbatch task, a task of a job being deployed, nor one already in a move. As a
policy, the workers rebalance on their own every ``rebalance_interval`` (off by
default) with ``rebalance_strategy``, while no move is in progress.
"""

from __future__ import annotations

import difflib
import logging
import time
from collections import Counter

from scheduler.control import cluster_read, moves as advancing
from scheduler.control.reconcile import RUNNING_JOB
from scheduler.engine import rebalance as engine
from scheduler.engine.rebalance.job_spread import skew
from scheduler.engine.rebalance.eligible import Eligible
from scheduler.model import RUNNING, SERVICE, JobSpec, SpecError, Task
from scheduler.model.errors import NotFound
from scheduler.model.moves import StalePlan
from scheduler.state.cluster import ClusterState
from scheduler.state.history import Record
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

log = logging.getLogger("sched.worker")

MAX_MOVES = 1000  # moves in one plan at most
POLICY_MOVES = 100  # moves in one of the workers' own rebalances at most
ATTEMPTS = 3  # plans made afresh when the cluster changed between a plan and its applying
POLICY_LOCK_MS = 30_000


def check_request(strategy: str, max_moves: int | None) -> None:
    """One sentence for a strategy that does not exist or a count that is not one."""
    if strategy not in engine.STRATEGIES:
        close = difflib.get_close_matches(strategy, list(engine.STRATEGIES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"{strategy!r} is not a rebalance strategy{hint}; the strategies are "
                        f"{', '.join(engine.STRATEGIES)}.")
    if max_moves is not None and (isinstance(max_moves, bool) or not isinstance(max_moves, int)
                                  or not 1 <= max_moves <= MAX_MOVES):
        raise SpecError(f"max_moves must be a whole number from 1 to {MAX_MOVES}, not {max_moves!r}.")


def movable(moving: dict[str, str], held: Counter | None = None):
    """Which live tasks a plan may move (``moving``: tasks in moves now). ``held`` counts
    the live tasks of services that may not move now, by why."""
    def may(task: Task, spec: JobSpec, fields: dict, state: ClusterState) -> bool:
        if spec.type != SERVICE or spec.launcher or fields.get("status", RUNNING_JOB) != RUNNING_JOB:
            return False
        why = ("not running yet" if task.state != RUNNING else "of an older version"
               if str(task.version) != fields.get("version") else "being deployed" if task.job in state.deploying
               else "moving already" if task.id in moving else "")
        if why and held is not None:
            held[why] += 1
        return not why
    return may


def plan(store: Store, strategy: str = engine.SPREAD, max_moves: int | None = None, job: str | None = None) -> dict:
    """The moves ``strategy`` finds now (nothing is changed): ``{strategy, moves, jobs,
    read, held, planned_ms}``. ``moves``: each move's task, job, from, to, strategy, score
    (name, before, after, gain) and reason; ``jobs``: per job moved, its skew over its
    nodes before and after and its disruption budget; ``read``: what the plan read, which
    applying it checks; ``held``: the live service tasks that may not move now, counted by
    why (not running yet, of an older version, being deployed, moving already)."""
    check_request(strategy, max_moves)
    if job is not None:
        _check_job(store, job)
    began = time.perf_counter()
    held: Counter = Counter()
    copy = cluster_read.read(store, movable(store.moving_tasks(), held))
    cluster = copy.cluster
    moves = engine.plan(cluster, strategy, min(max_moves or MAX_MOVES, MAX_MOVES), job)
    eligible = Eligible(cluster)
    jobs: dict[str, dict] = {}
    for move in moves:
        jobs.setdefault(move.job, {"moves": 0})["moves"] += 1
    for job_id, summary in jobs.items():
        nodes = eligible.nodes(cluster.specs[job_id])
        after = dict(cluster.counts.get(job_id, {}))
        before = dict(after)
        for move in moves:
            if move.job == job_id:
                before[move.source] = before.get(move.source, 0) + 1
                before[move.target] -= 1
        summary.update(skew_before=skew(before, nodes), skew_after=skew(after, nodes), budget=_budget(store, job_id))
    involved = sorted({m.source for m in moves} | {m.target for m in moves})
    read = {"epoch": copy.reading.epoch, "nodes": {n: copy.reading.seqs.get(n) for n in involved},
            "jobs": {j: {"version": int(copy.jobs[j]["version"]), "updated": copy.jobs[j].get("updated", "")}
                     for j in sorted(jobs)}}
    return {"strategy": strategy, "moves": [m.to_dict() for m in moves], "jobs": jobs, "read": read,
            "held": dict(held), "planned_ms": round((time.perf_counter() - began) * 1000, 1)}


def apply(store: Store, planned: dict) -> dict:
    """Record a plan's moves (all or none; :class:`StalePlan` when the cluster changed
    since it was read) and start them. Returns ``{plan, moves: [move ids]}``."""
    moves, read = _checked(planned)
    if not moves:
        return {"plan": None, "moves": []}
    plan_id = store.next_plan_id()
    store.open_moves(plan_id, read["epoch"], read["nodes"], read["jobs"], moves)
    advancing.advance_all(store)  # start them now; the workers' upkeep carries them on
    return {"plan": plan_id, "moves": [f"{plan_id}-{i}" for i in range(1, len(moves) + 1)]}


def rebalance(store: Store, strategy: str = engine.SPREAD, max_moves: int | None = None, job: str | None = None,
              dry_run: bool = False) -> dict:
    """:func:`plan`, and unless ``dry_run`` :func:`apply` it (``applied``: its plan id and
    move ids). A plan the cluster moved on from before it could be applied is made again
    (up to ``ATTEMPTS`` times), never applied in part."""
    for attempt in range(ATTEMPTS):
        planned = plan(store, strategy, max_moves, job)
        if dry_run:
            return planned
        try:
            return {**planned, "applied": apply(store, planned)}
        except StalePlan:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def policy(store: Store) -> dict | None:
    """The workers' own rebalance: when ``rebalance_interval`` is set and has passed since
    the last one, and no move is in progress, plan and apply ``rebalance_strategy`` (at
    most ``POLICY_MOVES`` moves), one worker at a time. Returns what it did, or None."""
    settings = store.rebalance_settings()
    if settings.rebalance_interval <= 0 or store.active_move_ids():
        return None
    if not store.take_lock("rebalance-policy", POLICY_LOCK_MS):
        return None
    try:
        if not store.rebalance_due(store.clock_ms(), int(settings.rebalance_interval * 1000)):
            return None
        try:
            done = rebalance(store, settings.rebalance_strategy, POLICY_MOVES)
        except StalePlan as exc:
            log.info("rebalance: %s", exc)
            return None
        applied = done.get("applied", {})
        if applied.get("plan") is not None:
            store.record_history([Record("rebalance", None, details={
                "plan": applied["plan"], "strategy": settings.rebalance_strategy, "moves": len(applied["moves"]),
                "trigger": "rebalance_interval"})])
        return done
    finally:
        store.release_lock("rebalance-policy")


def _check_job(store: Store, job: str) -> None:
    fields = store.job_fields(job)
    if not fields:
        raise NotFound(f"job {job!r} does not exist.")
    spec = parse_stored(fields["spec"])
    if spec.type != SERVICE or spec.launcher:
        kind = "launches jobs" if spec.launcher else f"is a {spec.type} job"
        raise SpecError(f"job {job} {kind}: only the tasks of services are moved.")


def _budget(store: Store, job: str) -> dict | None:
    """The job's disruption budget now (None: it has none)."""
    return advancing.budget_status(store, job)


def _checked(planned: dict) -> tuple[list[dict], dict]:
    """A plan's moves and what it read, as applying needs them (one sentence for a plan
    that is not one: a file edited by hand, an HTTP body)."""
    if not isinstance(planned, dict) or not isinstance(planned.get("moves"), list) \
            or not isinstance(planned.get("read"), dict):
        raise SpecError("a plan is an object with moves and read, as `sched rebalance --dry-run --json` prints it.")
    read = planned["read"]
    if not isinstance(read.get("epoch"), str) or not isinstance(read.get("nodes"), dict) \
            or not isinstance(read.get("jobs"), dict) \
            or not all(isinstance(j, dict) and "version" in j and "updated" in j for j in read["jobs"].values()):
        raise SpecError("the plan's read must hold epoch, nodes and jobs, as the plan printed them.")
    moves = planned["moves"]
    if len(moves) > MAX_MOVES:
        raise SpecError(f"a plan holds at most {MAX_MOVES} moves, not {len(moves)}.")
    for i, move in enumerate(moves):
        if not isinstance(move, dict) or not all(isinstance(move.get(f), str) and move.get(f)
                                                 for f in ("task", "job", "from", "to", "strategy")):
            raise SpecError(f"move {i + 1} of the plan needs task, job, from, to and strategy, as the plan printed "
                            f"them.")
        if move["job"] not in read["jobs"] or move["from"] not in read["nodes"] or move["to"] not in read["nodes"]:
            raise SpecError(f"move {i + 1} of the plan names a job or node the plan did not read.")
        move.setdefault("reason", "")
        move.setdefault("score", {})
    return moves, read


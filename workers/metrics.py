"""Prometheus metrics of the scheduler workers and node agents (``prometheus_client``).

The counters and histograms are always kept (an increment costs well under a microsecond);
:func:`serve` exposes them on ``/metrics`` with prometheus_client's own HTTP server on a
thread, when ``sched worker --metrics-port P`` or ``sched agent --metrics-port P`` asks.
With ``sched worker --concurrency N --metrics-port P`` child ``i`` serves on port ``P + i``
(each process has its own counters; Prometheus sums them). See docs/metrics.md.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from scheduler.state import replication

# Sub-millisecond to seconds: a claim or commit is ~0.2-20 ms; submit-to-assigned can be minutes.
FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SLOW = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)

# Scheduler workers.
BATCHES = Counter("sched_batches_total", "Batches claimed and worked by this worker process.")
CLAIMED = Counter("sched_claimed_tasks_total", "Tasks claimed from the queue.")
PLACEMENTS = Counter("sched_placements_total", "Placements committed (tasks assigned to a node).")
REFUSALS = Counter("sched_commit_refusals_total", "Placements refused by the atomic commit, by reason.",
                   ["reason"])
UNPLACED = Counter("sched_unplaced_total", "Placement attempts that left a task pending (with an explanation).")
PREEMPTIONS = Counter("sched_preemptions_total", "Preemptors that evicted lower-priority tasks to get a node.")
NODES_DOWN = Counter("sched_nodes_marked_down_total", "Nodes this worker marked down (heartbeat lapsed).")
DRAINED = Counter("sched_drained_tasks_total", "Tasks this worker's drain steps stopped on draining nodes (as "
                  "their disruption budgets allowed, or past a deadline).")
CLAIM_SECONDS = Histogram("sched_claim_seconds", "Time to claim a batch from the queue (one Lua call).",
                          buckets=FAST)
COMMIT_SECONDS = Histogram("sched_commit_seconds", "Time of one atomic commit of a chunk of placements.",
                           buckets=FAST)
SUBMIT_TO_ASSIGNED = Histogram("sched_submit_to_assigned_seconds",
                               "From a task's creation to its commit (both Redis time).", buckets=SLOW)
GC_JOBS_REMOVED = Counter("sched_gc_jobs_removed_total", "Finished jobs this worker removed (retention).")
GC_TASKS_REMOVED = Counter("sched_gc_tasks_removed_total",
                           "Ended tasks this worker removed (retention), with their jobs or alone.")
REDIS_USED_MEMORY = Gauge("sched_redis_used_memory_bytes", "Redis used_memory, as this worker last read it.")
REDIS_MAXMEMORY = Gauge("sched_redis_maxmemory_bytes", "Redis maxmemory (0: no limit), as this worker last read it.")
REDIS_MEMORY_HIGH = Gauge("sched_redis_memory_high",
                          "1 while Redis used memory is past 80% of maxmemory (this worker warned), else 0.")
MOVES = Counter("sched_rebalance_moves_total", "Moves of sched rebalance this worker advanced, by what happened "
                "(started, done, abandoned).", ["outcome"])
MOVES_IN_PROGRESS = Gauge("sched_rebalance_moves_in_progress", "Moves in progress in the namespace, as this worker "
                          "last read them.")
REBALANCES = Counter("sched_rebalance_runs_total", "Rebalances this worker ran on its own (rebalance_interval).")
REBALANCE_PLAN_SECONDS = Histogram("sched_rebalance_plan_seconds", "Time to plan a rebalance this worker ran on its "
                                   "own, reading the cluster included.", buckets=SLOW)

# Node agents.
AGENT_STARTED = Counter("sched_agent_tasks_started_total", "Tasks this agent started (enqueued or marked running).")
AGENT_FINISHED = Counter("sched_agent_tasks_finished_total",
                         "Tasks that left this agent's node, by how they ended.", ["outcome"])
AGENT_HEARTBEAT_AGE = Gauge("sched_agent_heartbeat_age_seconds", "Seconds since this agent's last heartbeat.")
AGENT_RUNNING = Gauge("sched_agent_tasks", "Tasks this agent holds now (assigned or running).")

# Both.
REPLICAS_MISSING = Gauge("sched_replicas_missing",
                         "Namespaces served by this process whose Redis master has fewer replicas in sync than "
                         "--wait-replicas asks for (their writes go on without waiting, or are refused).")
REPLICAS_MISSING.set_function(replication.missing_count)

enabled = False  # whether /metrics is served: the one extra read (tasks' created times) is skipped otherwise


def serve(port: int, host: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread."""
    global enabled
    start_http_server(port, addr=host)
    enabled = True


@contextmanager
def timed(histogram: Histogram):
    start = time.perf_counter()
    try:
        yield
    finally:
        histogram.observe(time.perf_counter() - start)


def committed(outcome, created_ms: list[int]) -> None:
    """One commit's result: its placements, its refusals by reason, and (``created_ms``:
    the accepted tasks' creation times) their submit-to-assigned latency."""
    PLACEMENTS.inc(len(outcome.accepted))
    for _plan, reason in outcome.refused:
        REFUSALS.labels(reason).inc()
    for created in created_ms:
        if created:
            SUBMIT_TO_ASSIGNED.observe(max(0.0, (outcome.now_ms - created) / 1000))


def batch(claimed: int, unplaced: int, preempted: int) -> None:
    BATCHES.inc()
    CLAIMED.inc(claimed)
    UNPLACED.inc(unplaced)
    PREEMPTIONS.inc(preempted)


def heartbeat_age(since: callable) -> None:
    """The agent's heartbeat age, computed when scraped: ``since()`` is the monotonic time
    of the last heartbeat that Redis took."""
    AGENT_HEARTBEAT_AGE.set_function(lambda: time.monotonic() - since())

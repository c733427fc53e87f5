"""How a scheduler worker runs: batch size, leases, commit rounds, preemption, placement
options. Built by the CLI, the benchmark and the Python API; the worker loop itself lives
in ``workers/scheduler_worker.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.engine.placement import PlacementOptions
from scheduler.engine.preemption import DEFAULT_MARGIN
from scheduler.state.tallies import FAULT_WINDOW_MS


@dataclass
class WorkerConfig:
    batch_size: int = 512
    share_from: int | None = 16  # claim half of a short queue (at least this many): workers share it
    keep_jobs_whole: bool = True  # a claim ending inside a job takes up to batch_size // 4 more of it
    fair_window: int = 2048  # claims take the first this many waiting tasks by tenants' dominant share; 0 = off
    lease_ms: int = 30_000
    commit_retries: int = 5  # placement rounds per claim when commits are refused (Nomad uses 5)
    commit_chunk: int = 128  # placements sent to Redis while the rest of the batch is placed
    # Commit chunks in a thread of their own while the rest is placed, and claim the next
    # batch ahead; False: each call in turn, in order (a replay on a virtual clock repeats).
    overlap: bool = True
    maintain_every_s: float = 0.1
    health_every_s: float = 1.0
    idle_sleep_max_s: float = 0.02  # the pause after a failed batch; the longest between polls of cells on a Redis Cluster
    until_idle: bool = False
    fault_window_ms: int = FAULT_WINDOW_MS
    preemption: bool = True
    preemption_margin: int = DEFAULT_MARGIN  # victims are at least this many priority levels lower
    max_preemptions: int = 8  # preemption searches per batch: they read what runs on the nodes
    report_every_s: float = 0.2  # the shared stats hash is updated this often (and on exit)
    wait_replicas: int | None = None  # WAIT for this many replicas after each commit; None = SCHED_WAIT_REPLICAS or 0
    repair_on_start: bool | None = None  # audit --repair each cell on start; None = on for cluster/Sentinel URLs
    placement: PlacementOptions = field(default_factory=PlacementOptions)
    metrics_port: int | None = None  # serve Prometheus /metrics here (workers/metrics.py)

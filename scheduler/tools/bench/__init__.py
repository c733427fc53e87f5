"""``sched bench``: the throughput benchmark.

One run (the *batch* scenario, the default):

1. Start a private ``redis-server`` (the project's settings, in a temporary folder, on a
   unix socket; stopped and removed at the end) unless a URL is given.
2. Register ``nodes`` static nodes (default 5,000) across 4 zones and 40 racks (rack
   ``rNN`` lies in zone ``z(NN // 10)``), with mixed sizes: cpu 4/8/16/32 cores and memory
   8/16/32/64 GiB, drawn independently. Node registrations are pipelined, 500 calls of
   ``node_put.lua`` per round trip.
3. Submit ``jobs`` jobs of ``replicas`` tasks (default 100 x 100). Job ``j``: cpu from
   0.5/1/2/4/8/12 cores, memory 1, 2 or 3 GiB per core (drawn in shuffled rounds of every
   value, so any number of jobs asks for nearly the average); every third job (``j % 3 == 0``)
   is constrained to one zone, every third (``j % 3 == 1``) prefers to spread over zones,
   the rest have neither; one job in 20 bin-packs. The default asks for about 60% of
   the cluster's cpu and memory (printed as ``requested_pct``). With ``--distinct`` every
   task is a job of its own (same shapes), so no batch can group identical tasks. With
   ``--small`` the requests are tiny instead (cpu 0.05/0.1/0.15/0.2 cores, memory
   32/64/96/128 MiB, drawn the same way; constraints, spread and bin-packing unchanged),
   so that every task fits even on a small cluster: the scenario for a worker's fixed costs.
   Everything is derived from ``--seed``: the same options give the same scenario.
4. Only then start ``workers`` worker processes (``until_idle``; their loops start together
   once every process is up), and wait for them to exit: nothing is left that could be
   scheduled (tasks are assigned, or pending in the unschedulable queue with an
   explanation). ``--percentage-of-nodes`` is passed to the workers' placement options.
5. Check the invariants (:func:`scheduler.control.audit.audit`, plus: every task assigned or
   pending with a reason, the workers' placed counter equals the tasks assigned) and
   measure.

``--rules`` runs the batch scenario with placement rules (``scenario._rules_shape``: one
node in 10 tainted ``dedicated=gpu:NoSchedule`` and one in 10 ``spot:PreferNoSchedule``;
every job labelled; a quarter of the jobs each with a soft zone affinity, a hard spread
over zones, one task per host by anti-affinity with itself, or a toleration of the
dedicated taint with a soft job affinity), then the plain scenario right after it, and
reports both (the plain one under ``plain``) with ``rules_to_plain``, the ratio of their
``placements_per_s``.

``--sweep`` runs the batch scenario at several cluster sizes (1k, 5k, 20k, 100k nodes),
keeping the load per node of the chosen scenario (jobs scale with nodes), and reports how
the time per placement grows. ``--rate N`` is the steady offered-load mode: a submitter
offers N tasks/s (single-task jobs unless ``--replicas`` says otherwise, small requests so
the cluster never fills) for ``--warmup`` then ``--duration`` seconds while the workers run
continuously; latency is measured over the tasks submitted after the warm-up. The load is
offered in ticks (``RATE_TICK_S``, 5 ms): each tick sends every job due by then in one
call (``submit_many``), as a front end batching its requests would.

Measures (see :data:`report.DEFINITIONS`, which the JSON carries too):

- ``placements_per_s``: tasks assigned / ``window_s``, the wall time from the first claim
  (earliest lease taken, from Redis TIME) to the last commit (latest ``assigned_at``). A
  run so short that its claims were all committed before the bench first looked counts
  from the workers' release instead.
- ``placements_per_s_from_start``: tasks assigned / the time from just before the worker
  processes are started (Redis TIME read right before, so process start-up, imports and
  the first node load count) to the last commit. Never above ``placements_per_s``.
- ``p50_ms`` / ``p99_ms``: task ``created`` to ``assigned_at`` (both Redis TIME, ms),
  nearest-rank percentiles over assigned tasks. In the batch scenario every task is
  submitted before the workers start, so these are dominated by queueing; the latency
  figure that means something is the one of ``--rate``.
- ``commit_rejections``: placements the Lua commit refused (the workers' ``refused``).
- ``overcommits``: resources over capacity, counted by the audit (must be 0).
- ``unplaced``: tasks still pending at the end.
- ``spread_skew``: over spread jobs without placement preferences, the largest
  (max - min) of the job's tasks per node among the nodes that are eligible for the job
  and still have room for one more of its tasks. 1 is perfect when replicas < nodes.
- ``zone_spread_skew``: the same over zones, for jobs with a zone spread preference
  (zones with at least one eligible node with room).
- ``redis_bytes_per_task``: Redis ``used_memory`` after the run minus before submitting,
  per task (``redis_bytes_per_task_pending``: right after submitting).
- ``worker_cpu_s``: user + system CPU of the worker processes while they ran, with
  ``node_read_cpu_s``, the parent's read of every node before it forks them
  (``worker_loop_cpu_us_per_placement`` leaves that out).
- ``redis_cpu_s``: user + system CPU of redis-server (``INFO cpu``) while the workers ran.

The package: ``scenario`` (the synthetic nodes and jobs), ``harness`` (Redis, namespace,
node registration, worker processes, Redis's clock and counters), ``progress`` (the bars),
``results`` (measures and invariant checks from what a run left), ``report`` (definitions
and the table); the runs ``batch``, ``sweep``, ``rate`` and ``cells``. What the CLI and
the tests use is re-exported here.
"""

from scheduler.tools.bench.batch import run_batch, run_rules
from scheduler.tools.bench.cells import run_cells
from scheduler.tools.bench.harness import (DEFAULT_NAMESPACE, LEASE_MS, ClaimWatch, prepare_namespace, redis_now_ms,
                                           register_nodes)
from scheduler.tools.bench.rate import run_rate
from scheduler.tools.bench.report import print_report
from scheduler.tools.bench.results import percentile, spread_skews
from scheduler.tools.bench.scenario import DEFAULT_REPLICAS, RACKS, ZONES, Scenario, job_specs, make_nodes
from scheduler.tools.bench.sweep import run_sweep

__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_REPLICAS", "LEASE_MS", "RACKS", "ZONES", "ClaimWatch", "Scenario",
           "job_specs", "make_nodes", "percentile", "prepare_namespace", "print_report", "redis_now_ms",
           "register_nodes", "run_batch", "run_cells", "run_rate", "run_rules", "run_sweep", "spread_skews"]

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
5. Check the invariants (:func:`scheduler.audit.audit`, plus: every task assigned or
   pending with a reason, the workers' placed counter equals the tasks assigned) and
   measure.

``--sweep`` runs the batch scenario at several cluster sizes (1k, 5k, 20k, 100k nodes),
keeping the load per node of the chosen scenario (jobs scale with nodes), and reports how
the time per placement grows. ``--rate N`` is the steady offered-load mode: a submitter
offers N tasks/s (single-task jobs unless ``--replicas`` says otherwise, small requests so
the cluster never fills) for ``--warmup`` then ``--duration`` seconds while the workers run
continuously; latency is measured over the tasks submitted after the warm-up. The load is
offered in ticks (``RATE_TICK_S``, 5 ms): each tick sends every job due by then in one
call (``submit_many``), as a front end batching its requests would.

Measures (see :data:`DEFINITIONS`, which the JSON carries too):

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
- ``worker_cpu_s``: user + system CPU of the worker processes while they ran.
- ``redis_cpu_s``: user + system CPU of redis-server (``INFO cpu``) while the workers ran.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import orjson

from scheduler.control.audit import audit
from scheduler.control.reconcile import submit, submit_many
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.fit import misfit
from scheduler.engine.placement import PlacementOptions
from scheduler.model import ASSIGNED, BINPACK, PENDING, SPREAD, JobSpec, Node, Task, make_node, parse_job
from scheduler.model.errors import SpecError
from scheduler.model.quantities import CPU, MEMORY
from scheduler.state.app import App
from scheduler.control.processes import process

DEFAULT_NODES = 5000
DEFAULT_JOBS = 100
DEFAULT_REPLICAS = 100
DEFAULT_WORKERS = 2
DEFAULT_BATCH = 512
DEFAULT_SEED = 42
DEFAULT_NAMESPACE = "bench"
SWEEP_NODES = (1000, 5000, 20000, 100000)
ZONES = 4
RACKS = 40

NODE_CPUS = (4, 8, 16, 32)  # cores
NODE_MEMORY_GIB = (8, 16, 32, 64)
JOB_CPUS = (0.5, 1, 2, 4, 8, 12)  # cores
JOB_GIB_PER_CORE = (1, 2, 3)
RATE_CPUS = (0.1, 0.25, 0.5, 1)  # --rate: small tasks, so a run never fills the cluster
RATE_MEMORY_MIB = (128, 256, 512, 1024)
SMALL_CPUS = (0.05, 0.1, 0.15, 0.2)  # --small: every task fits, even 10 per node on 1,000 nodes
SMALL_MEMORY_MIB = (32, 64, 96, 128)
BINPACK_EVERY = 20  # one job in 20 bin-packs

REGISTER_CHUNK = 500  # node_put calls per pipeline round trip
READ_CHUNK = 5000  # task hashes per pipeline round trip when reading results
LEASE_MS = 30_000
RATE_TICK_S = 0.005  # --rate: the submitter sends what is due once per tick, in one call
STARTUP_GRACE_S = 0.5  # --rate: after the workers start, before offering load (their first upkeep)

WINDOW = "first claim to last commit"
DEFINITIONS = {
    "placements_per_s": "tasks assigned / window_s; window_s = first claim (earliest lease) to last commit "
                        "(latest assigned_at), Redis TIME; from the workers' release if every claim was "
                        "committed before the bench first looked",
    "placements_per_s_from_start": "tasks assigned / (last commit - just before the worker processes were started), "
                                   "Redis TIME: process start-up and the first node load included",
    "us_per_placement": "1e6 / placements_per_s (wall time per placement, all workers together)",
    "worker_cpu_us_per_placement": "1e6 * worker_cpu_s / tasks assigned",
    "p50_ms/p99_ms": "task created to assigned_at (Redis TIME), nearest rank over assigned tasks",
    "commit_rejections": "placements refused by the Lua commit",
    "overcommits": "node resources over capacity, from the audit (must be 0)",
    "unplaced": "tasks still pending at the end (each with an explanation)",
    "spread_skew": "largest max-min tasks of a spread job per node, among nodes eligible and with room, "
                   "over spread jobs without preferences",
    "zone_spread_skew": "largest max-min tasks of a job per zone, among zones with an eligible node with room, "
                        "over jobs with a zone spread preference",
    "redis_bytes_per_task": "(used_memory after the run - before submitting) / tasks",
    "worker_cpu_s": "user+system CPU of the worker processes",
    "redis_cpu_s": "user+system CPU of redis-server while the workers ran (INFO cpu)",
}

RATE_DEFINITIONS = {
    "offered_rate": "tasks/s the submitter is scheduled to submit (jobs of `replicas` tasks, evenly spaced)",
    "achieved_rate": "measured tasks / time from when the measured part was due to start to its last submission",
    "submit_lag_max_ms": "how far behind its schedule the submitter fell at worst (jobs go out once per tick, "
                         "so up to about one tick by design)",
    "tick_ms": "the submitter sends every job due by then in one call (submit_many) once per tick",
    "placements_per_s": "measured tasks assigned / (last assigned_at - first created) over them",
    "p50_ms/p99_ms/max_ms": "task created to assigned_at (Redis TIME), nearest rank, over measured tasks assigned",
    "backlog_max": "largest active-queue length seen (polled every 0.2 s)",
    "drained": "the queue emptied within the drain timeout after the last submission",
    "never_attempted": "tasks still pending that no worker had tried yet (only when not drained)",
    "unplaced": "tasks pending after an attempt (with an explanation)",
    "worker_cpu_s": "user+system CPU of the worker processes",
    "redis_cpu_s": "user+system CPU of redis-server during the run (INFO cpu)",
}


@dataclass(frozen=True)
class Scenario:
    nodes: int = DEFAULT_NODES
    jobs: int = DEFAULT_JOBS
    replicas: int = DEFAULT_REPLICAS
    workers: int = DEFAULT_WORKERS
    batch_size: int = DEFAULT_BATCH
    distinct: bool = False
    seed: int = DEFAULT_SEED
    percentage_of_nodes: int | None = None  # the workers' --percentage-of-nodes (None: score every node)
    gang: int = 0  # --gang N: every job's tasks as gangs of N (gang: true), same tasks in all
    tenants: int = 0  # --tenants N: jobs spread round-robin over tenants t1..tN, weights 1..N
    fair_window: int | None = None  # the workers' fair_window (None: their default)
    small: bool = False  # --small: tiny requests (SMALL_CPUS, SMALL_MEMORY_MIB), so every task fits

    @property
    def tasks(self) -> int:
        return self.jobs * self.replicas

    def describe(self) -> dict:
        return {**asdict(self), "tasks": self.tasks, "zones": ZONES, "racks": RACKS}


# ----------------------------------------------------------------------------- the cluster
def zone_of_rack(rack: int) -> int:
    return rack * ZONES // RACKS


def make_nodes(count: int, seed: int = DEFAULT_SEED) -> list[Node]:
    """``count`` nodes ``n000000``...: round-robin over the racks, sizes drawn from ``seed``."""
    rng = random.Random(f"{seed}:nodes")
    nodes = []
    for i in range(count):
        rack = i % RACKS
        nodes.append(make_node(
            f"n{i:06d}", cpu=rng.choice(NODE_CPUS), memory=f"{rng.choice(NODE_MEMORY_GIB)}GiB",
            labels={"zone": f"z{zone_of_rack(rack)}", "rack": f"r{rack:02d}"}))
    return nodes


def job_specs(scenario: Scenario) -> list[dict]:
    """The raw job specs of the batch scenario (``--distinct``: one job per task)."""
    rng = random.Random(f"{scenario.seed}:jobs")
    if scenario.small:
        cpus = _balanced(rng, SMALL_CPUS, scenario.jobs)
        memories = _balanced(rng, SMALL_MEMORY_MIB, scenario.jobs)
    else:
        cpus = _balanced(rng, JOB_CPUS, scenario.jobs)
        ratios = _balanced(rng, JOB_GIB_PER_CORE, scenario.jobs)
        memories = [int(cores * ratio * 1024) for cores, ratio in zip(cpus, ratios)]
    specs = []
    for j in range(scenario.jobs):
        cores = cpus[j]
        memory_mib = memories[j]
        raw = {"id": f"j{j:04d}", "replicas": scenario.replicas,
               "resources": {"cpu": cores, "memory": f"{memory_mib}MiB"}}
        _shape(raw, j)
        if scenario.tenants:
            raw["tenant"] = f"t{j % scenario.tenants + 1}"
        if scenario.distinct:
            specs += [dict(raw, id=f"j{j:04d}-{r:05d}", replicas=1) for r in range(scenario.replicas)]
        elif scenario.gang:  # the job's tasks as gangs of N (the last one smaller), each all or nothing
            specs += [dict(raw, id=f"j{j:04d}-g{g:04d}", replicas=min(scenario.gang, scenario.replicas - start),
                           gang=True) for g, start in enumerate(range(0, scenario.replicas, scenario.gang))]
        else:
            specs.append(raw)
    return specs


def tenant_weights(scenario: Scenario) -> dict[str, int]:
    """``--tenants N``: tenant ``t<i>`` has weight ``i``."""
    return {f"t{i}": i for i in range(1, scenario.tenants + 1)}


def _balanced(rng: random.Random, choices, count: int) -> list:
    """``count`` draws in shuffled rounds of every choice: random order, but any number of
    jobs asks for nearly the average, so the load is the same at every cluster size."""
    out: list = []
    while len(out) < count:
        block = list(choices)
        rng.shuffle(block)
        out += block
    return out[:count]


def _shape(raw: dict, j: int) -> None:
    """Constraint, preference and strategy of job number ``j``."""
    if j % 3 == 0:
        raw["constraints"] = [f"node.labels.zone==z{(j // 3) % ZONES}"]
    elif j % 3 == 1:
        raw["preferences"] = [{"spread": "node.labels.zone"}]
    if j % BINPACK_EVERY == BINPACK_EVERY - 1:
        raw["strategy"] = BINPACK


def rate_specs(count: int, replicas: int, seed: int, prefix: str) -> list[dict]:
    """Small jobs for the offered-load mode."""
    rng = random.Random(f"{seed}:{prefix}")
    specs = []
    for j in range(count):
        raw = {"id": f"{prefix}{j:06d}", "replicas": replicas,
               "resources": {"cpu": rng.choice(RATE_CPUS), "memory": f"{rng.choice(RATE_MEMORY_MIB)}MiB"}}
        _shape(raw, j)
        specs.append(raw)
    return specs


def requested_pct(nodes: list[Node], specs: list[JobSpec]) -> dict[str, float]:
    """What the jobs ask for, in % of the cluster's capacity."""
    out = {}
    for resource_name in (CPU, MEMORY):
        capacity = sum(n.capacity.get(resource_name, 0) for n in nodes)
        asked = sum(s.resources.get(resource_name, 0) * s.replicas for s in specs)
        out[resource_name] = round(100 * asked / capacity, 1) if capacity else 0.0
    return out


def register_nodes(app: App, nodes: list[Node], advance: Callable[[int], None] | None = None,
                   chunk: int = REGISTER_CHUNK) -> None:
    """Register new nodes, ``chunk`` per round trip (:meth:`Store.put_new_nodes`)."""
    app.store.put_new_nodes(nodes, chunk, advance)


# ----------------------------------------------------------------------------- redis
@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    """``url`` as given, or a private redis-server for the duration of the block."""
    if url:
        yield url
        return
    from scheduler.state.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="sched-bench-"))
    socket = directory / "redis.sock"
    process = start_server(directory, socket, daemonize=False)
    try:
        yield f"unix://{socket}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def prepare_namespace(app: App, clear: bool) -> None:
    """Make sure the namespace is empty: cleared when the bench owns it, else refused."""
    if app.store.namespace_empty():
        return
    if not clear:
        raise SpecError(f"namespace {app.keys.namespace!r} is not empty; the benchmark needs an empty "
                        f"namespace (its own, {DEFAULT_NAMESPACE!r}, is cleared before each run).")
    app.store.clear_namespace()


def redis_info(app: App) -> dict:
    return app.store.server_usage()


def machine() -> dict:
    """What the numbers were measured on: CPUs, and the load (other processes compete for them)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2)}


def redis_now_ms(app: App) -> int:
    return app.store.now_ms()


# ----------------------------------------------------------------------------- workers
def worker_processes(url: str, namespace: str, count: int, batch_size: int, until_idle: bool, seed: int,
                     percentage_of_nodes: int | None = None, fair_window: int | None = None):
    """``count`` gated worker processes (the supervisor of ``sched worker --concurrency``),
    each with its own tie-breaking seed."""
    extra = {} if fair_window is None else {"fair_window": fair_window}
    configs = [WorkerConfig(batch_size=batch_size, lease_ms=LEASE_MS, until_idle=until_idle,
                            placement=PlacementOptions(seed=seed * 1000 + i,
                                                       percentage_of_nodes_to_score=percentage_of_nodes), **extra)
               for i in range(count)]
    return process("worker-processes")(url, namespace, configs, gated=True, name="bench-worker")


def read_stats(app: App) -> dict[str, int]:
    return app.store.stats()


class ClaimWatch:
    """Notices the first claim: the earliest lease deadline in ``q:inflight`` minus the
    lease length is when it was taken (exact while its tasks are still in flight, and
    never later than the poll's own Redis TIME). If every claimed task was committed
    before the first poll, all that is known is that the claim came after the workers'
    release (``released_ms``), which then stands for it."""

    def __init__(self, app: App, released_ms: int):
        self.app = app
        self.base = app.queue.claim_probe()[0]
        self.released_ms = released_ms
        self.first_ms: int | None = None

    def poll(self) -> bool:
        if self.first_ms is not None:
            return True
        cycle, earliest, now = self.app.queue.claim_probe()
        if cycle <= self.base:
            return False
        self.first_ms = min(now, earliest - LEASE_MS) if earliest is not None else self.released_ms
        return True


# ----------------------------------------------------------------------------- results
def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def read_tasks(app: App, task_ids: list[str]) -> list[Task]:
    out: list[Task] = []
    for i in range(0, len(task_ids), READ_CHUNK):
        out += app.store.tasks(task_ids[i:i + READ_CHUNK])
    return out


def spread_skews(nodes: list[Node], specs: list[JobSpec], tasks: list[Task]) -> tuple[int, int]:
    """(``spread_skew``, ``zone_spread_skew``); see the module docstring.

    Computed without visiting every node for every job: the largest count is on a node
    holding tasks of the job, and the smallest is 0 as soon as one eligible node with
    room holds none (found by scanning until the first), which is the usual case.
    """
    per_job: dict[str, Counter] = defaultdict(Counter)
    for task in tasks:
        if task.state == ASSIGNED:
            per_job[task.job][task.node] += 1
    by_name = {n.name: n for n in nodes}
    zone_nodes: dict[str, list[Node]] = defaultdict(list)
    for n in nodes:
        zone_nodes[n.labels.get("zone", "")].append(n)
    node_skew = zone_skew = 0
    for spec in specs:
        if spec.strategy != SPREAD:
            continue
        static = filter_pipeline(spec).static_check
        counts = per_job.get(spec.id, Counter())

        def has_room(node: Node) -> bool:
            return static(node) is None and misfit(node, spec.resources, spec.ports, spec.max_per_node,
                                                    counts[node.name]) is None

        if not spec.preferences:
            held = [c for name, c in counts.items() if name in by_name and has_room(by_name[name])]
            empty = any(n.name not in counts and has_room(n) for n in nodes)
            if held or empty:
                node_skew = max(node_skew, max(held, default=0) - (0 if empty else min(held)))
        elif [p.spread for p in spec.preferences] == ["node.labels.zone"]:
            by_zone: Counter = Counter()
            for name, count in counts.items():
                if name in by_name:
                    by_zone[by_name[name].labels.get("zone", "")] += count
            on_zone = [by_zone[zone] for zone, members in zone_nodes.items() if any(map(has_room, members))]
            if on_zone:
                zone_skew = max(zone_skew, max(on_zone) - min(on_zone))
    return node_skew, zone_skew


def check_results(app: App, tasks: list[Task], expected: int, stats: dict[str, int], pool,
                  require_reasons: bool = True) -> dict:
    """The audit plus the bench's own invariants; returns the part of the report about them.
    ``require_reasons=False`` (an offered-load run stopped before its queue drained)
    allows pending tasks that were never attempted (the audit still checks each is queued)."""
    report = audit(app.store)
    problems = list(report.problems)
    if len(pool.reports) < len(pool.processes):
        problems.append(f"only {len(pool.reports)} of {len(pool.processes)} worker processes finished normally")
    states = Counter(t.state for t in tasks)
    if len(tasks) != expected:
        problems.append(f"{len(tasks)} tasks found, {expected} submitted")
    others = {s: n for s, n in states.items() if s not in (ASSIGNED, PENDING)}
    if others:
        problems.append(f"tasks neither assigned nor pending: {others}")
    unexplained = [t.id for t in tasks
                   if require_reasons and t.state == PENDING and not t.explanation]
    if unexplained:
        problems.append(f"{len(unexplained)} pending task(s) without a reason, e.g. {unexplained[0]}")
    if stats.get("placed", 0) != states[ASSIGNED]:
        problems.append(f"workers counted {stats.get('placed', 0)} placements, "
                        f"but {states[ASSIGNED]} tasks are assigned")
    return {"invariants_ok": not problems, "overcommits": report.overcommits, "problems": problems[:5],
            "problem_count": len(problems), "states": dict(states)}


def unplaced_summary(tasks: list[Task], limit: int = 3) -> list[dict]:
    out = []
    for task in tasks:
        if task.state == PENDING and len(out) < limit:
            message = orjson.loads(task.explanation).get("message", "") if task.explanation else ""
            out.append({"id": task.id, "message": message})
    return out


# ----------------------------------------------------------------------------- progress
class Progress:
    """A rich progress bar on stderr, or nothing (``--json``)."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn,
                                       Progress as RichProgress)

            self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                                    console=Console(stderr=True), transient=False)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def phase(self, description: str, total: int) -> Callable[..., None]:
        """Add a bar; returns ``update(completed=None, advance=0, note=None)``."""
        if not self.bar:
            return lambda *args, **kwargs: None
        task = self.bar.add_task(description, total=total, note="")

        def update(completed: int | None = None, advance: int = 0, note: str | None = None) -> None:
            kwargs = {}
            if note is not None:
                kwargs["note"] = note
            if completed is not None:
                kwargs["completed"] = completed
            if advance:
                kwargs["advance"] = advance
            self.bar.update(task, **kwargs)
        return update


# ----------------------------------------------------------------------------- the batch run
def run_batch(scenario: Scenario, redis_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
              clear: bool = True, progress: bool = False) -> dict:
    """One batch (or ``--distinct``) run; returns the JSON report."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        app = App(redis_url=url, namespace=namespace)
        try:
            return _run_batch(app, scenario, bar, clear, private=redis_url is None)
        finally:
            app.close()


def _run_batch(app: App, scenario: Scenario, bar: Progress, clear: bool, private: bool) -> dict:
    prepare_namespace(app, clear)
    nodes = make_nodes(scenario.nodes, scenario.seed)
    specs = [parse_job(raw) for raw in job_specs(scenario)]

    info_empty = redis_info(app)
    started = time.perf_counter()
    update = bar.phase(f"registering {len(nodes)} nodes", len(nodes))
    register_nodes(app, nodes, lambda count: update(advance=count))
    register_s = time.perf_counter() - started
    info_nodes = redis_info(app)

    for tenant, weight in tenant_weights(scenario).items():
        app.store.set_tenant_weight(tenant, weight)
    started = time.perf_counter()
    update = bar.phase(f"submitting {len(specs)} jobs", scenario.tasks)
    for spec in specs:
        submit(app.store, spec)
        update(advance=spec.replicas)
    submit_s = time.perf_counter() - started
    info_submitted = redis_info(app)

    host = machine()
    update = bar.phase(f"placing ({scenario.workers} workers)", scenario.tasks)
    with worker_processes(app.url, app.keys.namespace, scenario.workers, scenario.batch_size, until_idle=True,
                    seed=scenario.seed, percentage_of_nodes=scenario.percentage_of_nodes,
                    fair_window=scenario.fair_window) as pool:
        launch_ms = redis_now_ms(app)  # placements_per_s_from_start counts from here
        pool.start()
        pool.wait_started()
        start_ms = redis_now_ms(app)
        watch = ClaimWatch(app, start_ms)
        pool.release()
        last_update = 0.0
        while pool.alive():
            first = watch.poll()
            now = time.monotonic()
            if now - last_update >= 0.1:
                last_update = now
                stats = read_stats(app)
                update(completed=stats.get("placed", 0), note=f"commit rejections {stats.get('refused', 0)}  "
                                                              f"failed attempts {stats.get('unplaced', 0)}")
            time.sleep(0.1 if first else 0.002)
        watch.poll()  # a run over before the first look
    end_ms = redis_now_ms(app)
    info_end = redis_info(app)
    worker_cpu = pool.totals()[1]
    counters = read_stats(app)
    update(completed=counters.get("placed", 0))

    tasks = read_tasks(app, app.store.all_task_ids())
    checks = check_results(app, tasks, scenario.tasks, counters, pool)
    assigned = [t for t in tasks if t.state == ASSIGNED]
    latencies = sorted(t.assigned_ms - t.created_ms for t in assigned)
    last_commit = max((t.assigned_ms for t in assigned), default=None)
    first_claim = watch.first_ms
    window_s = (last_commit - first_claim) / 1000 if assigned and first_claim is not None else None
    # With --distinct every job has one task: there is nothing to spread.
    spread, zone_spread = (None, None) if scenario.distinct else spread_skews(app.store.nodes(), specs, tasks)

    placements_per_s = len(assigned) / window_s if window_s else None
    from_start_s = (last_commit - launch_ms) / 1000 if last_commit is not None else None
    placements_per_s_from_start = len(assigned) / from_start_s if from_start_s else None
    return {
        "mode": "distinct" if scenario.distinct else "gang" if scenario.gang else "batch",
        "scenario": {**scenario.describe(), "requested_pct": requested_pct(nodes, specs),
                     "redis": "private" if private else "given", "namespace": app.keys.namespace},
        "tasks": len(tasks),
        "assigned": len(assigned),
        "unplaced": sum(1 for t in tasks if t.state == PENDING),
        "placements_per_s": _round(placements_per_s, 1),
        "placements_per_s_from_start": _round(placements_per_s_from_start, 1),
        "us_per_placement": _round(1e6 / placements_per_s if placements_per_s else None, 1),
        "window_s": _round(window_s, 3),
        "window": WINDOW,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "latency": "created to assigned; all tasks are submitted before the workers start, so mostly queueing",
        "commit_rejections": counters.get("refused", 0),
        "overcommits": checks["overcommits"],
        "invariants_ok": checks["invariants_ok"],
        "problems": checks["problems"],
        "spread_skew": spread,
        "zone_spread_skew": zone_spread,
        "redis_bytes_per_task": _per(info_end["used_memory"] - info_nodes["used_memory"], len(tasks)),
        "redis_bytes_per_task_pending": _per(info_submitted["used_memory"] - info_nodes["used_memory"], len(tasks)),
        "redis_bytes_per_node": _per(info_nodes["used_memory"] - info_empty["used_memory"], len(nodes)),
        "worker_cpu_s": round(worker_cpu, 3),
        "worker_cpu_us_per_placement": _round(1e6 * worker_cpu / len(assigned) if assigned else None, 1),
        "redis_cpu_s": round(info_end["cpu_s"] - info_submitted["cpu_s"], 3),
        "redis_cpu_us_per_placement": _round(1e6 * (info_end["cpu_s"] - info_submitted["cpu_s"]) / len(assigned)
                                             if assigned else None, 1),
        "tenants": _tenant_summary(app, scenario, assigned, specs) if scenario.tenants else None,
        "startup_s": _round((first_claim - start_ms) / 1000 if first_claim else None, 3),
        "elapsed_s": round((end_ms - start_ms) / 1000, 3),
        "register_s": round(register_s, 3),
        "submit_s": round(submit_s, 3),
        "workers": {"batches": counters.get("batches", 0), "claimed": counters.get("claimed", 0),
                    "placed": counters.get("placed", 0), "refused": counters.get("refused", 0),
                    "unplaced_attempts": counters.get("unplaced", 0), "reported": len(pool.reports)},
        "states": checks["states"],
        "unplaced_examples": unplaced_summary(tasks),
        "machine": {**host, "loadavg_1m_after": machine()["loadavg_1m"]},
        "definitions": DEFINITIONS,
    }


def _tenant_summary(app: App, scenario: Scenario, assigned: list[Task], specs: list[JobSpec]) -> dict:
    """Per tenant: weight, tasks assigned, and its weighted dominant share at the end."""
    tenant_of = {spec.id: spec.tenant for spec in specs}
    usage = app.store.usage()
    capacity: dict[str, int] = {}
    for node in app.store.nodes():
        for resource, amount in node.capacity.items():
            capacity[resource] = capacity.get(resource, 0) + amount
    out = {}
    for tenant, weight in tenant_weights(scenario).items():
        share = max((usage.get(f"tenant:{tenant}:{r}", 0) / c for r, c in capacity.items() if c), default=0.0)
        out[tenant] = {"weight": weight, "assigned": sum(1 for t in assigned if tenant_of.get(t.job) == tenant),
                       "dominant_share": round(share, 4), "weighted_share": round(share / weight, 4)}
    return out


def _round(value, digits):
    return None if value is None else round(value, digits)


def _per(amount: int, count: int):
    return round(amount / count, 1) if count else None


# ----------------------------------------------------------------------------- the sweep
def sweep_scenarios(scenario: Scenario, sizes=SWEEP_NODES) -> list[Scenario]:
    """The scenario at each cluster size, with the jobs scaled to keep the load per node."""
    return [replace(scenario, nodes=n, jobs=max(1, round(scenario.jobs * n / scenario.nodes))) for n in sizes]


SWEEP_FIELDS = ("nodes", "jobs", "tasks", "assigned", "unplaced", "placements_per_s", "placements_per_s_from_start",
                "us_per_placement", "worker_cpu_us_per_placement", "window_s", "commit_rejections", "overcommits", "invariants_ok",
                "spread_skew", "redis_bytes_per_task", "worker_cpu_s", "redis_cpu_s", "register_s", "submit_s",
                "machine")


def run_sweep(scenario: Scenario, sizes=SWEEP_NODES, redis_url: str | None = None,
              namespace: str = DEFAULT_NAMESPACE, clear: bool = True, progress: bool = False,
              on_point: Callable[[dict], None] | None = None) -> dict:
    """The batch run at each size (a fresh private server for each, unless a URL is given)."""
    points = []
    for i, point in enumerate(sweep_scenarios(scenario, sizes)):
        report = run_batch(point, redis_url, namespace, clear=clear or i > 0, progress=progress)
        row = {name: report.get(name, report["scenario"].get(name)) for name in SWEEP_FIELDS}
        row["problems"] = report["problems"]
        points.append(row)
        if on_point:
            on_point(row)
    base = points[0]["us_per_placement"] if points else None
    for row in points:
        us = row["us_per_placement"]
        row["vs_first"] = round(us / base, 2) if us and base else None
    return {
        "mode": "sweep",
        "scenario": {**scenario.describe(), "sizes": list(sizes),
                     "jobs_per_point": "jobs x nodes / scenario nodes (same load per node)"},
        "points": points,
        "invariants_ok": all(row["invariants_ok"] for row in points),
        "overcommits": sum(row["overcommits"] for row in points),
        "window": WINDOW,
        "definitions": {**DEFINITIONS, "vs_first": "us_per_placement relative to the first (smallest) point"},
    }


# ----------------------------------------------------------------------------- offered load
def run_rate(rate: float, duration: float = 10.0, warmup: float = 2.0, nodes: int = DEFAULT_NODES,
             replicas: int = 1, workers: int = DEFAULT_WORKERS, batch_size: int = DEFAULT_BATCH,
             seed: int = DEFAULT_SEED, redis_url: str | None = None, namespace: str = DEFAULT_NAMESPACE,
             clear: bool = True, progress: bool = False, drain_timeout: float | None = None,
             percentage_of_nodes: int | None = None) -> dict:
    """Offer ``rate`` tasks/s (jobs of ``replicas`` tasks, at evenly spaced instants) for
    ``warmup`` + ``duration`` seconds while the workers run; latency over the tasks
    submitted after the warm-up."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        app = App(redis_url=url, namespace=namespace)
        try:
            return _run_rate(app, bar, rate, duration, warmup, nodes, replicas, workers, batch_size, seed, clear,
                             redis_url is None, drain_timeout, percentage_of_nodes)
        finally:
            app.close()


def _run_rate(app, bar, rate, duration, warmup, node_count, replicas, workers, batch_size, seed, clear, private,
              drain_timeout, percentage_of_nodes) -> dict:
    prepare_namespace(app, clear)
    nodes = make_nodes(node_count, seed)
    update = bar.phase(f"registering {len(nodes)} nodes", len(nodes))
    register_nodes(app, nodes, lambda count: update(advance=count))
    warm = [parse_job(raw) for raw in rate_specs(round(rate * warmup / replicas), replicas, seed, "w")]
    measured = [parse_job(raw) for raw in rate_specs(max(1, round(rate * duration / replicas)), replicas, seed, "r")]
    everything = warm + measured
    total = len(everything) * replicas
    info_before = redis_info(app)
    host = machine()
    interval = replicas / rate
    backlog_max = 0
    lag_max = 0.0
    update = bar.phase(f"offering {rate:g} tasks/s", total)

    def poll() -> dict[str, int]:
        nonlocal backlog_max
        counts = app.queue.counts()
        backlog_max = max(backlog_max, counts["active"])
        stats = read_stats(app)
        update(completed=stats.get("placed", 0),
               note=f"queued {counts['active']}  in flight {counts['inflight']}  "
                    f"commit rejections {stats.get('refused', 0)}")
        return counts

    with worker_processes(app.url, app.keys.namespace, workers, batch_size, until_idle=False, seed=seed,
                    percentage_of_nodes=percentage_of_nodes) as pool:
        pool.start()
        pool.wait_started()
        pool.release()
        time.sleep(STARTUP_GRACE_S)
        start = last_poll = time.perf_counter()
        measured_start = measured_end = None
        i = 0
        while i < len(everything):
            # One tick: every job due by now goes in one call (submit_many), so that the
            # submitter does not pay a round trip per job; then wait a tick, or until the next is due.
            now = time.perf_counter()
            if now - last_poll >= 0.2:
                last_poll = now
                poll()
            due = min(len(everything), int((now - start) / interval) + 1)
            if due > i:
                lag_max = max(lag_max, now - (start + i * interval))
                if i <= len(warm) < due:
                    measured_start = now
                submit_many(app.store, [(spec.id, spec) for spec in everything[i:due]])
                i = due
            if i < len(everything):
                wake = max(now + RATE_TICK_S, start + i * interval)
                time.sleep(max(0.0, min(wake - time.perf_counter(), 0.2)))
        measured_end = time.perf_counter()
        submitted_all = measured_end
        deadline = submitted_all + (drain_timeout if drain_timeout is not None else max(30.0, 5 * (warmup + duration)))
        while True:
            counts = poll()
            drained = counts["active"] == 0 and counts["backoff"] == 0 and counts["inflight"] == 0
            if drained or time.perf_counter() >= deadline:
                break
            time.sleep(0.05)
        drained_s = time.perf_counter() - submitted_all
        pool.stop()
        pool.join()
    info_end = redis_info(app)
    worker_cpu = pool.totals()[1]
    counters = read_stats(app)

    tasks = read_tasks(app, app.store.all_task_ids())
    checks = check_results(app, tasks, total, counters, pool, require_reasons=drained)
    measured_ids = {spec.id for spec in measured}
    mine = [t for t in tasks if t.job in measured_ids]
    assigned = [t for t in mine if t.state == ASSIGNED]
    latencies = sorted(t.assigned_ms - t.created_ms for t in assigned)
    window_ms = (max(t.assigned_ms for t in assigned) - min(t.created_ms for t in mine)
                 if assigned else 0)
    # From when the measured part was due to start (not when it did: a submitter running
    # late and catching up would seem faster than offered) to one interval after its last
    # submission (n submissions on schedule span n intervals).
    submit_s = measured_end + interval - (start + len(warm) * interval) if measured_start is not None else 0.0
    return {
        "mode": "rate",
        "scenario": {"nodes": node_count, "rate": rate, "duration_s": duration, "warmup_s": warmup,
                     "replicas": replicas, "workers": workers, "batch_size": batch_size, "seed": seed,
                     "percentage_of_nodes": percentage_of_nodes,
                     "tasks": total, "measured_tasks": len(measured) * replicas, "zones": ZONES, "racks": RACKS,
                     "redis": "private" if private else "given", "namespace": app.keys.namespace},
        "offered_rate": rate,
        "tick_ms": RATE_TICK_S * 1000,
        "achieved_rate": round(len(mine) / submit_s, 1) if submit_s > 0 else None,  # behind schedule: lower
        "submit_lag_max_ms": round(lag_max * 1000, 1),
        "placements_per_s": round(len(assigned) / (window_ms / 1000), 1) if window_ms > 0 else None,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1] if latencies else None,
        "latency": "created to assigned, over the tasks submitted after the warm-up"
                   + ("" if drained else "; queue not drained, so only the tasks assigned in time count"),
        "drained": drained,
        "never_attempted": sum(1 for t in tasks if t.state == PENDING and not t.explanation),
        "tasks": len(tasks),
        "assigned": sum(1 for t in tasks if t.state == ASSIGNED),
        "unplaced": sum(1 for t in tasks if t.state == PENDING and t.explanation),
        "backlog_max": backlog_max,
        "drain_s": round(drained_s, 3),
        "commit_rejections": counters.get("refused", 0),
        "overcommits": checks["overcommits"],
        "invariants_ok": checks["invariants_ok"],
        "problems": checks["problems"],
        "redis_bytes_per_task": _per(info_end["used_memory"] - info_before["used_memory"], len(tasks)),
        "worker_cpu_s": round(worker_cpu, 3),
        "redis_cpu_s": round(info_end["cpu_s"] - info_before["cpu_s"], 3),
        "workers": {**{name: counters.get(name, 0) for name in ("batches", "claimed", "placed", "refused")},
                    "reported": len(pool.reports)},
        "states": checks["states"],
        "machine": {**host, "loadavg_1m_after": machine()["loadavg_1m"]},
        "definitions": RATE_DEFINITIONS,
    }


# ----------------------------------------------------------------------------- output
SUMMARY = {
    "batch": ("tasks", "assigned", "unplaced", "placements_per_s", "placements_per_s_from_start", "us_per_placement",
              "window_s", "p50_ms", "p99_ms", "commit_rejections", "overcommits", "invariants_ok", "spread_skew", "zone_spread_skew",
              "redis_bytes_per_task", "worker_cpu_s", "worker_cpu_us_per_placement", "redis_cpu_s", "startup_s",
              "elapsed_s", "register_s", "submit_s"),
    "rate": ("offered_rate", "achieved_rate", "submit_lag_max_ms", "placements_per_s", "p50_ms", "p99_ms", "max_ms",
             "tasks", "assigned", "unplaced", "never_attempted", "backlog_max", "drained", "drain_s",
             "commit_rejections", "overcommits",
             "invariants_ok", "redis_bytes_per_task", "worker_cpu_s", "redis_cpu_s"),
}


def print_report(report: dict) -> None:
    """The report for people: a table (the JSON has everything)."""
    from scheduler.tools.render import print_table

    mode = report["mode"]
    scenario = ", ".join(f"{k}={v}" for k, v in report["scenario"].items() if not isinstance(v, (dict, list)))
    if mode == "sweep":
        columns = ["NODES", "TASKS", "UNPLACED", "PLACEMENTS/S", "US/PLACEMENT", "VS FIRST", "CPU US/PLACEMENT",
                   "OK"]
        rows = [[p["nodes"], p["tasks"], p["unplaced"], p["placements_per_s"], p["us_per_placement"], p["vs_first"],
                 p["worker_cpu_us_per_placement"], "yes" if p["invariants_ok"] and not p["overcommits"] else "NO"]
                for p in report["points"]]
        print(f"sched bench --sweep: {scenario}")
        print_table(columns, rows)
        problems = [problem for p in report["points"] for problem in p["problems"]]
    else:
        names = SUMMARY["rate" if mode == "rate" else "batch"]
        print(f"sched bench ({mode}): {scenario}")
        print_table(["MEASURE", "VALUE"], [[name, report.get(name)] for name in names])
        problems = report["problems"]
    for problem in problems:
        print(f"problem: {problem}")


# ----------------------------------------------------------------------------- cells
def cell_namespaces(url: str, count: int) -> list[str]:
    """``count`` namespaces, on as many different masters as a cluster has (round-robin)."""
    probe = App(redis_url=url, namespace="bench-c0")
    by_owner: dict[str, list[str]] = {}
    for i in range(2000):
        ns = f"bench-c{i}"
        by_owner.setdefault(App(client=probe.client, namespace=ns).store.slot_owner(), []).append(ns)
        if len(by_owner) >= count and all(len(v) >= count for v in by_owner.values()):
            break
    owners = sorted(by_owner)
    return [by_owner[owners[i % len(owners)]][i // len(owners)] for i in range(count)]


def run_cells(scenario: Scenario, cells: int, redis_url: str | None = None, progress: bool = False) -> dict:
    """``cells`` namespaces at once, each with the scenario's nodes and jobs and its own
    ``scenario.workers`` worker processes, all released together; reports aggregate and
    per-cell placements/s, and CPU per placement (Redis, summed over masters; workers)."""
    with redis_server(redis_url) as url, Progress(progress) as bar:
        apps = [App(redis_url=url, namespace=ns) for ns in cell_namespaces(url, cells)]
        update = bar.phase(f"preparing {cells} cell(s)", cells)
        for app in apps:
            prepare_namespace(app, clear=True)
            register_nodes(app, make_nodes(scenario.nodes, scenario.seed))
            for raw in job_specs(scenario):
                submit(app.store, parse_job(raw))
            update(advance=1)
        info_before = apps[0].store.shards_usage()
        pools = [worker_processes(url, app.keys.namespace, scenario.workers, scenario.batch_size, until_idle=True,
                                  seed=scenario.seed, percentage_of_nodes=scenario.percentage_of_nodes) for app in apps]
        update = bar.phase(f"placing ({cells} cells x {scenario.workers} workers)", cells * scenario.tasks)
        for pool in pools:
            pool.start()
        for pool in pools:
            pool.wait_started()
        watches = [ClaimWatch(app, redis_now_ms(app)) for app in apps]
        for pool in pools:
            pool.release()
        while any(pool.alive() for pool in pools):
            for watch in watches:
                watch.poll()
            update(completed=sum(read_stats(app).get("placed", 0) for app in apps))
            time.sleep(0.05)
        for pool in pools:
            pool.join(timeout=30)
        info_after = apps[0].store.shards_usage()
        per_cell, firsts, lasts, assigned_total, ok = [], [], [], 0, True
        for app, watch in zip(apps, watches):
            watch.poll()
            tasks = read_tasks(app, app.store.all_task_ids())
            assigned = [t for t in tasks if t.state == ASSIGNED]
            last = max((t.assigned_ms for t in assigned), default=None)
            window = (last - watch.first_ms) / 1000 if assigned and watch.first_ms is not None else None
            report = audit(app.store)
            ok = ok and report.ok
            per_cell.append({"namespace": app.keys.namespace, "shard": app.store.slot_owner() or "single",
                             "assigned": len(assigned), "placements_per_s": _round(len(assigned) / window, 1)
                             if window else None, "invariants_ok": report.ok})
            assigned_total += len(assigned)
            if watch.first_ms is not None and last is not None:
                firsts.append(watch.first_ms)
                lasts.append(last)
        window_s = (max(lasts) - min(firsts)) / 1000 if firsts else None
        worker_cpu = sum(pool.totals()[1] for pool in pools)
        redis_cpu = info_after["cpu_s"] - info_before["cpu_s"]
        for app in apps:
            app.close()
    return {"mode": "cells", "cells": cells, "scenario": scenario.describe(), "machine": machine(),
            "masters": info_after.get("masters", 1), "assigned": assigned_total,
            "placements_per_s": _round(assigned_total / window_s, 1) if window_s else None,
            "per_cell": per_cell, "worker_cpu_s": _round(worker_cpu, 2), "redis_cpu_s": _round(redis_cpu, 2),
            "worker_cpu_ms_per_placement": _round(1000 * worker_cpu / assigned_total, 3) if assigned_total else None,
            "redis_cpu_ms_per_placement": _round(1000 * redis_cpu / assigned_total, 3) if assigned_total else None,
            "invariants_ok": ok, "overcommits": 0}

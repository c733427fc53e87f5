"""Synthetic traces (``sched simulate generate``), drawn from published shapes.

Sources (docs/simulate.md, "Synthetic traces", gives the numbers and which are ours):

- **Machines**: the machine mix of Google's 2011 cluster trace (Reiss et al., SoCC 2012,
  Table 1; capacities normalised to the largest machine): 0.50 cpu / 0.50 memory on 53.47 %
  of machines, 0.50 / 0.25 on 30.74 %, 0.50 / 0.75 on 7.95 %, 1.00 / 1.00 on 6.32 %,
  0.25 / 0.25 on 0.99 % (the rest, 0.53 %, in rarer shapes, left out). We scale 1.00 to
  32 cores and 128 GiB.
- **Tasks**: most tasks ask for a small fraction of a machine and most jobs are short,
  with a heavy tail of long-running ones holding much of the cluster (Reiss et al. 2012;
  for Alibaba's 2018 trace, Guo et al., IWQoS 2019). Sizes are log-normal and durations a
  log-normal body with a Pareto tail; the parameters below are ours, chosen for those
  shapes, not fitted percentiles.
- **Load**: arrivals are a Poisson process whose rate offers ``LOAD`` (75 %) of the
  cluster's cpu on average, so that placement, not a lack of machines, decides the result.
"""

from __future__ import annotations

import math
import random
from typing import Iterator

from scheduler.model import SpecError

# (share of machines, cpu, memory) normalised to the largest machine: Reiss et al. 2012, Table 1.
GOOGLE_2011_MACHINES = ((0.5347, 0.50, 0.50), (0.3074, 0.50, 0.25), (0.0795, 0.50, 0.75), (0.0632, 1.00, 1.00),
                        (0.0099, 0.25, 0.25))
FULL_CPU, FULL_MEMORY_GIB = 32, 128  # our scale of 1.00
LOAD = 0.75
KINDS = ("batch", "service")
# Our parameters (docs/simulate.md): the share of tasks that belong to services, per kind of trace.
SERVICE_SHARE = {"batch": 0.1, "service": 0.6}
TENANTS = (("team-a", 0.5), ("team-b", 0.3), ("team-c", 0.2))
MiB = 1024 * 1024
BATCH_LONGEST = 3_600.0  # the batch tail's cap (ours): an hour


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def _pareto(rng: random.Random, minimum: float, alpha: float, high: float) -> float:
    return min(high, minimum / (1.0 - rng.random()) ** (1.0 / alpha))


def _choose(rng: random.Random, weighted) -> tuple:
    pick, total = rng.random() * sum(w[0] for w in weighted), 0.0
    for item in weighted:
        total += item[0]
        if pick < total:
            return item
    return weighted[-1]


def _batch_task(rng: random.Random) -> tuple[float, int, float]:
    """(cores, memory bytes, seconds) of a batch task."""
    cpu = _lognormal(rng, 0.5, 0.8, 0.05, 8.0)
    memory = cpu * _lognormal(rng, 2.0, 0.5, 0.0625, 16.0) * 1024 * MiB
    if rng.random() < 0.1:  # the heavy tail
        seconds = _pareto(rng, 600.0, 1.5, BATCH_LONGEST)
    else:
        seconds = _lognormal(rng, 120.0, 1.0, 1.0, BATCH_LONGEST)
    return cpu, int(memory), seconds


def _service_task(rng: random.Random) -> tuple[float, int, float]:
    """(cores, memory bytes, 0): a service runs until the trace's window ends."""
    cpu = _lognormal(rng, 1.0, 0.7, 0.1, 8.0)
    memory = cpu * _lognormal(rng, 4.0, 0.5, 0.25, 16.0) * 1024 * MiB
    return cpu, int(memory), 0.0


def _tasks_per_job(rng: random.Random) -> int:
    return 1 if rng.random() < 0.7 else int(_pareto(rng, 2.0, 1.2, 200.0))


def generate(kind: str, tasks: int, nodes: int, seed: int = 0, span_s: float | None = None) -> Iterator[dict]:
    """The events of a synthetic trace: ``nodes`` nodes at time 0, then ``tasks`` tasks.
    ``span_s`` sets the arrival window's length instead of the load: the same jobs arrive
    at the same rate relative to each other, spread over that many seconds (a light load
    when it is longer than the window that offers ``LOAD``)."""
    if kind not in KINDS:
        raise SpecError(f"kind {kind!r} is not one of {', '.join(KINDS)}.")
    if tasks < 1 or nodes < 1:
        raise SpecError("a synthetic trace needs at least one task and one node.")
    if span_s is not None and not span_s > 0:
        raise SpecError(f"the arrival window is a positive number of seconds, not {span_s!r}.")
    rng = random.Random(seed)
    capacity_cpu = 0.0
    for i in range(nodes):
        _, cpu, memory = _choose(rng, GOOGLE_2011_MACHINES)
        capacity_cpu += cpu * FULL_CPU
        yield {"kind": "node", "time": 0, "name": f"node-{i}", "cpu": int(cpu * FULL_CPU),
               "memory": f"{int(memory * FULL_MEMORY_GIB)}GiB", "labels": {"rack": f"r{i // 40}"}}
    for tenant, _ in TENANTS:
        yield {"kind": "tenant", "time": 0, "name": tenant, "weight": 1}
    jobs = []  # (service, count, cores, memory, seconds, tenant)
    made = 0
    while made < tasks:
        service = rng.random() < SERVICE_SHARE[kind]
        count = min(_tasks_per_job(rng), tasks - made)
        cpu, memory, seconds = (_service_task if service else _batch_task)(rng)
        jobs.append((service, count, cpu, memory, seconds, _choose(rng, [(w, t) for t, w in TENANTS])[1]))
        made += count
    # The arrival window that offers LOAD of the cluster's cpu. Services run from their
    # arrival to the window's end (half of it on average); batch tasks for their duration.
    batch_work = sum(count * cpu * seconds for service, count, cpu, _, seconds, _ in jobs if not service)
    services = sum(count * cpu for service, count, cpu, *_ in jobs if service)
    room = max(LOAD * capacity_cpu - services / 2, LOAD * capacity_cpu / 4)
    span = batch_work / room if batch_work else 3_600.0
    rate = len(jobs) / span
    if span_s is not None:  # the same draws, the arrival times scaled to that window
        rate, span = len(jobs) / span_s, span_s
    at = 0.0
    for number, (service, count, cpu, memory, seconds, tenant) in enumerate(jobs):
        record = {"kind": "task", "time": round(at, 3), "job": f"{'s' if service else 'b'}-{number:06d}",
                  "count": count, "duration": round(max(60.0, span - at) if service else seconds, 1),
                  "tenant": tenant,
                  "resources": {"cpu": f"{max(1, round(cpu * 1000))}m", "memory": f"{max(1, memory // MiB)}MiB"}}
        if service:
            record.update(type="service", priority=200, preemptible=False)
        else:
            record.update(priority=50)
        yield record
        at += rng.expovariate(rate)

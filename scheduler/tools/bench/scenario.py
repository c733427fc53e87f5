"""The synthetic workload of ``sched bench``: the cluster's nodes and the jobs offered to it.

A :class:`Scenario` names one batch run (default, ``--distinct``, ``--small``, ``--gang``,
``--tenants``, ``--rules``; ``--cells`` runs it in several namespaces); :func:`job_specs` and
:func:`rate_specs` turn it into raw job specs. Everything is derived from the seed, and
nothing here touches Redis.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from scheduler.model import BINPACK, JobSpec, Node, make_node
from scheduler.model.quantities import CPU, MEMORY

DEFAULT_NODES = 5000
DEFAULT_JOBS = 100
DEFAULT_REPLICAS = 100
DEFAULT_WORKERS = 2
DEFAULT_BATCH = 512
DEFAULT_SEED = 42
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
    stream_maxlen: int | None = None  # --stream-maxlen N: the event stream's bound (0: none; None: the default)
    rules: bool = False  # --rules: tainted nodes, and jobs with affinities, spread, anti-affinity (_rules_shape)

    @property
    def tasks(self) -> int:
        return self.jobs * self.replicas

    def describe(self) -> dict:
        return {**asdict(self), "tasks": self.tasks, "zones": ZONES, "racks": RACKS}


def zone_of_rack(rack: int) -> int:
    return rack * ZONES // RACKS


def make_nodes(count: int, seed: int = DEFAULT_SEED, rules: bool = False) -> list[Node]:
    """``count`` nodes ``n000000``...: round-robin over the racks, sizes drawn from ``seed``;
    with ``rules``, one node in 10 tainted ``dedicated=gpu:NoSchedule`` and one in 10
    ``spot:PreferNoSchedule``."""
    rng = random.Random(f"{seed}:nodes")
    nodes = []
    for i in range(count):
        rack = i % RACKS
        taints = (["dedicated=gpu:NoSchedule"] if i % 10 == 0 else ["spot:PreferNoSchedule"] if i % 10 == 5 else []) \
            if rules else None
        nodes.append(make_node(
            f"n{i:06d}", cpu=rng.choice(NODE_CPUS), memory=f"{rng.choice(NODE_MEMORY_GIB)}GiB",
            labels={"zone": f"z{zone_of_rack(rack)}", "rack": f"r{rack:02d}"}, taints=taints))
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
        (_rules_shape if scenario.rules else _shape)(raw, j)
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


def _rules_shape(raw: dict, j: int) -> None:
    """``--rules``: job number ``j``'s placement rules, a quarter of the jobs each: a soft
    affinity for a zone (and tolerating the spot taint); a hard spread over zones; one task
    per host, by anti-affinity with itself (kube's classic); tolerating the dedicated taint,
    with a soft affinity for the zones of the job before. Every job has labels."""
    raw["labels"] = {"app": f"a{j:04d}"}
    kind = j % 4
    if kind == 0:
        raw["affinities"] = [{"attribute": "node.labels.zone", "value": f"z{(j // 4) % ZONES}", "weight": 50}]
        raw["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    elif kind == 1:
        raw["topology_spread"] = [{"attribute": "node.labels.zone", "max_skew": 1}]
    elif kind == 2:
        raw["job_anti_affinity"] = [{"match": {"app": f"a{j:04d}"}, "attribute": "node.hostname", "required": True}]
    else:
        raw["tolerations"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
        raw["job_affinity"] = [{"match": {"app": f"a{j - 1:04d}"}, "attribute": "node.labels.zone", "weight": 50}]
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

"""A node: a machine's capacity, labels and platform, and what is placed on it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scheduler.model.errors import SpecError
from scheduler.model.names import check_node_name, parse_labels, parse_plugins
from scheduler.model.quantities import CPU, MEMORY, parse_resources
from scheduler.model.states import ACTIVE, READY
from scheduler.model.taints import parse_taints


@dataclass(frozen=True, slots=True)
class Nomination:
    """Room held on a node for a preemptor that evicted tasks there (kube's nominated pod).

    While it lasts, tasks of the same or lower priority (of other jobs) may not use it."""

    task_id: str
    job: str
    priority: int
    expires_ms: int
    resources: dict[str, int]
    ports: tuple[int, ...]


@dataclass(slots=True)
class Node:
    """A machine as the scheduler sees it: static description plus what is placed on it."""

    name: str
    capacity: dict[str, int]
    allocated: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    engine_labels: dict[str, str] = field(default_factory=dict)
    hostname: str = ""
    role: str = "worker"
    os: str = "linux"
    arch: str = "amd64"
    plugins: frozenset[str] = frozenset()
    availability: str = ACTIVE
    status: str = READY
    ports: dict[int, str] = field(default_factory=dict)  # host port -> task id holding it
    tasks: int = 0  # tasks of every job placed here
    nominations: dict[str, Nomination] = field(default_factory=dict)  # task id -> room held for it
    taints: tuple = ()  # its Taints (scheduler.model.taints), in the order they were given
    slots: int = 0  # live tasks (assigned or running) it accepts, its agent's slots; 0: no limit (no agent)

    def __post_init__(self):
        if not self.hostname:
            self.hostname = self.name

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.allocated.get(resource, 0)


MIN_SLOTS, MAX_SLOTS = 2, 64


def default_slots(node: Node) -> int:
    """An agent's task slots when none are given: one per core the node advertises, rounded
    up (Celery's default concurrency is the number of CPUs), from 2 (a task beside a long
    one) to 64 (each slot is a worker process)."""
    cores = -(-node.capacity.get(CPU, 0) // 1000)
    return min(MAX_SLOTS, max(MIN_SLOTS, cores))


def make_node(name, *, cpu=None, memory=None, resources=None, labels=None, engine_labels=None,
              os="linux", arch="amd64", role="worker", plugins=None, hostname=None, taints=None) -> Node:
    """Validate a node description (from ``sched node add`` flags or an agent)."""
    check_node_name(name)
    raw = dict(resources or {})
    if cpu is not None:
        raw[CPU] = cpu
    if memory is not None:
        raw[MEMORY] = memory
    capacity = parse_resources(raw, f"node {name} capacity")
    for required in (CPU, MEMORY):
        if required not in capacity:
            raise SpecError(f"node {name} needs a {required} capacity (for example --cpu 4 --memory 8GiB).")
    for what, value in (("os", os), ("arch", arch), ("role", role)):
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", value):
            raise SpecError(f"node {name} {what} {value!r} is not valid.")
    return Node(
        name=name,
        capacity=capacity,
        labels=parse_labels(labels, f"node {name} labels"),
        engine_labels=parse_labels(engine_labels, f"node {name} engine labels"),
        hostname=hostname or name,
        role=role,
        os=os,
        arch=arch,
        plugins=frozenset(parse_plugins(plugins, f"node {name} plugins")),
        taints=parse_taints(taints),
    )


"""Nodes, jobs and tasks: the nouns of the scheduler, and the parsing that turns what a
person writes (YAML, JSON, CLI flags) into validated values.

Validation happens here, once, before anything reaches Redis: a spec that parses is a
spec the scheduler can place. Every error is one sentence naming the problem.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from .constraints import Constraint, attribute_getter, parse_constraints
from .errors import SpecError
from .quantities import CPU, MEMORY, parse_resources

# Task states (the contract's names). A task is in exactly one at a time.
PENDING, ASSIGNED, RUNNING = "pending", "assigned", "running"
COMPLETED, FAILED, PREEMPTED, LOST, STOPPED = "completed", "failed", "preempted", "lost", "stopped"
TASK_STATES = (PENDING, ASSIGNED, RUNNING, COMPLETED, FAILED, PREEMPTED, LOST, STOPPED)
LIVE_STATES = frozenset({ASSIGNED, RUNNING})  # holding resources on a node
TERMINAL_STATES = frozenset({COMPLETED, FAILED, PREEMPTED, LOST, STOPPED})

# Node availability (set by people) and status (observed).
ACTIVE, PAUSE, DRAIN = "active", "pause", "drain"
AVAILABILITIES = (ACTIVE, PAUSE, DRAIN)
READY, DOWN = "ready", "down"

SERVICE, BATCH, GLOBAL = "service", "batch", "global"
JOB_TYPES = (SERVICE, BATCH, GLOBAL)
SPREAD, BINPACK = "spread", "binpack"
STRATEGIES = (SPREAD, BINPACK)

MIN_PRIORITY, MAX_PRIORITY = 0, 1000
MAX_REPLICAS = 1_000_000

_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,252}$")
_PLUGIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")


def check_job_id(job_id) -> str:
    if not isinstance(job_id, str) or not _JOB_ID_RE.match(job_id):
        raise SpecError(
            f"job id {job_id!r} is not valid; use up to 63 letters, digits, - and _, starting with a letter or digit."
        )
    return job_id


def check_node_name(name) -> str:
    if not isinstance(name, str) or not _NODE_NAME_RE.match(name):
        raise SpecError(f"node name {name!r} is not valid; use letters, digits, '.', '-' and '_'.")
    return name


def new_job_id() -> str:
    return "job-" + secrets.token_hex(4)


def parse_labels(raw, what: str = "labels") -> dict[str, str]:
    """``{zone: eu-1}`` or ``["zone=eu-1"]`` -> ``{"zone": "eu-1"}``."""
    if raw is None:
        return {}
    if isinstance(raw, (list, tuple)):
        pairs = {}
        for item in raw:
            if not isinstance(item, str) or "=" not in item:
                raise SpecError(f"{what} entry {item!r} must look like key=value.")
            key, _, value = item.partition("=")
            pairs[key.strip()] = value.strip()
        raw = pairs
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping of key to value.")
    labels = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            raise SpecError(f"{what} key {key!r} is not valid; use letters, digits, '.', '/', '-' and '_'.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what} value for {key!r} must be a string or number.")
        labels[key] = str(value)
    return labels


def _parse_plugins(raw, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(p, str) and _PLUGIN_RE.match(p) for p in raw):
        raise SpecError(f"{what} must be a list of plugin names such as [network, volume].")
    return tuple(sorted(set(raw)))


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

    def __post_init__(self):
        if not self.hostname:
            self.hostname = self.name

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.allocated.get(resource, 0)


def make_node(name, *, cpu=None, memory=None, resources=None, labels=None, engine_labels=None,
              os="linux", arch="amd64", role="worker", plugins=None, hostname=None) -> Node:
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
        if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9_.-]{1,63}$", value):
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
        plugins=frozenset(_parse_plugins(plugins, f"node {name} plugins")),
    )


@dataclass(frozen=True, slots=True)
class Preference:
    """``{spread: node.labels.zone}``: equalise task counts across the label's values."""

    spread: str
    get: object = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated job. ``raw`` is the normalised form stored in Redis and shown to users."""

    id: str
    type: str
    priority: int
    replicas: int
    resources: dict[str, int]
    constraints: tuple[Constraint, ...]
    preferences: tuple[Preference, ...]
    ports: tuple[int, ...]
    plugins: tuple[str, ...]
    strategy: str
    max_per_node: int  # 0 means no limit
    run: dict | None
    preemptible: bool
    preempt: str  # "lower" (may evict lower priorities) or "never"
    max_retries: int
    restart_delay: float
    raw: dict = field(compare=False, repr=False)


_JOB_FIELDS = {
    "id", "type", "priority", "replicas", "resources", "constraints", "preferences", "ports",
    "plugins", "strategy", "max_per_node", "run", "preemptible", "preempt", "max_retries",
    "restart_delay",
}


def _int_field(raw: dict, name: str, default: int, low: int, high: int, job: str) -> int:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"job {job}: {name} must be a whole number, not {value!r}.")
    if not low <= value <= high:
        raise SpecError(f"job {job}: {name} must be between {low} and {high}, not {value}.")
    return value


def _parse_run(run, job: str) -> dict | None:
    if run is None:
        return None
    if not isinstance(run, dict):
        raise SpecError(f"job {job}: run must be {{func: 'module:function'}} or {{command: [...]}}.")
    unknown = set(run) - {"func", "args", "kwargs", "command", "timeout"}
    if unknown:
        raise SpecError(f"job {job}: run has unknown field {sorted(unknown)[0]!r}.")
    if ("func" in run) == ("command" in run):
        raise SpecError(f"job {job}: run needs exactly one of func or command.")
    if "func" in run:
        func = run["func"]
        if not isinstance(func, str) or not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", func):
            raise SpecError(f"job {job}: run.func {func!r} must look like 'package.module:function'.")
        if not isinstance(run.get("args", []), list) or not isinstance(run.get("kwargs", {}), dict):
            raise SpecError(f"job {job}: run.args must be a list and run.kwargs a mapping.")
    else:
        command = run["command"]
        if (not isinstance(command, list) or not command
                or not all(isinstance(part, (str, int, float)) and not isinstance(part, bool) for part in command)):
            raise SpecError(f"job {job}: run.command must be a non-empty list of strings such as ['sleep', '1'].")
        run = {**run, "command": [str(part) for part in command]}
    timeout = run.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise SpecError(f"job {job}: run.timeout must be a positive number of seconds.")
    return dict(run)


def _parse_preferences(raw, job: str) -> tuple[Preference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: preferences must be a list such as [{{spread: node.labels.zone}}].")
    prefs = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"spread"} or not isinstance(item["spread"], str):
            raise SpecError(f"job {job}: preference {item!r} must be {{spread: <node attribute>}}.")
        key = item["spread"].strip()
        prefs.append(Preference(spread=key, get=attribute_getter(key, f"job {job}: preference")))
    return tuple(prefs)


def _parse_ports(raw, job: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: ports must be a list of host port numbers.")
    for port in raw:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise SpecError(f"job {job}: port {port!r} must be a whole number from 1 to 65535.")
    if len(set(raw)) != len(raw):
        raise SpecError(f"job {job}: ports lists a port twice.")
    return tuple(sorted(raw))


def parse_job(raw) -> JobSpec:
    """Validate a job spec (a mapping loaded from YAML or JSON)."""
    if not isinstance(raw, dict):
        raise SpecError("a job spec must be a mapping with fields such as replicas, resources and run.")
    unknown = set(raw) - _JOB_FIELDS
    if unknown:
        raise SpecError(f"job spec has unknown field {sorted(unknown)[0]!r}; known fields are {', '.join(sorted(_JOB_FIELDS))}.")
    job = check_job_id(raw["id"]) if raw.get("id") is not None else new_job_id()
    job_type = raw.get("type", SERVICE)
    if job_type not in JOB_TYPES:
        raise SpecError(f"job {job}: type {job_type!r} is not one of {', '.join(JOB_TYPES)}.")
    strategy = raw.get("strategy", SPREAD)
    if strategy not in STRATEGIES:
        raise SpecError(f"job {job}: strategy {strategy!r} is not one of {', '.join(STRATEGIES)}.")
    preempt = raw.get("preempt", "lower")
    if preempt not in ("lower", "never"):
        raise SpecError(f"job {job}: preempt must be 'lower' or 'never', not {preempt!r}.")
    preemptible = raw.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise SpecError(f"job {job}: preemptible must be true or false.")
    restart_delay = raw.get("restart_delay", 1.0)
    if isinstance(restart_delay, bool) or not isinstance(restart_delay, (int, float)) or not 0 <= restart_delay <= 3600:
        raise SpecError(f"job {job}: restart_delay must be a number of seconds from 0 to 3600.")
    if job_type == GLOBAL and "replicas" in raw:
        raise SpecError(f"job {job}: a global job runs one task per eligible node and takes no replicas.")
    resources = parse_resources(raw.get("resources"), f"job {job} resources")
    spec = JobSpec(
        id=job,
        type=job_type,
        priority=_int_field(raw, "priority", 50, MIN_PRIORITY, MAX_PRIORITY, job),
        replicas=0 if job_type == GLOBAL else _int_field(raw, "replicas", 1, 0, MAX_REPLICAS, job),
        resources=resources,
        constraints=parse_constraints(raw.get("constraints")),
        preferences=_parse_preferences(raw.get("preferences"), job),
        ports=_parse_ports(raw.get("ports"), job),
        plugins=_parse_plugins(raw.get("plugins"), f"job {job}: plugins"),
        strategy=strategy,
        max_per_node=_int_field(raw, "max_per_node", 0, 0, MAX_REPLICAS, job),
        run=_parse_run(raw.get("run"), job),
        preemptible=preemptible,
        preempt=preempt,
        max_retries=_int_field(raw, "max_retries", 3, 0, 1000, job),
        restart_delay=float(restart_delay),
        raw={},
    )
    normalised = {
        "id": spec.id, "type": spec.type, "priority": spec.priority, "replicas": spec.replicas,
        "resources": {name: f"{amount}m" if name == CPU else amount for name, amount in spec.resources.items()}, "constraints": [c.text for c in spec.constraints],
        "preferences": [{"spread": p.spread} for p in spec.preferences], "ports": list(spec.ports),
        "plugins": list(spec.plugins), "strategy": spec.strategy, "max_per_node": spec.max_per_node,
        "run": spec.run, "preemptible": spec.preemptible, "preempt": spec.preempt,
        "max_retries": spec.max_retries, "restart_delay": spec.restart_delay,
    }
    if job_type == GLOBAL:
        del normalised["replicas"]
    spec.raw.update(normalised)
    return spec


@dataclass(slots=True)
class Task:
    """One replica of a job. Its placement inputs come from the job spec of its version."""

    id: str
    job: str
    version: int
    state: str = PENDING
    node: str = ""
    priority: int = 50
    attempts: int = 0
    nominated_node: str = ""
    message: str = ""

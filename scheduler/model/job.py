"""A job spec: what a person writes (YAML, JSON), validated once into a :class:`JobSpec`.

A spec that parses is a spec the scheduler can place; every error is one sentence.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from scheduler.model.constraints import Constraint, attribute_getter, parse_constraints
from scheduler.model.disruption import DisruptionBudget, disruption_budget_raw, parse_disruption_budget
from scheduler.model.disconnect import DEFAULT as DEFAULT_DISCONNECT, Disconnect, disconnect_raw, parse_disconnect
from scheduler.model.errors import SpecError
from scheduler.model.affinities import Affinity, parse_affinities
from scheduler.model.job_affinity import JobAffinity, parse_job_affinity
from scheduler.model.names import check_job_id, check_tenant, new_job_id, parse_labels, parse_plugins
from scheduler.model.taints import Toleration, parse_tolerations
from scheduler.model.topology_spread import TopologySpread, parse_topology_spread
from scheduler.model.quantities import CPU, MEMORY, lookalike, parse_resources, whole
from scheduler.model.retention import parse_ttl_after_finished
from scheduler.model.update import HealthCheck, UpdatePolicy, health_raw, parse_health, parse_update, update_raw
from scheduler.model.dependencies import After, after_raw, parse_after
from scheduler.model.parameterized import Parameterized, parameterized_raw, parse_parameterized
from scheduler.model.periodic import Periodic, parse_periodic, periodic_raw
from scheduler.model.reschedule import Reschedule, parse_reschedule, reschedule_raw
from scheduler.model.states import (BATCH, GLOBAL, JOB_TYPES, MAX_PRIORITY, MAX_REPLICAS, MIN_PRIORITY,
                                    PER_NODE_TYPES, RUN_TO_COMPLETION, SERVICE, SPREAD, STRATEGIES)


@dataclass(frozen=True, slots=True)
class Preference:
    """``{spread: node.labels.zone}``: equalise task counts across the label's values; with
    ``targets`` (Nomad's spread targets, ``{eu-1: 70, eu-2: 30}``), share them out by those
    percentages, values not named sharing what is left."""

    spread: str
    get: Callable[[Any], str] = field(compare=False, repr=False)
    targets: tuple[tuple[str, int], ...] = ()  # (value, percentage), as written


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
    min_available: int = 0  # a gang: at least this many tasks start together (0: not a gang)
    tenant: str = "default"  # whose share of the cluster the job counts against (DRF)
    update: UpdatePolicy | None = None  # how a new version rolls out (None: it replaces every task at once)
    health: HealthCheck | None = None  # how the node's agent checks a running task
    # What its runs do while their agent cannot renew its heartbeat (disconnect.py).
    disconnect: Disconnect = DEFAULT_DISCONNECT
    # Seconds after the job finished that it is removed (Kubernetes' ttlSecondsAfterFinished);
    # None: the namespace's job_retention.
    ttl_after_finished: int | None = None
    labels: dict[str, str] = field(default_factory=dict)  # what job selectors match
    tolerations: tuple[Toleration, ...] = ()  # the node taints its tasks accept
    affinities: tuple[Affinity, ...] = ()  # nodes to prefer or avoid (soft)
    topology_spread: tuple[TopologySpread, ...] = ()
    job_affinity: tuple[JobAffinity, ...] = ()
    job_anti_affinity: tuple[JobAffinity, ...] = ()
    # Whether placing it depends on where tasks are beyond max_per_node, or scores beyond
    # the strategy: topology_spread, job (anti-)affinity, distinct_property, affinities,
    # spread targets, or labels (other jobs' rules may count its tasks).
    rules: bool = False
    # Whether its live tasks are counted by topology domain (tally:dom:<job>): it has labels
    # (other jobs' rules may count it), a spread, required anti-affinity or distinct_property.
    counted: bool = False
    periodic: Periodic | None = None  # launched on a schedule: the job itself runs no task
    parameterized: Parameterized | None = None  # launched by dispatch: the job itself runs no task
    after: tuple[After, ...] = ()  # jobs whose state its tasks wait for
    parallelism: int = 0  # at most this many live tasks at once (0: no limit)
    deadline: float = 0.0  # seconds a batch job may run before it is stopped and failed (0: none)
    reschedule: Reschedule | None = None  # what follows a failed task (None: the shorthands' policy)
    meta: dict | None = None  # key -> text, seen by its commands as SCHED_META_<KEY>
    # How many of its tasks voluntary disruptions (drains, rebalancing) may take down at once.
    disruption_budget: DisruptionBudget | None = None

    @property
    def launcher(self) -> bool:
        """A periodic or parameterized job: it launches child jobs and runs no task itself."""
        return self.periodic is not None or self.parameterized is not None

    @property
    def per_node(self) -> bool:
        """One task on every eligible node (global, sysbatch), not a count of replicas."""
        return self.type in PER_NODE_TYPES

    @property
    def policy(self) -> Reschedule:
        """What follows a failed task: the ``reschedule`` block, or what ``restart_delay``
        and ``max_retries`` stand for."""
        if self.reschedule is not None:
            return self.reschedule
        return Reschedule(delay=self.restart_delay, attempts=self.max_retries,
                          unlimited=self.type not in RUN_TO_COMPLETION)

    @property
    def gang(self) -> int:
        """How many tasks must be placed at once (all or none of them); 0 when not a gang."""
        return self.min_available

    def with_id(self, job_id: str) -> JobSpec:
        """This spec as the spec of job ``job_id`` (the same but for its id): jobs made
        from one template are validated once and share the rest."""
        if self.id == job_id:
            return self
        return _copy_with_id(self, job_id)


def _copier():
    """``_copy_with_id(spec, job_id)``: a field-by-field copy, written out for the fields
    of :class:`JobSpec` through their slots (dataclasses.replace runs the frozen
    ``__init__``, five times the cost, and a worker does this once per one-task job)."""
    names = [f.name for f in fields(JobSpec)]
    setters = {f"set_{name}": getattr(JobSpec, name).__set__ for name in names}
    lines = [f"    set_{name}(copy, self.{name})" for name in names if name not in ("id", "raw")]
    source = (f"def _copy_with_id(self, job_id):\n    copy = new(JobSpec)\n" + "\n".join(lines) +
              "\n    set_id(copy, job_id)\n    set_raw(copy, {**self.raw, 'id': job_id})\n    return copy\n")
    scope = {"new": object.__new__, "JobSpec": JobSpec, **setters}
    exec(source, scope)
    return scope["_copy_with_id"]


_copy_with_id = _copier()


_JOB_FIELDS = {
    "id", "type", "priority", "replicas", "resources", "constraints", "preferences", "ports",
    "plugins", "strategy", "max_per_node", "run", "preemptible", "preempt", "max_retries",
    "restart_delay", "gang", "min_available", "tenant", "update", "health", "disconnect",
    "ttl_after_finished",
    "labels", "tolerations", "affinities", "topology_spread", "job_affinity", "job_anti_affinity",
    "periodic", "parameterized", "after", "parallelism", "deadline", "reschedule", "meta", "disruption_budget",
}
MAX_DEADLINE_S = 30 * 86_400
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _int_field(raw: dict, name: str, default: int, low: int, high: int, job: str) -> int:
    given = raw.get(name, default)
    value = whole(given)
    if value is None:
        raise SpecError(f"job {job}: {name} must be a whole number, not {given!r}.")
    if not low <= value <= high:
        raise SpecError(f"job {job}: {name} must be between {low} and {high}, not {given}.")
    return value


def _parse_run(run, job: str) -> dict | None:
    if run is None:
        return None
    if not isinstance(run, dict):
        raise SpecError(f"job {job}: run must be {{func: 'module:function'}} or {{command: [...]}}.")
    unknown = set(run) - {"func", "args", "kwargs", "command", "timeout", "env"}
    if unknown:
        raise SpecError(f"job {job}: run has unknown field {sorted(unknown)[0]!r}.")
    if ("func" in run) == ("command" in run):
        raise SpecError(f"job {job}: run needs exactly one of func or command.")
    if "func" in run:
        func = run["func"]
        if not isinstance(func, str) or not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", func):
            raise SpecError(f"job {job}: run.func {func!r} must look like 'package.module:function'.")
        if not isinstance(run.get("args", []), list) or not isinstance(run.get("kwargs", {}), dict):
            raise SpecError(f"job {job}: run.args must be a list and run.kwargs a mapping.")
    else:
        command = run["command"]
        if (not isinstance(command, list) or not command
                or not all(isinstance(part, (str, int, float)) and not isinstance(part, bool) for part in command)):
            raise SpecError(f"job {job}: run.command must be a non-empty list of strings such as ['sleep', '1'].")
        run = {**run, "command": [str(part) for part in command]}
    if "env" in run:
        run = {**run, "env": _parse_env(run["env"], job)}
    timeout = run.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise SpecError(f"job {job}: run.timeout must be a positive number of seconds.")
    return dict(run)


def _parse_env(env, job: str) -> dict[str, str]:
    """``run.env``: variables the command or function gets beside the agent's own."""
    if not isinstance(env, dict):
        raise SpecError(f"job {job}: run.env must be a mapping of variable names to values, such as {{LEVEL: debug}}.")
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise SpecError(f"job {job}: run.env name {name!r} must be letters, digits and _, not starting with a "
                            f"digit.")
        if name.startswith("SCHED_"):
            raise SpecError(f"job {job}: run.env cannot set {name}: the agent sets the SCHED_ variables itself.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"job {job}: run.env value of {name} must be a string or a number.")
        out[name] = str(value)
    return out


def _parse_meta(meta, job: str) -> dict[str, str] | None:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise SpecError(f"job {job}: meta must be a mapping of keys to text, such as {{customer: acme}}.")
    out = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.fullmatch(key):
            raise SpecError(f"job {job}: meta key {key!r} must be letters, digits and _, not starting with a digit.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or len(str(value)) > 1024:
            raise SpecError(f"job {job}: meta {key} must be text of at most 1024 characters.")
        out[key] = str(value)
    return out


def _parse_preferences(raw, job: str) -> tuple[Preference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: preferences must be a list such as [{{spread: node.labels.zone}}].")
    prefs = []
    for item in raw:
        if (not isinstance(item, dict) or not {"spread"} <= set(item) <= {"spread", "targets"}
                or not isinstance(item["spread"], str)):
            raise SpecError(f"job {job}: preference {item!r} must be {{spread: <node attribute>}}, with targets "
                            f"if wanted.")
        key = item["spread"].strip()
        prefs.append(Preference(spread=key, get=attribute_getter(key, f"job {job}: preference"),
                                targets=_parse_targets(item.get("targets"), key, job)))
    return tuple(prefs)


def _parse_targets(raw, key: str, job: str) -> tuple[tuple[str, int], ...]:
    """``targets: {eu-1: 70, eu-2: 30}``: percentages from 0 to 100, summing to at most 100."""
    if raw is None:
        return ()
    what = f"job {job}: preference {key} targets"
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"{what} must be a mapping of value to percentage, such as {{eu-1: 70, eu-2: 30}}.")
    out = []
    for value, percent in raw.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what}: {value!r} is not a value the attribute can have.")
        share = whole(percent)
        if share is None or not 0 <= share <= 100:
            raise SpecError(f"{what}: {value} must be a whole percentage from 0 to 100, not {percent!r}.")
        out.append((str(value), share))
    total = sum(percent for _, percent in out)
    if total > 100:
        raise SpecError(f"{what} sum to {total}; they must sum to at most 100 (values not named share what is "
                        f"left).")
    return tuple(out)


def _parse_ports(raw, job: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"job {job}: ports must be a list of host port numbers.")
    ports = [whole(port) for port in raw]
    for port, given in zip(ports, raw):
        if port is None or not 1 <= port <= 65535:
            raise SpecError(f"job {job}: port {given!r} must be a whole number from 1 to 65535.")
    if len(set(ports)) != len(ports):
        raise SpecError(f"job {job}: ports lists a port twice.")
    return tuple(sorted(ports))


def _did_you_mean(name) -> str:
    """`` (did you mean 'replicas'?)`` for a near-miss of a field, or of a resource
    written at the top level (``cpu: 1`` belongs in ``resources``); else nothing."""
    if not isinstance(name, str):
        return ""
    resource = name if name in (CPU, MEMORY) else lookalike(name)
    if resource is not None:
        return f" (did you mean resources: {{{resource}: ...}}?)"
    close = difflib.get_close_matches(name, sorted(_JOB_FIELDS), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_job(raw) -> JobSpec:
    """Validate a job spec (a mapping loaded from YAML or JSON)."""
    if not isinstance(raw, dict):
        raise SpecError("a job spec must be a mapping with fields such as replicas, resources and run.")
    unknown = set(raw) - _JOB_FIELDS
    if unknown:
        name = sorted(unknown, key=str)[0]
        raise SpecError(f"job spec has unknown field {name!r}{_did_you_mean(name)}; "
                        f"known fields are {', '.join(sorted(_JOB_FIELDS))}.")
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
    if job_type in PER_NODE_TYPES and "replicas" in raw:
        raise SpecError(f"job {job}: a {job_type} job runs one task per eligible node and takes no replicas.")
    resources = parse_resources(raw.get("resources"), f"job {job} resources")
    gang = raw.get("gang", False)
    if not isinstance(gang, bool):
        raise SpecError(f"job {job}: gang must be true or false.")
    replicas = 0 if job_type in PER_NODE_TYPES else _int_field(raw, "replicas", 1, 0, MAX_REPLICAS, job)
    min_available = _int_field(raw, "min_available", 0, 0, MAX_REPLICAS, job)
    if (gang or min_available) and job_type in PER_NODE_TYPES:
        raise SpecError(f"job {job}: a {job_type} job cannot be a gang (gang or min_available).")
    if min_available > replicas:
        raise SpecError(f"job {job}: min_available ({min_available}) cannot exceed replicas ({replicas}).")
    if gang:
        if "min_available" in raw and min_available != replicas:
            raise SpecError(f"job {job}: gang: true means all {replicas} replicas; leave out min_available.")
        min_available = replicas
    tenant = check_tenant(raw.get("tenant", "default"), f"job {job}: tenant")
    update = parse_update(raw.get("update"), job)
    if update is not None and job_type == BATCH:
        raise SpecError(f"job {job}: update applies to service and global jobs; a batch job keeps its running "
                        f"tasks when it changes.")
    if update is not None and update.canary and job_type == GLOBAL:
        raise SpecError(f"job {job}: a global job runs one task per node and cannot have canary tasks.")
    if update is not None and job_type not in (SERVICE, GLOBAL):
        raise SpecError(f"job {job}: update applies to service and global jobs; a {job_type} job runs to completion.")
    health = parse_health(raw.get("health"), job)
    periodic = parse_periodic(raw.get("periodic"), job)
    parameterized = parse_parameterized(raw.get("parameterized"), job)
    for name, block in (("periodic", periodic), ("parameterized", parameterized)):
        if block is not None and job_type not in RUN_TO_COMPLETION:
            raise SpecError(f"job {job}: {name} applies to batch and sysbatch jobs; a {job_type} job runs all the "
                            f"time.")
    if periodic is not None and parameterized is not None:
        raise SpecError(f"job {job}: a job is periodic or parameterized, not both.")
    parallelism = _int_field(raw, "parallelism", 1, 1, MAX_REPLICAS, job) if "parallelism" in raw else 0
    if parallelism and job_type != BATCH:
        raise SpecError(f"job {job}: parallelism applies to batch jobs (a {job_type} job runs all its tasks at once).")
    if parallelism and min_available > parallelism:
        raise SpecError(f"job {job}: a gang of {min_available} cannot start with parallelism {parallelism}.")
    deadline = raw.get("deadline", 0)
    if "deadline" in raw and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))
                              or math.isnan(deadline) or not 0 < deadline <= MAX_DEADLINE_S):
        raise SpecError(f"job {job}: deadline must be a number of seconds above 0 and at most {MAX_DEADLINE_S}, "
                        f"not {deadline!r}.")
    if deadline and job_type not in RUN_TO_COMPLETION:
        raise SpecError(f"job {job}: deadline applies to batch and sysbatch jobs (a {job_type} job runs all the "
                        f"time).")
    max_retries = _int_field(raw, "max_retries", 3, 0, 1000, job)
    reschedule = parse_reschedule(raw["reschedule"], job, restart_delay=float(restart_delay), max_retries=max_retries,
                                  unlimited=job_type not in RUN_TO_COMPLETION) if "reschedule" in raw else None
    if raw.get("labels") is not None and not isinstance(raw["labels"], dict):
        raise SpecError(f"job {job}: labels must be a mapping of label to value, such as {{app: db}}.")
    labels = parse_labels(raw.get("labels"), f"job {job}: labels")
    constraints = parse_constraints(raw.get("constraints"), job)
    preferences = _parse_preferences(raw.get("preferences"), job)
    affinities = parse_affinities(raw.get("affinities"), job)
    spread = parse_topology_spread(raw.get("topology_spread"), job)
    job_affinity = parse_job_affinity(raw.get("job_affinity"), job, "job_affinity")
    job_anti_affinity = parse_job_affinity(raw.get("job_anti_affinity"), job, "job_anti_affinity")
    spec = JobSpec(
        id=job,
        type=job_type,
        priority=_int_field(raw, "priority", 50, MIN_PRIORITY, MAX_PRIORITY, job),
        replicas=replicas,
        resources=resources,
        constraints=constraints,
        preferences=preferences,
        ports=_parse_ports(raw.get("ports"), job),
        plugins=parse_plugins(raw.get("plugins"), f"job {job}: plugins"),
        strategy=strategy,
        max_per_node=_int_field(raw, "max_per_node", 0, 0, MAX_REPLICAS, job),
        run=_parse_run(raw.get("run"), job),
        preemptible=preemptible,
        preempt=preempt,
        max_retries=max_retries,
        restart_delay=float(restart_delay),
        raw={},
        min_available=min_available,
        tenant=tenant,
        update=update,
        health=health,
        disconnect=parse_disconnect(raw.get("disconnect"), job),
        ttl_after_finished=parse_ttl_after_finished(raw.get("ttl_after_finished"), job),
        periodic=periodic,
        parameterized=parameterized,
        after=parse_after(raw.get("after"), job),
        parallelism=parallelism,
        deadline=float(deadline),
        reschedule=reschedule,
        meta=_parse_meta(raw.get("meta"), job),
        disruption_budget=parse_disruption_budget(raw.get("disruption_budget"), job, job_type),
        labels=labels,
        tolerations=parse_tolerations(raw.get("tolerations"), job),
        affinities=affinities,
        topology_spread=spread,
        job_affinity=job_affinity,
        job_anti_affinity=job_anti_affinity,
        rules=bool(labels or affinities or spread or job_affinity or job_anti_affinity
                   or any(c.dynamic for c in constraints) or any(p.targets for p in preferences)),
        counted=bool(labels or spread or any(t.required for t in job_anti_affinity)
                     or any(c.dynamic for c in constraints)),
    )
    normalised = {
        "id": spec.id, "type": spec.type, "priority": spec.priority, "replicas": spec.replicas,
        "resources": {name: f"{amount}m" if name == CPU else amount for name, amount in spec.resources.items()}, "constraints": [c.text for c in spec.constraints],
        "preferences": [{"spread": p.spread, **({"targets": dict(p.targets)} if p.targets else {})}
                        for p in spec.preferences], "ports": list(spec.ports),
        "plugins": list(spec.plugins), "strategy": spec.strategy, "max_per_node": spec.max_per_node,
        "run": spec.run, "preemptible": spec.preemptible, "preempt": spec.preempt,
        "max_retries": spec.max_retries, "restart_delay": spec.restart_delay,
    }
    if job_type in PER_NODE_TYPES:
        del normalised["replicas"]
    if gang:
        normalised["gang"] = True
    elif min_available:
        normalised["min_available"] = min_available
    if tenant != "default":
        normalised["tenant"] = tenant
    if update is not None:
        normalised["update"] = update_raw(update)
    if health is not None:
        normalised["health"] = health_raw(health)
    disconnect = disconnect_raw(spec.disconnect)
    if disconnect is not None:
        normalised["disconnect"] = disconnect
    if spec.ttl_after_finished is not None:
        normalised["ttl_after_finished"] = spec.ttl_after_finished
    # Fields that appear only when set, so a spec without them keeps its stored form.
    if periodic is not None:
        normalised["periodic"] = periodic_raw(periodic)
    if parameterized is not None:
        normalised["parameterized"] = parameterized_raw(parameterized)
    if spec.after:
        normalised["after"] = after_raw(spec.after)
    if parallelism:
        normalised["parallelism"] = parallelism
    if spec.deadline:
        normalised["deadline"] = spec.deadline
    if reschedule is not None:
        normalised["reschedule"] = reschedule_raw(reschedule)
    if spec.meta is not None:
        normalised["meta"] = spec.meta
    if spec.disruption_budget is not None:
        normalised["disruption_budget"] = disruption_budget_raw(spec.disruption_budget)
    for name, value in (("labels", dict(labels)), ("tolerations", [t.raw() for t in spec.tolerations]),
                        ("affinities", [a.raw() for a in affinities]),
                        ("topology_spread", [t.raw() for t in spread]),
                        ("job_affinity", [t.raw() for t in job_affinity]),
                        ("job_anti_affinity", [t.raw() for t in job_anti_affinity])):
        if value:  # only when set: a spec without them keeps its stored form
            normalised[name] = value
    spec.raw.update(normalised)
    return spec


"""How a job is rolled forward, and how its tasks are known to be healthy: the ``update``
and ``health`` blocks of a job spec (docs/deployments.md).

``update`` (service and global jobs) turns a submit of a new version into a deployment:
old tasks are replaced ``max_parallel`` at a time, each group waiting for the new tasks
to be healthy. ``health`` says how the node's agent checks a running task: a command
(healthy on exit 0), an HTTP GET on a host port (2xx or 3xx) or a TCP connect.
Every error is one sentence, as for the rest of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.errors import SpecError
from scheduler.model.quantities import whole

STOP_FIRST, START_FIRST = "stop-first", "start-first"
ORDERS = (STOP_FIRST, START_FIRST)

# A task's health, on its hash (``health``): set by its node's agent while it runs.
STARTING, HEALTHY, UNHEALTHY = "starting", "healthy", "unhealthy"


@dataclass(frozen=True, slots=True)
class UpdatePolicy:
    max_parallel: int = 1  # old tasks replaced at once (start-first: new tasks beyond replicas)
    min_healthy_time: float = 10.0  # seconds a new task must stay healthy to count
    healthy_deadline: float = 300.0  # seconds a new task has to become healthy
    progress_deadline: float = 600.0  # seconds without a new healthy task before failing (0: none)
    order: str = STOP_FIRST
    canary: int = 0  # new tasks started first, beside the old ones, before promotion
    auto_promote: bool = False  # promote once every canary is healthy
    auto_revert: bool = False  # on failure, deploy the last version that was healthy
    delay: float = 0.0  # seconds between a new task counting healthy and the next changes
    max_failure_ratio: float = 0.0  # share of the new tasks that may fail before the deployment does


@dataclass(frozen=True, slots=True)
class HealthCheck:
    kind: str  # "command", "http" or "tcp"
    command: tuple[str, ...] = ()
    path: str = "/"
    port: int = 0
    interval: float = 1.0  # seconds between checks
    timeout: float = 1.0  # seconds one check may take
    failures: int = 3  # failures in a row (after grace) before the task is unhealthy
    grace: float = 0.0  # seconds after start during which failures do not count


_UPDATE_FIELDS = {"max_parallel", "min_healthy_time", "healthy_deadline", "progress_deadline", "order", "canary",
                  "auto_promote", "auto_revert", "delay", "max_failure_ratio"}
_HEALTH_FIELDS = {"command", "http", "tcp", "interval", "timeout", "failures", "grace"}


def _seconds(raw: dict, name: str, default: float, where: str, *, positive: bool = False) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0) \
            or value > 86_400:
        kind = "a positive" if positive else "a"
        raise SpecError(f"{where}.{name} must be {kind} number of seconds up to 86400, not {value!r}.")
    return float(value)


def _count(raw: dict, name: str, default: int, low: int, where: str) -> int:
    given = raw.get(name, default)
    value = whole(given)
    if value is None or not low <= value <= 1_000_000:
        raise SpecError(f"{where}.{name} must be a whole number from {low} to 1000000, not {given!r}.")
    return value


def _ratio(raw: dict, name: str, where: str) -> float:
    value = raw.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(f"{where}.{name} must be a number from 0 to 1, not {value!r}.")
    return float(value)


def _flag(raw: dict, name: str, where: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise SpecError(f"{where}.{name} must be true or false.")
    return value


def _port(value, where: str) -> int:
    port = whole(value)
    if port is None or not 1 <= port <= 65535:
        raise SpecError(f"{where} must be a port number from 1 to 65535, not {value!r}.")
    return port


def parse_update(raw, job: str) -> UpdatePolicy | None:
    if raw is None:
        return None
    where = f"job {job}: update"
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a mapping such as {{max_parallel: 2, min_healthy_time: 5}}.")
    unknown = set(raw) - _UPDATE_FIELDS
    if unknown:
        raise SpecError(f"{where} has unknown field {sorted(unknown)[0]!r}; known fields are "
                        f"{', '.join(sorted(_UPDATE_FIELDS))}.")
    order = raw.get("order", STOP_FIRST)
    if order not in ORDERS:
        raise SpecError(f"{where}.order must be stop-first or start-first, not {order!r}.")
    policy = UpdatePolicy(
        max_parallel=_count(raw, "max_parallel", 1, 1, where),
        min_healthy_time=_seconds(raw, "min_healthy_time", 10.0, where),
        healthy_deadline=_seconds(raw, "healthy_deadline", 300.0, where, positive=True),
        progress_deadline=_seconds(raw, "progress_deadline", 600.0, where),
        order=order,
        canary=_count(raw, "canary", 0, 0, where),
        auto_promote=_flag(raw, "auto_promote", where),
        auto_revert=_flag(raw, "auto_revert", where),
        delay=_seconds(raw, "delay", 0.0, where),
        max_failure_ratio=_ratio(raw, "max_failure_ratio", where),
    )
    if policy.min_healthy_time >= policy.healthy_deadline:
        raise SpecError(f"{where}.min_healthy_time ({policy.min_healthy_time:g} s) must be shorter than "
                        f"healthy_deadline ({policy.healthy_deadline:g} s).")
    if policy.progress_deadline and policy.progress_deadline < policy.healthy_deadline:
        raise SpecError(f"{where}.progress_deadline ({policy.progress_deadline:g} s) must be 0 or at least "
                        f"healthy_deadline ({policy.healthy_deadline:g} s).")
    if policy.auto_promote and not policy.canary:
        raise SpecError(f"{where}.auto_promote needs canary tasks to promote (canary: 1 or more).")
    return policy


def update_raw(policy: UpdatePolicy) -> dict:
    """The normalised form stored with the spec."""
    return {"max_parallel": policy.max_parallel, "min_healthy_time": policy.min_healthy_time,
            "healthy_deadline": policy.healthy_deadline, "progress_deadline": policy.progress_deadline,
            "order": policy.order, "canary": policy.canary, "auto_promote": policy.auto_promote,
            "auto_revert": policy.auto_revert, "delay": policy.delay, "max_failure_ratio": policy.max_failure_ratio}


def parse_health(raw, job: str) -> HealthCheck | None:
    if raw is None:
        return None
    where = f"job {job}: health"
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a mapping such as {{command: ['true'], interval: 1}}.")
    unknown = set(raw) - _HEALTH_FIELDS
    if unknown:
        raise SpecError(f"{where} has unknown field {sorted(unknown)[0]!r}; known fields are "
                        f"{', '.join(sorted(_HEALTH_FIELDS))}.")
    kinds = [kind for kind in ("command", "http", "tcp") if kind in raw]
    if len(kinds) != 1:
        raise SpecError(f"{where} needs exactly one of command, http or tcp.")
    kind = kinds[0]
    timing = dict(interval=_seconds(raw, "interval", 1.0, where, positive=True),
                  timeout=_seconds(raw, "timeout", 1.0, where, positive=True),
                  failures=_count(raw, "failures", 3, 1, where), grace=_seconds(raw, "grace", 0.0, where))
    if kind == "command":
        command = raw["command"]
        if (not isinstance(command, list) or not command
                or not all(isinstance(part, (str, int, float)) and not isinstance(part, bool) for part in command)):
            raise SpecError(f"{where}.command must be a non-empty list of strings such as ['true'].")
        return HealthCheck("command", command=tuple(str(part) for part in command), **timing)
    if kind == "http":
        http = raw["http"]
        if not isinstance(http, dict) or set(http) - {"path", "port"} or "port" not in http:
            raise SpecError(f"{where}.http must be {{port: 8080, path: /healthz}} (path defaults to /).")
        path = http.get("path", "/")
        if not isinstance(path, str) or not path.startswith("/") or any(c.isspace() for c in path):
            raise SpecError(f"{where}.http.path must start with / and hold no spaces, not {path!r}.")
        return HealthCheck("http", path=path, port=_port(http["port"], f"{where}.http.port"), **timing)
    tcp = raw["tcp"]
    if not isinstance(tcp, dict) or set(tcp) != {"port"}:
        raise SpecError(f"{where}.tcp must be {{port: 8080}}.")
    return HealthCheck("tcp", port=_port(tcp["port"], f"{where}.tcp.port"), **timing)


def health_raw(check: HealthCheck) -> dict:
    """The normalised form stored with the spec."""
    out: dict = {}
    if check.kind == "command":
        out["command"] = list(check.command)
    elif check.kind == "http":
        out["http"] = {"path": check.path, "port": check.port}
    else:
        out["tcp"] = {"port": check.port}
    out.update(interval=check.interval, timeout=check.timeout, failures=check.failures, grace=check.grace)
    return out

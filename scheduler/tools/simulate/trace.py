"""The simulator's trace: a workload as JSON lines, one event a line, each with ``kind``
and ``time`` (seconds from the start). ``docs/simulate.md`` documents the format; the
readers of public traces (``google.py``, ``alibaba.py``) and the generator
(``generate.py``) produce the same events.

- ``node``: a node joins: ``name``, ``cpu``, ``memory`` and any other field of ``sched
  node add`` (``gpu``, ``resources``, ``labels``, ``engine_labels``, ``os``, ``arch``,
  ``role``, ``plugins``).
- ``task``: ``count`` (default 1) tasks of job ``job`` arrive, each running for
  ``duration`` seconds once placed (absent or null: until the replay ends); every other
  field is a job-spec field (``resources``, ``priority``, ``tenant``, ``constraints``...),
  and the job is ``batch`` unless it says otherwise. The first task event of a job gives
  its spec; the later ones must carry the same spec fields (or none).
- ``node_down``, ``node_up``, ``drain``: ``name`` of a node that goes down (its tasks are
  lost and replaced), comes back, or is drained.
- ``quota``: the namespace's quota from then on (``cpu``, ``memory``, ``tasks``, other
  resources; no field: no quota). ``tenant``: ``name`` and ``weight`` of a tenant.
"""

from __future__ import annotations

import difflib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from scheduler.model import BATCH, JobSpec, Node, SpecError, parse_job
from scheduler.model.names import check_node_name, check_tenant
from scheduler.model.node import make_node

NODE, TASK, NODE_DOWN, NODE_UP, DRAIN, QUOTA, TENANT = "node", "task", "node_down", "node_up", "drain", "quota", "tenant"
KINDS = (NODE, TASK, NODE_DOWN, NODE_UP, DRAIN, QUOTA, TENANT)
NODE_FIELDS = ("name", "cpu", "memory", "gpu", "resources", "labels", "engine_labels", "os", "arch", "role", "plugins",
               "taints")
TASK_ONLY = ("kind", "time", "job", "count", "duration")


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a trace: ``time_ms`` from the start, the line (or record) it came from."""

    time_ms: int
    kind: str
    line: int
    name: str = ""  # the node (node, node_down, node_up, drain) or tenant
    node: Node | None = None
    job: str = ""
    spec: JobSpec | None = None  # the job's spec (task events; replicas = count)
    count: int = 0
    duration_ms: int | None = None  # None: runs until the replay ends
    quota: dict | None = None
    weight: float = 1.0


@dataclass
class Trace:
    """A trace's events in time order (ties in their order in the trace), and where it came from."""

    events: list[Event]
    source: str = ""
    nodes: list[Node] = field(default_factory=list)  # the nodes that join at time 0 (the inventory)

    @property
    def tasks(self) -> int:
        return sum(event.count for event in self.events if event.kind == TASK)

    @property
    def end_ms(self) -> int:
        """When the last event happens, or the last task with a duration could end at the earliest."""
        last = 0
        for event in self.events:
            last = max(last, event.time_ms + (event.duration_ms or 0))
        return last


class TraceBuilder:
    """Turns event records (dicts) into :class:`Event` values, checking each and sharing one
    parsed spec between the tasks of a job (and between jobs with the same fields)."""

    def __init__(self, where: str = "trace"):
        self.where, self.unit = where, "line"  # errors say "<where> <unit> <number>: ..."
        self.events: list[Event] = []
        self._specs: dict[str, tuple[bytes, JobSpec, int]] = {}  # job -> (its fields, its spec, first line)
        self._parsed: dict[bytes, JobSpec] = {}  # spec fields (without the id) -> a spec
        self._nodes: set[str] = set()

    def fail(self, line: int, message: str) -> SpecError:
        return SpecError(f"{self.where} {self.unit} {line}: {message}")

    def add(self, record, line: int) -> None:
        if not isinstance(record, dict):
            raise self.fail(line, "an event must be a JSON object with \"kind\" and \"time\".")
        kind = record.get("kind")
        if kind not in KINDS:
            close = difflib.get_close_matches(str(kind), KINDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(line, f"kind {kind!r} is not one of {', '.join(KINDS)}{hint}.")
        time_ms = self._seconds(record.get("time"), "time", line)
        if time_ms is None:
            raise self.fail(line, f"a {kind} event needs a \"time\" in seconds (0 or more).")
        try:
            event = getattr(self, f"_{kind}")(record, time_ms, line)
        except SpecError as exc:
            if str(exc).startswith(self.where):
                raise
            raise self.fail(line, str(exc)) from None
        self.events.append(event)

    def _seconds(self, value, what: str, line: int) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(line, f"{what} must be a number of seconds, 0 or more, not {value!r}.")
        return int(round(value * 1000))

    def _unknown(self, record: dict, allowed: Iterable[str], kind: str, line: int) -> None:
        allowed = set(allowed)
        for key in record:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(line, f"a {kind} event has no field {key!r}{hint}.")

    def _node(self, record: dict, time_ms: int, line: int) -> Event:
        self._unknown(record, ("kind", "time", *NODE_FIELDS), NODE, line)
        fields = {k: v for k, v in record.items() if k not in ("kind", "time", "name", "gpu")}
        resources = dict(fields.pop("resources", None) or {})
        if record.get("gpu") is not None:
            resources["gpu"] = record["gpu"]
        node = make_node(record.get("name"), resources=resources, **fields)
        self._nodes.add(node.name)
        return Event(time_ms, NODE, line, name=node.name, node=node)

    def _named(self, record: dict, time_ms: int, line: int, kind: str) -> Event:
        self._unknown(record, ("kind", "time", "name"), kind, line)
        name = check_node_name(record.get("name"))
        if name not in self._nodes:
            raise self.fail(line, f"{kind} names node {name!r}, which no earlier node event adds.")
        return Event(time_ms, kind, line, name=name)

    def _node_down(self, record, time_ms, line):
        return self._named(record, time_ms, line, NODE_DOWN)

    def _node_up(self, record, time_ms, line):
        return self._named(record, time_ms, line, NODE_UP)

    def _drain(self, record, time_ms, line):
        return self._named(record, time_ms, line, DRAIN)

    def _quota(self, record: dict, time_ms: int, line: int) -> Event:
        quota = {k: v for k, v in record.items() if k not in ("kind", "time")}
        return Event(time_ms, QUOTA, line, quota=quota)

    def _tenant(self, record: dict, time_ms: int, line: int) -> Event:
        self._unknown(record, ("kind", "time", "name", "weight"), TENANT, line)
        weight = record.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise self.fail(line, f"a tenant's weight must be a number above 0, not {weight!r}.")
        return Event(time_ms, TENANT, line, name=check_tenant(record.get("name")), weight=float(weight))

    def _task(self, record: dict, time_ms: int, line: int) -> Event:
        job = record.get("job")
        if not isinstance(job, str) or not job:
            raise self.fail(line, "a task event needs a \"job\" (the job's id).")
        count = record.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise self.fail(line, f"count must be a whole number of tasks, 1 or more, not {count!r}.")
        duration = self._seconds(record.get("duration"), "duration", line)
        spec_fields = {k: v for k, v in record.items() if k not in TASK_ONLY}
        if "id" in spec_fields or "replicas" in spec_fields:
            raise self.fail(line, "a task event names its job with \"job\" and its tasks with \"count\", "
                                  "not \"id\" or \"replicas\".")
        key = orjson.dumps(spec_fields, option=orjson.OPT_SORT_KEYS)
        known = self._specs.get(job)
        if known is not None:
            if spec_fields and key != known[0]:
                raise self.fail(line, f"job {job}'s tasks must share one spec: this event's fields differ from "
                                      f"its first task's (line {known[2]}); give it "
                                      f"another job name.")
            spec = known[1]
        else:
            shared = self._parsed.get(key)
            if shared is None:
                raw = {"type": BATCH, **spec_fields, "id": job, "replicas": 1}
                shared = self._parsed[key] = parse_job(raw)
                timed = _timed_fields(shared)
                if timed:
                    raise self.fail(line, f"job {job}'s {timed} is not replayed: it runs on Redis's clock, not the "
                                          f"replay's (docs/simulate.md, Limits); leave it out of the trace.")
            spec = shared.with_id(job)
            self._specs[job] = (key, spec, line)
        return Event(time_ms, TASK, line, job=spec.id, spec=spec, count=count, duration_ms=duration)

    def build(self, source: str = "") -> Trace:
        events = sorted(self.events, key=lambda e: e.time_ms)  # stable: ties keep their order
        nodes = [e.node for e in events if e.kind == NODE and e.time_ms == 0 and e.node is not None]
        return Trace(events, source or self.where, nodes)


def _timed_fields(spec) -> str:
    """The fields of ``spec`` that a replay cannot honour (they keep Redis TIME, which
    barely moves during a replay), as the error names them; "" if none."""
    named = [f"\"{name}\"" for name, used in (("periodic", spec.periodic is not None),
                                               ("parameterized", spec.parameterized is not None),
                                               ("deadline", bool(spec.deadline))) if used]
    if any(t.seconds is not None for t in spec.tolerations):
        named.append("\"toleration_seconds\"")
    return " and ".join(named)


def records(lines: Iterable[str], where: str) -> Iterator[tuple[int, dict]]:
    """(line number, record) of each non-blank line of JSON lines."""
    for number, text in enumerate(lines, 1):
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        try:
            yield number, orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise SpecError(f"{where} line {number}: not JSON ({exc.msg}).") from None


def read_jsonl(source: str | Path | io.TextIOBase, where: str | None = None) -> Trace:
    """A trace in the simulator's own format (JSON lines)."""
    if isinstance(source, (str, Path)):
        where = where or str(source)
        with open(source, encoding="utf-8") as handle:
            return _from_lines(handle, where)
    return _from_lines(source, where or "trace")


def _from_lines(lines: Iterable[str], where: str) -> Trace:
    builder = TraceBuilder(where)
    for number, record in records(lines, where):
        builder.add(record, number)
    if not builder.events:
        raise SpecError(f"{where} has no events; see docs/simulate.md for the trace format.")
    return builder.build(where)


def dump_event(record: dict) -> str:
    """One trace line."""
    return orjson.dumps(record).decode()

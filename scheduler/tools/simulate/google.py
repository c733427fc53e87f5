"""Readers of Google's public cluster traces, into the simulator's events (``trace.py``).

**2011** (clusterdata-2011-2, CSV without a header, times in microseconds, requests
normalised to the largest machine):

- ``task_events``: time, missing info, job id, task index, machine id, event type (0 submit,
  1 schedule, 2 evict, 3 fail, 4 finish, 5 kill, 6 lost, 7 and 8 updates), user, scheduling
  class, priority (0-11), cpu request, memory request, disk request, different-machine
  constraint. A task arrives at its first submit and runs, once placed, for as long as its
  first run lasted in the trace (schedule to its first evict, fail, finish, kill or lost;
  until the replay ends if it never ended). Tasks killed before they ever ran are left
  out: they never asked the scheduler for room for long. Priority p becomes ``50 * p``
  (0-550, so the bands stay ten or more apart, the default preemption margin); the
  different-machine constraint becomes ``max_per_node: 1``. Tasks of one job whose
  requests differ are jobs of their own (``g<job>``, ``g<job>-2``...).
- ``machine_events`` (as ``--nodes``): time, machine id, event type (0 add, 1 remove,
  2 update), platform, cpus, memory. An add is a node (``m<id>``), a remove takes it down,
  an add after a remove brings it back.

**2019** (clusterdata-2019, ``instance_events`` exported as JSON lines, one object per
event, as BigQuery exports them): ``time``, ``type`` (0 submit, 1 queue, 2 enable,
3 schedule, 4 evict, 5 fail, 6 finish, 7 kill, 8 lost, 9 and 10 updates), ``collection_id``,
``instance_index``, ``priority`` (0-450, kept), ``resource_request`` {``cpus``,
``memory``}. The same rules as 2011's.

Normalised requests are scaled by the reference machine (``Machine``): by default 1.0 is
32 cores and 128 GiB (the generator's scale too).
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from scheduler.model import SpecError

MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class Machine:
    """What 1.0 of a normalised request or capacity is."""

    cpu: float = 32.0
    memory: int = 128 * GiB


def open_text(path: str | Path) -> io.TextIOBase:
    """A trace file as text (gzip when its name ends in .gz)."""
    if str(path).endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def _resources(cpu: float, memory: float, machine: Machine) -> dict[str, str]:
    return {"cpu": f"{max(1, round(cpu * machine.cpu * 1000))}m",
            "memory": f"{max(1, round(memory * machine.memory / MiB))}MiB"}


class _Runs:
    """Each task's arrival, first run and request, gathered from its events in time order."""

    def __init__(self):
        self.tasks: dict[tuple, dict] = {}

    def event(self, at_s: float, key: tuple, kind: str, fields: dict) -> None:
        task = self.tasks.get(key)
        if kind == "submit":
            if task is None:
                self.tasks[key] = {"time": at_s, **fields}
            return
        if task is None:
            return  # submitted before the trace began and never again: its arrival is unknown
        if kind == "schedule" and "start" not in task:
            task["start"] = at_s
        elif kind == "end" and "start" in task and "end" not in task:
            task["end"] = at_s
        elif kind == "end" and "start" not in task:
            task["dropped"] = True  # killed while it waited: it never ran

    def records(self) -> Iterator[dict]:
        shapes: dict[tuple, str] = {}  # (job, request) -> the job's name for it
        counts: dict[str, int] = {}
        for (job, _index), task in self.tasks.items():
            if task.get("dropped"):
                continue
            shape = (job, orjson.dumps(task["spec"], option=orjson.OPT_SORT_KEYS))
            name = shapes.get(shape)
            if name is None:
                counts[job] = counts.get(job, 0) + 1
                name = shapes[shape] = f"g{job}" if counts[job] == 1 else f"g{job}-{counts[job]}"
            duration = round(task["end"] - task["start"], 3) if "end" in task else None
            yield {"kind": "task", "time": round(task["time"], 3), "job": name, "duration": duration, **task["spec"]}


def read_2011_task_events(paths: Iterable[str | Path], machine: Machine = Machine()) -> Iterator[dict]:
    kinds = {"0": "submit", "1": "schedule", "2": "end", "3": "end", "4": "end", "5": "end", "6": "end"}
    runs = _Runs()
    for path in paths:
        with open_text(path) as handle:
            for number, row in enumerate(csv.reader(handle), 1):
                if not row:
                    continue
                if len(row) < 13:
                    raise SpecError(f"{path} line {number}: a 2011 task_events row has 13 columns, not {len(row)}.")
                kind = kinds.get(row[5])
                if kind is None:
                    continue
                try:
                    at = int(row[0]) / 1e6
                    fields = {}
                    if kind == "submit":
                        spec = {"priority": 50 * int(row[8]),
                                "resources": _resources(float(row[9] or 0), float(row[10] or 0), machine)}
                        if row[12] == "1":
                            spec["max_per_node"] = 1
                        fields = {"spec": spec}
                except ValueError:
                    raise SpecError(f"{path} line {number}: not a 2011 task_events row ({','.join(row)[:80]}).") \
                        from None
                runs.event(at, (row[2], row[3]), kind, fields)
    yield from sorted(runs.records(), key=lambda r: r["time"])


def read_2011_machine_events(paths: Iterable[str | Path], machine: Machine = Machine()) -> Iterator[dict]:
    present: set[str] = set()
    known: set[str] = set()
    for path in paths:
        with open_text(path) as handle:
            for number, row in enumerate(csv.reader(handle), 1):
                if not row:
                    continue
                if len(row) < 6:
                    raise SpecError(f"{path} line {number}: a 2011 machine_events row has 6 columns, not {len(row)}.")
                try:
                    at, name, kind = int(row[0]) / 1e6, f"m{row[1]}", row[2]
                    if kind == "0":
                        if name in known:
                            if name not in present:
                                yield {"kind": "node_up", "time": at, "name": name}
                        else:
                            cpu, memory = float(row[4] or 0), float(row[5] or 0)
                            yield {"kind": "node", "time": at, "name": name,
                                   "cpu": f"{max(1, round(cpu * machine.cpu * 1000))}m",
                                   "memory": f"{max(1, round(memory * machine.memory / MiB))}MiB",
                                   "labels": {"platform": row[3][:20] or "unknown"}}
                            known.add(name)
                        present.add(name)
                    elif kind == "1" and name in present:
                        present.discard(name)
                        yield {"kind": "node_down", "time": at, "name": name}
                except ValueError:
                    raise SpecError(f"{path} line {number}: not a 2011 machine_events row.") from None


def read_2019_instance_events(paths: Iterable[str | Path], machine: Machine = Machine()) -> Iterator[dict]:
    kinds = {0: "submit", 3: "schedule", 4: "end", 5: "end", 6: "end", 7: "end", 8: "end"}
    names = {"SUBMIT": 0, "QUEUE": 1, "ENABLE": 2, "SCHEDULE": 3, "EVICT": 4, "FAIL": 5, "FINISH": 6, "KILL": 7,
             "LOST": 8}
    runs = _Runs()
    for path in paths:
        with open_text(path) as handle:
            for number, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                try:
                    row = orjson.loads(text)
                    kind_value = row.get("type")
                    kind = kinds.get(names.get(kind_value, kind_value) if isinstance(kind_value, str) else
                                     int(kind_value))
                    if kind is None:
                        continue
                    fields = {}
                    if kind == "submit":
                        request = row.get("resource_request") or {}
                        fields = {"spec": {"priority": min(1000, int(row.get("priority") or 0)),
                                           "resources": _resources(float(request.get("cpus") or 0),
                                                                   float(request.get("memory") or 0), machine)}}
                    runs.event(int(row["time"]) / 1e6, (str(row["collection_id"]), str(row.get("instance_index", 0))),
                               kind, fields)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                    raise SpecError(f"{path} line {number}: not a 2019 instance_events record (JSON with time, "
                                    f"type, collection_id, instance_index).") from None
    yield from sorted(runs.records(), key=lambda r: r["time"])

"""A reader of Alibaba's 2018 cluster trace (cluster-trace-v2018), into the simulator's events.

``batch_task`` (CSV without a header): task name, instance count, job name, task type,
status, start time, end time (seconds), planned cpu (100 = one core), planned memory
(normalised: 100 = a whole machine's). Each row is a task of identical instances: it
becomes ``count`` tasks of the job ``<job>-<task>`` arriving at its start time (the trace
has no submit time) and running for end - start seconds (until the replay ends when the
end is missing). Rows without a start time are left out. Memory is scaled by the
reference machine (``--machine``: by default 96 cores and 512 GiB; the trace normalises
memory and does not publish the size).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Iterable, Iterator

from scheduler.model import SpecError
from scheduler.tools.simulate.google import MiB, GiB, Machine, open_text

ALIBABA_MACHINE = Machine(cpu=96.0, memory=512 * GiB)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def read_2018_batch_task(paths: Iterable[str | Path], machine: Machine = ALIBABA_MACHINE) -> Iterator[dict]:
    records = []
    for path in paths:
        with open_text(path) as handle:
            for number, row in enumerate(csv.reader(handle), 1):
                if not row:
                    continue
                if len(row) < 9:
                    raise SpecError(f"{path} line {number}: a 2018 batch_task row has 9 columns, not {len(row)}.")
                task, count, job, _type, _status, start, end, cpu, memory = row[:9]
                try:
                    if not start or int(float(start)) <= 0:
                        continue
                    start_s, end_s = float(start), float(end or 0)
                    cores = float(cpu or 0) / 100
                    share = float(memory or 0) / 100
                    instances = max(1, int(float(count or 1)))
                except ValueError:
                    raise SpecError(f"{path} line {number}: not a 2018 batch_task row ({','.join(row)[:80]}).") \
                        from None
                name = _UNSAFE.sub("_", f"{job}-{task}")[:63].strip("_-") or f"task{number}"
                records.append({"kind": "task", "time": start_s, "job": name, "count": instances,
                                "duration": end_s - start_s if end_s > start_s else None,
                                "resources": {"cpu": f"{max(1, round(cores * 1000))}m",
                                              "memory": f"{max(1, round(share * machine.memory / MiB))}MiB"}})
    if records:
        first = min(r["time"] for r in records)  # the trace's clock starts long before its first task
        for record in records:
            record["time"] = round(record["time"] - first, 3)
    records.sort(key=lambda r: r["time"])
    seen: set[str] = set()
    for record in records:  # a task name repeats only within its job; keep ids distinct anyway
        name, n = record["job"], 1
        while record["job"] in seen:
            n += 1
            record["job"] = f"{name[:58]}-{n}"
        seen.add(record["job"])
        yield record

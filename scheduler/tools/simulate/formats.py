"""Which reader a trace file needs, and a trace put together from a workload and a cluster.

Formats: ``jsonl`` (the simulator's own, ``trace.py``), ``google-2011`` (``task_events``
CSV), ``google-2019`` (``instance_events`` JSON lines), ``alibaba-2018`` (``batch_task``
CSV); for ``--nodes``: ``jsonl`` or Google 2011's ``machine_events`` CSV. ``auto`` looks at
the first line that is not blank or a ``#`` comment: a JSON object with ``kind`` is ours,
one with ``collection_id`` is Google's 2019; a CSV row of 13 columns is Google's 2011 task
events, of 9 Alibaba's batch tasks, of 6 Google's 2011 machine events.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from scheduler.model import SpecError
from scheduler.tools.simulate import alibaba, google
from scheduler.tools.simulate.google import Machine
from scheduler.tools.simulate.trace import Trace, TraceBuilder, records

FORMATS = ("auto", "jsonl", "google-2011", "google-2019", "alibaba-2018")
MACHINE_EVENTS = "google-2011-machines"


def detect(path: str | Path) -> str:
    try:
        with google.open_text(path) as handle:
            first = next((line for line in handle if line.strip() and not line.lstrip().startswith("#")), "")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}.") from None
    except (UnicodeDecodeError, EOFError):
        raise SpecError(f"{path} is not a text trace (JSON lines or CSV, optionally gzipped).") from None
    if not first:
        raise SpecError(f"{path} has no events; see docs/simulate.md for the trace format.")
    text = first.strip()
    if text.startswith("{"):
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise SpecError(f"{path} line 1: not JSON, nor a CSV trace this reader knows.") from None
        if isinstance(record, dict) and "collection_id" in record:
            return "google-2019"
        return "jsonl"
    columns = len(next(csv.reader([text])))
    found = {13: "google-2011", 9: "alibaba-2018", 6: MACHINE_EVENTS}.get(columns)
    if found is None:
        raise SpecError(f"{path}: cannot tell its format (a CSV row of {columns} columns); give --format "
                        f"({', '.join(FORMATS[1:])}).")
    return found


def _own(paths: Iterable[str | Path]) -> Iterator[tuple[str, str, int, dict]]:
    for path in paths:
        with google.open_text(path) as handle:
            for number, record in records(handle, str(path)):
                yield str(path), "line", number, record


def _converted(where: str, made: Iterable[dict]) -> Iterator[tuple[str, str, int, dict]]:
    for number, record in enumerate(made, 1):
        yield where, "converted event", number, record


def events_of(paths: list, fmt: str, machine: Machine | None = None) -> Iterator[tuple[str, str, int, dict]]:
    """(where, what its numbers count, number, event record) of every event in the files."""
    if fmt == "auto":
        fmt = detect(paths[0])
    where = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"
    if fmt == "jsonl":
        return _own(paths)
    if fmt == "google-2011":
        return _converted(where, google.read_2011_task_events(paths, machine or Machine()))
    if fmt == "google-2019":
        return _converted(where, google.read_2019_instance_events(paths, machine or Machine()))
    if fmt == "alibaba-2018":
        return _converted(where, alibaba.read_2018_batch_task(paths, machine or alibaba.ALIBABA_MACHINE))
    if fmt == MACHINE_EVENTS:
        return _converted(where, google.read_2011_machine_events(paths, machine or Machine()))
    raise SpecError(f"format {fmt!r} is not one of {', '.join(FORMATS)}.")


def load(paths: list[str | Path], fmt: str = "auto", nodes: list[str | Path] | None = None,
         machine: Machine | None = None) -> Trace:
    """The trace of ``paths`` (in ``fmt``), with the cluster of ``nodes`` files first."""
    builder = TraceBuilder(str(paths[0]))
    for source in ([(nodes, "auto")] if nodes else []) + [(paths, fmt)]:
        for where, unit, number, record in events_of(source[0], source[1], machine):
            builder.where, builder.unit = where, unit
            builder.add(record, number)
    builder.where, builder.unit = str(paths[0]), "line"
    if not any(e.kind == "task" for e in builder.events):
        raise SpecError(f"{paths[0]} has no tasks; see docs/simulate.md for the trace format.")
    if not any(e.kind == "node" for e in builder.events):
        raise SpecError(f"{paths[0]} has no nodes: give the cluster with --nodes FILE (node events, or Google's "
                        f"2011 machine_events), or make one with `sched simulate generate --tasks 0 --nodes N`.")
    return builder.build(str(paths[0]))

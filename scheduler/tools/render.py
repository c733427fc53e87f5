"""Turning records into what people and scripts read: rich tables, job specs in YAML with
memory in units people read, or JSON on stdout (which keeps the stored units)."""

from __future__ import annotations

import sys
from datetime import datetime

import orjson

from scheduler.control.schedule import iso
from scheduler.model.quantities import CPU, MEMORY, format_memory_exact, format_quantity


def print_json(value) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_table(columns: list[str], rows: list[list], title: str | None = None) -> None:
    # rich is imported here, not with the module: commands that print no table (a
    # worker, any --json) start without it.
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, header_style="bold", box=None, pad_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console = Console()
    if not console.is_terminal:  # piped: whole values, however wide (as kubectl prints them)
        console = Console(width=max(console.width, Console(width=1 << 16).measure(table).maximum))
    console.print(table)


def usage(capacity: dict[str, int], allocated: dict[str, int]) -> str:
    """``cpu 1.5/4  memory 2Gi/8Gi`` for a table cell."""
    parts = []
    for name in sorted(capacity, key=lambda r: (r not in ("cpu", "memory"), r)):
        used = format_quantity(name, allocated.get(name, 0))
        parts.append(f"{name} {used}/{format_quantity(name, capacity[name])}")
    return "  ".join(parts)


def spec_for_people(spec: dict) -> dict:
    """A stored spec (memory in bytes, cpu in millicores) with memory as people write it
    (``512Mi``) and whole cores as a number (``4``, not ``4000m``); still the same spec when
    submitted again. Everything else as stored."""
    resources = spec.get("resources")
    if not isinstance(resources, dict):
        return spec
    shown = dict(resources)
    if isinstance(shown.get(MEMORY), int):
        shown[MEMORY] = format_memory_exact(shown[MEMORY])
    cpu = shown.get(CPU)
    if isinstance(cpu, str) and cpu.endswith("m") and cpu[:-1].isdigit() and int(cpu[:-1]) % 1000 == 0:
        shown[CPU] = int(cpu[:-1]) // 1000
    return {**spec, "resources": shown}


def history_text(entries: list[dict]) -> str:
    """A history (who did what), one line per entry, oldest first: local time, action,
    who, details."""
    if not entries:
        return "history: nothing recorded"
    lines = ["history:"]
    for e in entries:
        when = datetime.fromtimestamp(e["ts"] / 1000).strftime("%Y-%m-%d %H:%M:%S")
        details = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in e["details"].items())
        lines.append(f"  {when}  {e['action']} by {e['by']}" + (f": {details}" if details else ""))
    return "\n".join(lines)


def job_text(job: dict) -> str:
    """What ``sched job show`` prints: status and version, then the spec, in YAML."""
    import yaml  # only here, like rich in print_table

    head = {"status": job["status"], "version": job["version"]}
    for name in ("failure", "parent", "waiting_for", "next_launch", "suspended", "missed", "launches"):
        if name in job:  # a job's place in time and order (control/schedule.py)
            head[name] = job[name]
    for name in ("finished_at", "remove_at"):  # a finished job: when it finished, when retention removes it
        if job.get(name) is not None:
            head[name] = iso(job[name])
    return yaml.safe_dump({**head, **spec_for_people(job["spec"])}, sort_keys=False).rstrip()

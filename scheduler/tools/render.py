"""Turning records into what people and scripts read: rich tables, or JSON on stdout."""

from __future__ import annotations

import sys

import orjson
from rich.console import Console
from rich.table import Table

from scheduler.model.quantities import format_quantity


def print_json(value) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_table(columns: list[str], rows: list[list], title: str | None = None) -> None:
    table = Table(title=title, header_style="bold", box=None, pad_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    Console().print(table)


def usage(capacity: dict[str, int], allocated: dict[str, int]) -> str:
    """``cpu 1.5/4  memory 2Gi/8Gi`` for a table cell."""
    parts = []
    for name in sorted(capacity, key=lambda r: (r not in ("cpu", "memory"), r)):
        used = format_quantity(name, allocated.get(name, 0))
        parts.append(f"{name} {used}/{format_quantity(name, capacity[name])}")
    return "  ".join(parts)

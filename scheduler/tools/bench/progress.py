"""The live view of a ``sched bench`` run: one progress bar per phase on stderr.

Redrawn by the bench's own calls (at most every 0.1 s), not by rich's refresh thread: a
process running a thread spawns its worker processes instead of forking them
(``workers/supervisor.py``), and the run with bars must start its workers as the run
without them (``--json``) does.
"""

from __future__ import annotations

import time
from typing import Callable

REDRAW_S = 0.1


class Progress:
    """A rich progress bar on stderr, or nothing (``--json``)."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn,
                                       Progress as RichProgress)

            self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                                    console=Console(stderr=True), transient=False, auto_refresh=False)
        self._drawn = 0.0

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()

    def phase(self, description: str, total: int) -> Callable[..., None]:
        """Add a bar; returns ``update(completed=None, advance=0, note=None)``."""
        if not self.bar:
            return lambda *args, **kwargs: None
        task = self.bar.add_task(description, total=total, note="")

        def update(completed: int | None = None, advance: int = 0, note: str | None = None) -> None:
            kwargs = {}
            if note is not None:
                kwargs["note"] = note
            if completed is not None:
                kwargs["completed"] = completed
            if advance:
                kwargs["advance"] = advance
            now = time.monotonic()
            redraw = now - self._drawn >= REDRAW_S or (completed is not None and completed >= total)
            if redraw:
                self._drawn = now
            self.bar.update(task, refresh=redraw, **kwargs)
        return update

"""The live view of a ``sched bench`` run: one progress bar per phase on stderr."""

from __future__ import annotations

from typing import Callable


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
                                    console=Console(stderr=True), transient=False)

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
            self.bar.update(task, **kwargs)
        return update

"""The long-running processes, found by name through the ``sched.processes`` entry points.

They live in the top-level ``workers`` package, which imports the scheduler; the
scheduler never imports it back, and reaches them only through this lookup.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from scheduler.model.errors import SchedError


def process(name: str):
    """The entry point ``name``: ``run-workers``, ``worker-processes``, ``node-agent`` or
    ``scheduler-worker`` (the worker's loop itself, which the simulator steps in process)."""
    found = entry_points(group="sched.processes", name=name)
    if not found:
        raise SchedError(f"the process {name!r} is not installed; reinstall the package (pip install -e .).")
    return next(iter(found)).load()

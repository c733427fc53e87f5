"""Small functions the demo's tasks run on the node agents (through RQ)."""

from __future__ import annotations

import os
import time


def crunch(seconds: float, label: str = "") -> str:
    """Pretend to work for a while, then say where it ran."""
    time.sleep(seconds)
    return f"{label or 'work'} done after {seconds}s in pid {os.getpid()}"


def flaky(seconds: float, marker_dir: str, name: str) -> str:
    """Fail the first time for a given name, succeed when retried (shows batch retries)."""
    time.sleep(seconds)
    marker = os.path.join(marker_dir, f"{name}.tried")
    if not os.path.exists(marker):
        with open(marker, "w") as handle:
            handle.write("1")
        raise RuntimeError(f"{name}: transient failure on the first attempt")
    return f"{name} succeeded on retry"

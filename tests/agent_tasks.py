"""Functions that the tasks of tests/test_agents.py (and the other agent tests) run on real node agents.

RQ imports them by name (``agent_tasks:add``) inside the agent's work horses, so the
tests put this folder on the agents' PYTHONPATH. Nothing here imports the scheduler.
"""

from __future__ import annotations

import os
import time


def add(a, b):
    return a + b


def fail(message: str = "boom"):
    raise RuntimeError(message)


def record_and_sleep(directory: str, seconds: float) -> str:
    """Leave ``<rq job id>.<pid>`` in ``directory`` (so a test can see which task ran in
    which process, and how often), then sleep."""
    from rq import get_current_job

    job = get_current_job()
    name = f"{job.id if job else 'nojob'}.{os.getpid()}"
    with open(os.path.join(directory, name + ".tmp"), "w") as handle:
        handle.write(str(time.time()))
    os.replace(os.path.join(directory, name + ".tmp"), os.path.join(directory, name))
    time.sleep(seconds)
    return "slept"


def steps(ledger: str, task: str, count: int, step_s: float) -> str:
    """Append ``start <task> <time>`` to ``ledger``, sleep ``count`` times ``step_s`` (a
    freeze pauses it between two), then append ``end <task> <time>``."""
    def line(word: str) -> None:
        with open(ledger, "a") as handle:
            handle.write(f"{word} {task} {time.time():.6f}\n")

    line("start")
    for _ in range(count):
        time.sleep(step_s)
    line("end")
    return f"{count} steps"

"""``python -m scheduler.tools.cli``: the same as ``sched``."""

from scheduler.tools.cli import run

run()

"""The command every task of tests/test_soak.py runs: ``python soak_command.py LEDGER SECONDS``.

It appends ``start <task> <time>`` to the ledger, then ``tick <task> <time>`` every 0.1 s
for SECONDS (0: until it is stopped), then ``end <task> <time>``: one line per write,
opened for appending, so lines of concurrent commands never mix. The task's id comes from
``SCHED_TASK_ID``; times are wall-clock seconds.
"""

import os
import sys
import time

TICK_S = 0.1


def main(ledger: str, seconds: float) -> None:
    task = os.environ["SCHED_TASK_ID"]
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(word: str) -> None:
        os.write(fd, f"{word} {task} {time.time():.6f}\n".encode())

    line("start")
    deadline = time.monotonic() + seconds
    while seconds == 0 or time.monotonic() < deadline:
        line("tick")
        time.sleep(TICK_S)
    line("end")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))

"""What a task printed: the last ``OUTPUT_CAP`` bytes of its stdout and of its stderr,
kept in memory while it runs and written to ``task:<id>:output`` every half second
and at its end, so that ``sched task logs --follow`` and the dashboard see it live.

Writing it to Redis is a thread of its own (:meth:`Output.flushing`): whoever reads the
command's pipes, and the run that waits for the command, never waits for Redis, so a run
that ends while Redis is away is recorded in the node's journal at once.

The hash's fields: ``stdout`` and ``stderr`` (the kept tail, text), ``stdout_bytes`` and
``stderr_bytes`` (how much was ever written: a follower that has seen N bytes prints
what came after), and for a Python function task ``result`` (its return value's repr)
or ``traceback``; for a command, ``exit_code``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

OUTPUT_CAP = 64 * 1024  # bytes kept per stream
FLUSH_EVERY_S = 0.5


class Output:
    """Collects a task's output; ``save(fields)`` writes the hash (a Store method)."""

    def __init__(self, save, cap: int = OUTPUT_CAP, flush_every_s: float = FLUSH_EVERY_S):
        self.save = save
        self.cap = cap
        self.flush_every_s = flush_every_s
        self.kept = {"stdout": b"", "stderr": b""}
        self.total = {"stdout": 0, "stderr": 0}
        self.extra: dict[str, str] = {}
        self._lock = threading.Lock()
        self._saving = threading.Lock()  # one save at a time, so an older one never lands last
        self._changed = False

    def write(self, stream: str, data: bytes) -> None:
        with self._lock:
            self.kept[stream] = (self.kept[stream] + data)[-self.cap:]
            self.total[stream] += len(data)
            self._changed = True

    @contextmanager
    def flushing(self):
        """Flush every ``flush_every_s`` in a thread of its own while the block runs (the
        last flush is the caller's). The thread is not waited for: it may be held by Redis."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(self.flush_every_s):
                self.flush()

        if self.flush_every_s > 0:
            threading.Thread(target=loop, name="output-flush", daemon=True).start()
        try:
            yield self
        finally:
            done.set()

    def note(self, **fields) -> None:
        """Record ``result``, ``traceback`` or ``exit_code``."""
        with self._lock:
            self.extra.update({name: str(value) for name, value in fields.items()})
            self._changed = True

    def text(self, stream: str) -> str:
        return self.kept[stream].decode("utf-8", errors="replace")

    def flush(self) -> None:
        with self._saving:
            with self._lock:
                if not self._changed:
                    return
                fields = {"stdout": self.text("stdout"), "stderr": self.text("stderr"),
                          "stdout_bytes": self.total["stdout"], "stderr_bytes": self.total["stderr"], **self.extra}
                self._changed = False
            self.save(fields)


class StreamWriter:
    """A text file object for ``contextlib.redirect_stdout`` that writes into an Output."""

    def __init__(self, output: Output, stream: str):
        self.output = output
        self.stream = stream

    def write(self, text: str) -> int:
        self.output.write(self.stream, text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        pass

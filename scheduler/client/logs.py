"""Logs: what a task printed, read once or followed."""

from __future__ import annotations

import time
from typing import Iterator

from scheduler.client.base import ClientBase
from scheduler.model import LIVE_STATES, PENDING


class LogClient(ClientBase):
    """Read and follow a task's output."""

    def logs(self, task_id: str) -> dict:
        """What the task printed: ``{id, state, stdout, stderr, stdout_bytes, stderr_bytes}``
        plus ``result``/``traceback`` (a function) or ``exit_code`` (a command) once known.
        Each stream keeps its last 64 KiB; the byte counts say how much was written."""
        task = self.store.get_task(task_id)
        fields = self.store.task_output(task_id)
        record = {"id": task.id, "state": task.state, "stdout": fields.get("stdout", ""),
                  "stderr": fields.get("stderr", ""), "stdout_bytes": int(fields.get("stdout_bytes", 0)),
                  "stderr_bytes": int(fields.get("stderr_bytes", 0))}
        for name in ("result", "traceback"):
            if name in fields:
                record[name] = fields[name]
        if "exit_code" in fields:
            record["exit_code"] = int(fields["exit_code"])
        return record

    def follow_logs(self, task_id: str, poll_s: float = 0.5) -> Iterator[tuple[str, str]]:
        """(stream, text) as the task prints it, until it has ended and all is read. Text
        that scrolled out of the kept 64 KiB before it was read is skipped."""
        seen = {"stdout": 0, "stderr": 0}
        while True:
            record = self.logs(task_id)
            for stream in ("stdout", "stderr"):
                total, kept = record[f"{stream}_bytes"], record[stream].encode()
                if total > seen[stream]:
                    fresh = kept[-min(len(kept), total - seen[stream]):]
                    seen[stream] = total
                    yield stream, fresh.decode("utf-8", errors="replace")
            if record["state"] not in (PENDING, *LIVE_STATES):
                return
            time.sleep(poll_s)

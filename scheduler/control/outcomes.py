"""What a job came to: ``running``, ``complete``, ``failed``, ``stopped`` or ``missing``.

Dependencies (``after``), a periodic job's overlap policy and its history limits all ask
it. A batch job is complete when none of its tasks is pending or live and at least
``replicas`` of them completed, failed when none is open and fewer completed (a task
failed for good, or the job was failed: its deadline passed, a dependency it waited for
could not hold); a sysbatch job is complete when the last task on each of its nodes
completed. A service, a global, a periodic or a parameterized job never completes: it
runs until stopped.

:class:`Outcomes` remembers, per job, the tasks it has seen end (an ended task never
changes), so each question reads only the job's hash and the tasks still open or new
since: a worker asking about a job of 10,000 tasks every second reads what changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from scheduler.model import COMPLETED, RUN_TO_COMPLETION, SYSBATCH, TERMINAL_STATES
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

RUNNING, COMPLETE, FAILED, STOPPED, MISSING = "running", "complete", "failed", "stopped", "missing"
ENDED = frozenset({COMPLETE, FAILED, STOPPED})
_KEPT = 10_000  # jobs remembered; beyond, the memory starts over


@dataclass
class _Seen:
    created: str
    scanned: int = -1  # the highest task index read
    open: set[str] = field(default_factory=set)  # tasks not ended when last read
    ended: Counter = field(default_factory=Counter)  # ended tasks by state
    last_on: dict[str, tuple[int, str]] = field(default_factory=dict)  # sysbatch: pin -> (index, state) of its latest


class Outcomes:
    """What jobs came to, remembering the tasks seen ended (see the module)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def of(self, store: Store, job_id: str, fields: dict | None = None) -> str:
        fields = store.job_fields(job_id) if fields is None else fields
        if not fields or "spec" not in fields:
            self._seen.pop(job_id, None)
            return MISSING
        if fields.get("failure"):
            return FAILED
        if fields.get("status") == STOPPED:
            return STOPPED
        spec = parse_stored(fields["spec"])
        if spec.launcher or spec.type not in RUN_TO_COMPLETION:
            return RUNNING
        seen = self._read(store, job_id, fields.get("created", ""), spec.type == SYSBATCH)
        if seen.open or any(f.startswith("filling:") for f in fields) or fields.get("held") == "1":
            return RUNNING
        if spec.type == SYSBATCH:
            return COMPLETE if all(state == COMPLETED for _, state in seen.last_on.values()) else FAILED
        return COMPLETE if seen.ended[COMPLETED] >= spec.replicas else FAILED

    def _read(self, store: Store, job_id: str, created: str, pins: bool) -> _Seen:
        seen = self._seen.get(job_id)
        if seen is None or seen.created != created:
            if len(self._seen) >= _KEPT:
                self._seen.clear()
            seen = self._seen[job_id] = _Seen(created)
        new = store.job_task_ids_after(job_id, seen.scanned)
        ids = [*seen.open, *(task_id for task_id, _ in new)]
        if new:
            seen.scanned = max(index for _, index in new)
        for task in store.tasks(ids):
            if task.state not in TERMINAL_STATES:
                seen.open.add(task.id)
                continue
            seen.open.discard(task.id)
            seen.ended[task.state] += 1
            if pins and task.pin and task.index >= seen.last_on.get(task.pin, (-1, ""))[0]:
                seen.last_on[task.pin] = (task.index, task.state)
        return seen

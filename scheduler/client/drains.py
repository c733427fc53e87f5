"""Drains: moving a node's tasks elsewhere as their jobs' disruption budgets allow
(``sched node drain``), and following one until it is done."""

from __future__ import annotations

import time
from typing import Iterator

from scheduler.client.base import ClientBase
from scheduler.control import drains
from scheduler.model.retention import parse_duration

DEFAULT_DEADLINE = "1h"  # Nomad's default drain deadline


def deadline_seconds(deadline) -> float | None:
    """A drain's deadline in seconds from a number of seconds or a text (``30m``, ``1h``);
    None (no deadline) stays None."""
    return None if deadline is None else parse_duration(deadline, "the drain's deadline")


class DrainClient(ClientBase):
    """Drain nodes and follow their drains."""

    def drain(self, name: str, *, deadline=DEFAULT_DEADLINE, force: bool = False) -> list[str]:
        """Drain the node: it takes no new task, and its tasks move elsewhere as their
        jobs' disruption budgets allow (:meth:`drain_report`). Returns the ids of the
        replacements queued at once (every one, when no budget holds anything back)."""
        return self.drain_report(name, deadline=deadline, force=force)["replacements"]

    def drain_report(self, name: str, *, deadline=DEFAULT_DEADLINE, force: bool = False) -> dict:
        """Drain the node and say what happened at once: ``{node, before, state, message,
        stopped, replacements, left, deadline_at, force, ...}`` (``before``: its
        availability before; ``stopped``: the ids of the tasks stopped now;
        ``replacements``: the ids of their replacements, queued as pending; ``state``:
        ``complete``, or ``draining`` while tasks wait on their budgets, which the workers
        then move; ``message``: what it waits for). ``deadline`` (seconds, or ``30m``,
        ``1h``; None: none): after it, what is left is stopped whatever the budgets.
        ``force``: stop everything at once, whatever the budgets. A node already draining
        takes the new deadline and force."""
        seconds = deadline_seconds(deadline)  # one sentence before anything is written
        report = drains.start(self.store, name, deadline_s=seconds, force=force)
        # What differs from a drain done at once (the record it always had) is added.
        extra = {"state": report["state"]} if report["state"] != drains.COMPLETE else {}
        if force:
            extra["force"] = True
        if deadline != DEFAULT_DEADLINE:
            extra["deadline"] = "none" if seconds is None else f"{seconds:g}s"
        self._record("drain", node=name, before=report["before"], stopped=len(report["stopped"]),
                     replacements=len(report["replacements"]), **extra)
        return report

    def drain_status(self, name: str) -> dict:
        """The node's last drain (:func:`scheduler.control.drains.record`): ``state``
        (``draining``, ``complete``, ``cancelled``, "" if never drained), ``message``,
        ``stopped_count``, ``moved``, ``left``, ``started_at``, ``deadline_at``, ``ended_at``."""
        self.store.get_node(name)  # one sentence if there is no such node
        return drains.record(self.store, name)

    def drains(self) -> list[dict]:
        """The drains in progress."""
        return [drains.record(self.store, name) for name in self.store.draining_nodes()]

    def follow_drain(self, name: str, *, interval: float = 0.5, timeout: float | None = None) -> Iterator[dict]:
        """The node's drain each time what it says changes, until it ends (or ``timeout``
        seconds pass): the workers move its tasks."""
        shown = None
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            record = self.drain_status(name)
            said = (record["state"], record["message"], record["stopped_count"], record["left"])
            if said != shown:
                shown = said
                yield record
            if record["state"] != drains.DRAINING or (until is not None and time.monotonic() >= until):
                return
            time.sleep(interval)

"""Ending live tasks and queueing their replacements as one step (``lua/replace.lua``).

Every end that brings a replacement goes through here: a service task that ended, a
batch task that failed with retries left, a global task restarting on its node, and
tasks lost with their node or stopped by a drain. One call covers tasks of one job, and is
a compare and set on that job (as ``enqueue``): None means the job changed since the
caller read it, and nothing was done.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model import Task
from scheduler.state.store import Store
from scheduler.state.tallies import FAULT_WINDOW_MS


@dataclass(frozen=True, slots=True)
class Successor:
    """What the replacement of one task is: the slot's retries so far, its pinned node (a
    global job's task restarts on its node), and the times of the slot's failures that
    ``reschedule.interval`` still counts (ms, oldest first)."""

    retries: int = 0
    pin: str = ""
    failures: tuple[int, ...] = ()
    delay_ms: int | None = None  # how long it waits in backoff (None: as the caller's call says)


@dataclass(frozen=True, slots=True)
class Replaced:
    """Per task: what ``finish.lua`` would report for it, and its replacement's id ("" for none)."""

    results: list[str]
    successors: list[str]


def end_and_replace(store: Store, job_id: str, read: str, next_index: int, *, version: int, priority: int,
                    delay_ms: int, ends: list[tuple[Task, Successor | None]], state: str,
                    message: str) -> Replaced | None:
    """End ``ends``' tasks (read with ``store.tasks``) in ``state``, and queue a pending
    replacement for each one that was live and names a :class:`Successor`, at ``version``
    and ``priority``, after ``delay_ms`` in backoff, if the job is still as ``read``
    (``"<version>|<next_index>|<status>"``, with ``next_index`` its next index). Resending
    it is harmless: a task it already ended gets no second replacement."""
    k = store.keys
    keys = [k.active, k.backoff, k.unschedulable, k.inflight, k.leases, k.node_changes, k.node_seq, k.cycle,
            k.move_cycle, k.tally_priority, k.usage, k.job(job_id), k.job_tasks(job_id), k.enqueue_seq, k.wake,
            k.stream, k.config, k.waiting]
    args = [store.events_arg, read, job_id, version, priority, delay_ms, FAULT_WINDOW_MS]
    wanted = 0
    for task, successor in ends:
        node = task.node if task.live else ""
        held = node or task.nominated_node  # a pending preemptor's nomination goes with it
        keys += [k.task(task.id), k.node(held), k.node_tasks(node), k.tally_job(task.job), k.faults(task.job),
                 k.tally_dom(task.job)]
        args += [task.id, state, message, node]
        args += ["", "", ""] if successor is None else [successor.retries, successor.pin,
                                                          ",".join(map(str, successor.failures))]
        wanted += successor is not None
    keys += [k.task(f"{job_id}.{next_index + i}") for i in range(wanted)]
    keys.append(k.ended)
    reply = store.scripts.replace(keys=keys, args=[*args, store.scripts.now_arg()])
    if not reply[0]:
        return None
    n = len(ends)
    return Replaced(results=list(reply[1:1 + n]), successors=list(reply[1 + n:1 + 2 * n]))

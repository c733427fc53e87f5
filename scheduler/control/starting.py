"""Why a placed task has not started: what ``sched task explain`` says of an assigned task.

A task placed on a node whose agent runs (``sched agent``) starts within a round of the
agent's sync, a fraction of its heartbeat, since the scheduler places no more live tasks
there than the agent has slots. It waits longer only when

- the node has no agent: a node added with ``sched node add`` runs nothing, and its tasks
  hold their room until an agent of that name registers (or they are stopped);
- the node is down: its agent stopped renewing its heartbeat, and its tasks are being
  replaced elsewhere;
- every task slot of the agent is in use: more tasks are live on the node than it has
  slots only when its agent came back with fewer slots than it had when they were placed
  (nothing is evicted for that); the task starts when one of the running ones ends.
"""

from __future__ import annotations

from scheduler.model import ASSIGNED, DOWN, RUNNING, Task, reasons
from scheduler.model.errors import NotFound
from scheduler.state.store import Store

SHOWN = 5  # running tasks named in a slot wait


def not_started(store: Store, task: Task) -> tuple[str, str] | None:
    """For an assigned task that something keeps from starting: (the reason, in the words
    of a pending task's explanation, and the sentence that says it); None otherwise."""
    if task.state != ASSIGNED or not task.node:
        return None
    name = task.node
    try:
        node = store.get_node(name)
    except NotFound:
        return None
    if node.status == DOWN:
        return (reasons.NODE_DOWN,
                f"placed on node {name}, which is down (its agent stopped renewing its heartbeat); "
                f"its tasks are replaced elsewhere.")
    if not store.has_agent(name):
        return (reasons.NO_AGENT, f"placed on node {name}, which has no agent to start it: a node added with "
                            f"sched node add runs nothing (sched agent {name} runs its tasks).")
    if not node.slots:
        return None
    running = sorted(t.id for t in store.live_tasks_on([name]).get(name, ()) if t.state == RUNNING)
    if len(running) < node.slots:
        return None
    named = ", ".join(running[:SHOWN]) + (f" and {len(running) - SHOWN} more" if len(running) > SHOWN else "")
    full = reasons.slots_full(node.slots).removeprefix("node has ")
    return (reasons.slots_full(node.slots),
            f"placed on node {name}, which has {full} (running {named}): it starts when one of them ends.")

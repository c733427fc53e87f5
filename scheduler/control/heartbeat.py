"""Node liveness: agents heartbeat with a TTL; a node whose heartbeat lapses goes down.

An agent writes ``node:<name>:heartbeat`` with a TTL of ``missed`` intervals (default 3).
Any scheduler worker checks the agent-run nodes about once a second: one whose key has
expired is marked down, exactly once (the status change is atomic and reports what it
replaced), and its tasks are lost and replaced. Nodes added with ``sched node add`` have
no agent and are never marked down by this.
"""

from __future__ import annotations

from scheduler.control import reconcile
from scheduler.model import DOWN, READY
from scheduler.state.store import Store

DEFAULT_INTERVAL_S = 1.0
DEFAULT_MISSED = 3


def beat(store: Store, name: str, interval_s: float = DEFAULT_INTERVAL_S, missed: int = DEFAULT_MISSED) -> None:
    """One heartbeat; a node that was down comes back up."""
    if store.beat(name, max(1, int(interval_s * missed * 1000))) == DOWN:
        store.set_status(name, READY)


def check(store: Store) -> list[str]:
    """Mark agent-run nodes whose heartbeat lapsed as down; returns the nodes this call took down."""
    lost = []
    for name, alive, status in store.agent_liveness():
        if not alive and status == READY and store.set_status(name, DOWN) == READY:
            reconcile.node_lost(store, name)
            lost.append(name)
    return lost

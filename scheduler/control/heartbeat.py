"""Node liveness: agents heartbeat with a TTL; a node whose heartbeat lapses goes down.

An agent writes ``node:<name>:heartbeat`` with a TTL of ``missed`` intervals (default 3),
and that TTL in ``agents:ttl``. Any scheduler worker checks the agent-run nodes about
once a second. Nodes added with ``sched node add`` have no agent and are never marked
down by this.

A lapsed key alone does not take a node down in a worker: the key expires on Redis's
clock, and a Redis that stalled (paused, swapping, a long script) lets every heartbeat
expire although no agent stopped. So a worker's :class:`Watch` declares a node lost only
after it missed heartbeats *while the store was answering* (Nomad's heartbeat grace,
Kubernetes' node-lifecycle grace): the node's heartbeat must have been seen missing at
every check for a whole TTL of Redis time since the first check that saw it missing, and
any gap between two successful checks longer than ``stall_gap_ms`` (the store, or this
worker, did not answer) starts every node's grace over. After a stall, every agent thus
gets a full heartbeat TTL of answering store time to beat again. When it is lost, the
status change is atomic and reports what it replaced, so it happens exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.control import reconcile
from scheduler.model import DOWN, READY
from scheduler.state.store import Store

# A TTL of 9 s: a Sentinel or Cluster failover with short timeouts, or a restart from the
# AOF of a million tasks, leaves Redis unanswering for less than a TTL less an interval
# here (docs/reliability.md, "Redis stalls"), so it costs running work nothing at all.
DEFAULT_INTERVAL_S = 3.0
DEFAULT_MISSED = 3
STALL_GAP_MS = 2000  # checks run about every second: a longer gap means the store (or we) stalled


def beat(store: Store, name: str, interval_s: float = DEFAULT_INTERVAL_S, missed: int = DEFAULT_MISSED) -> None:
    """One heartbeat; a node that was down comes back up."""
    if store.beat(name, max(1, int(interval_s * missed * 1000))) == DOWN:
        store.set_status(name, READY)


@dataclass
class Watch:
    """What one checker remembers between checks (per process; nothing in Redis)."""

    stall_gap_ms: int = STALL_GAP_MS
    last_ok_ms: int | None = None  # Redis TIME of the previous successful check
    missing_since: dict[str, int] = field(default_factory=dict)  # node -> first check that saw it missing
    stalls: int = 0  # gaps seen (each restarted every node's grace)

    def lapsed(self, now_ms: int, rows) -> list[str]:
        """Of ``rows`` (:meth:`Store.agent_liveness`), the ready nodes missing for a TTL of answering time."""
        if self.last_ok_ms is None or now_ms - self.last_ok_ms > self.stall_gap_ms:
            if self.last_ok_ms is not None:
                self.stalls += 1
            self.missing_since.clear()
        self.last_ok_ms = now_ms
        lapsed = []
        for name, alive, status, ttl_ms in rows:
            if alive or status != READY:
                self.missing_since.pop(name, None)
                continue
            since = self.missing_since.setdefault(name, now_ms)
            if now_ms - since >= ttl_ms:
                lapsed.append(name)
        return lapsed


def check(store: Store, watch: Watch) -> list[str]:
    """Mark agent-run nodes whose heartbeat stayed missing for a TTL of answering store time
    (``watch`` remembers since when, between calls) as down; returns the nodes this call
    took down."""
    now_ms, rows = store.agent_liveness()
    lost = []
    for name in watch.lapsed(now_ms, rows):
        if store.set_status(name, DOWN) == READY:
            reconcile.node_lost(store, name)
            lost.append(name)
            watch.missing_since.pop(name, None)
    return lost

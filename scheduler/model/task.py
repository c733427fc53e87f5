"""A task: one replica of a job, as its hash in Redis records it.

Tasks travel through the scheduler as :class:`Task` values read with
``Task.from_hash``; the hash itself stays flat and readable (``redis-cli HGETALL
sched:{default}:task:web.0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from scheduler.model.states import LIVE_STATES, PENDING, RUNNING, TERMINAL_STATES


def parse_allocation(text: str | None) -> dict[str, int]:
    """``cpu=500,memory=268435456`` (as commit.lua records it) -> a resources dict."""
    out = {}
    for pair in filter(None, (text or "").split(",")):
        name, _, amount = pair.partition("=")
        out[name] = int(amount)
    return out


def _int(value, default: int = 0) -> int:
    return int(value) if value not in (None, "") else default


@dataclass(slots=True)
class Task:
    """One replica of a job. Its placement inputs come from the job spec of its version."""

    id: str
    job: str
    version: int
    index: int = 0
    state: str = PENDING
    node: str = ""  # where it runs (live) or ran
    priority: int = 50
    attempts: int = 0  # scheduling attempts that failed
    retries: int = 0  # tasks that ran before it in the same slot
    pin: str = ""  # the one node a global job's task may go to
    nominated_node: str = ""  # where room is held for it after a preemption
    message: str = ""  # how it ended
    explanation: str = ""  # JSON: why its last scheduling attempt failed
    allocated: dict[str, int] = field(default_factory=dict)
    ports: tuple[int, ...] = ()
    created_ms: int = 0
    assigned_ms: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    health: str = ""  # starting, healthy or unhealthy while it runs ("" before its agent looked)
    health_ms: int = 0  # when its health last changed (Redis ms)
    health_check: str = ""  # what its last health check that changed something said
    slot: int = 0  # the index of the first task of its slot: stable across retries (kube's completion index)
    failures: tuple[int, ...] = ()  # when the slot's earlier tasks failed (ms), as reschedule.interval counts them
    replaces: str = ""  # the task it was queued to replace (a restart, retry or move)
    replaced_by: str = ""  # the task queued to replace it
    domains: tuple[str, ...] | None = None  # the tally:dom fields commit counted it under (None: not counted)

    @property
    def live(self) -> bool:
        """Holding resources on a node (assigned or running)."""
        return self.state in LIVE_STATES

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def current_health(self) -> str:
        """Its health while it runs; "" otherwise (what an ended task's hash still holds
        is how it was when it last ran, not how it is)."""
        return self.health if self.state == RUNNING else ""

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> Task:
        """Decode a task hash (enqueue.lua creates it; the other scripts update it)."""
        return cls(
            id=fields["id"], job=fields.get("job", ""), version=_int(fields.get("version")),
            index=_int(fields.get("index")), state=fields.get("state", PENDING), node=fields.get("node", ""),
            priority=_int(fields.get("priority"), 50), attempts=_int(fields.get("attempts")),
            retries=_int(fields.get("retries")), pin=fields.get("pin", ""),
            nominated_node=fields.get("nominated_node", ""), message=fields.get("message", ""),
            explanation=fields.get("explanation", ""), allocated=parse_allocation(fields.get("alloc")),
            ports=tuple(int(p) for p in filter(None, fields.get("ports", "").split(","))),
            created_ms=_int(fields.get("created")), assigned_ms=_int(fields.get("assigned_at")),
            started_ms=_int(fields.get("started_at")), ended_ms=_int(fields.get("ended_at")),
            health=fields.get("health", ""),
            health_ms=_int(fields.get("health_at")), health_check=fields.get("health_check", ""),
            slot=_int(fields.get("slot"), _int(fields.get("index"))),
            failures=tuple(int(t) for t in filter(None, fields.get("failures", "").split(","))),
            replaces=fields.get("replaces", ""), replaced_by=fields.get("replaced_by", ""),
            domains=tuple(orjson.loads(fields["domains"])) if fields.get("domains") else None,
        )

"""What ``sched capacity`` keeps in Redis: its last answer (the dashboard's capacity panel),
since when each node has been unneeded (the cluster-autoscaler's unneeded time, counted
across runs), and when a hook last acted on a scale-up and on a scale-down (the
cooldowns). One HASH, ``capacity``, of a bounded size: one answer, and one entry per
node of the cluster in ``unneeded``. ``lua/capacity.lua`` writes it and sends the
``capacity`` events of an answer in the same step."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from scheduler.state.namespace import NamespaceStore


@dataclass
class CapacityRecord:
    last: dict | None = None  # the last answer recorded
    digest: str = ""  # what it decided
    at_ms: int = 0  # when it was recorded
    unneeded: dict[str, int] = field(default_factory=dict)  # node -> since when it has been unneeded (ms)
    up_at_ms: int = 0  # when a hook last acted on a scale-up (0: never)
    down_at_ms: int = 0  # when a hook last acted on a scale-down (0: never)


def _loads(text, default):
    try:
        return orjson.loads(text) if text else default
    except orjson.JSONDecodeError:
        return default


class CapacityStore(NamespaceStore):
    def capacity_record(self) -> CapacityRecord:
        got = self.client.hgetall(self.keys.capacity)
        return CapacityRecord(last=_loads(got.get("last"), None), digest=got.get("digest", ""),
                              at_ms=int(got.get("at", 0)), unneeded=_loads(got.get("unneeded"), {}),
                              up_at_ms=int(got.get("up_at", 0)), down_at_ms=int(got.get("down_at", 0)))

    def record_capacity(self, answer: dict, digest: str, unneeded: dict[str, int], acted: tuple[str, ...] = (),
                        events: list[dict] = (), now_ms: int | None = None) -> int:
        """``capacity.lua``: keep ``answer``, the unneeded times and what a hook ``acted`` on
        (``up``, ``down``), and send ``events`` (each a dict of the event's members but
        ``ts``); returns the time recorded (ms)."""
        k = self.keys
        heads = [orjson.dumps(event).decode()[1:-1] for event in events]
        return int(self.scripts.capacity(
            keys=[k.capacity, k.stream, k.config],
            args=[self.events_arg, orjson.dumps(answer).decode(), digest, orjson.dumps(unneeded).decode(),
                  ",".join(acted), "" if now_ms is None else int(now_ms), *heads]))

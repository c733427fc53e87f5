"""The namespace over time, for the dashboard's charts: ``sched:{ns}:series``, a list of
samples, oldest first, each a JSON object::

    {"ts": 1795305669501, "placed": 1200, "active": 3, "backoff": 0, "unschedulable": 1,
     "inflight": 0, "tasks": 41, "alloc": {"cpu": 20500, "memory": 1342177280},
     "cap": {"cpu": 64000, "memory": 274877906944}}

``placed`` is the workers' counter (``stats``), so placements per second are the
difference of two samples over their times; ``alloc`` is what live tasks hold
(``usage``), ``cap`` the ready nodes' capacity. Samples are taken by the scheduler
workers' upkeep (``lua/series.lua``) every :data:`SAMPLE_EVERY_MS`, one per interval
however many workers call, and the list keeps the last :data:`SAMPLES_KEPT` (an hour,
about 150 KB). With no worker running, no sample is taken.
"""

from __future__ import annotations

import orjson

from scheduler.state.namespace import NamespaceStore

SAMPLE_EVERY_MS = 5_000
SAMPLES_KEPT = 720  # an hour of samples


class SeriesStore(NamespaceStore):
    def sample(self, capacity: dict[str, int], every_ms: int = SAMPLE_EVERY_MS, kept: int = SAMPLES_KEPT) -> bool:
        """Append a sample when the newest is ``every_ms`` old or more (True when one was)."""
        k = self.keys
        text = ",".join(f"{name}={int(amount)}" for name, amount in sorted(capacity.items()))
        return bool(self.scripts.series([self.keys.series, k.stats, k.usage, k.active, k.backoff, k.unschedulable,
                                         k.inflight], [every_ms, kept, text]))

    def series(self, after_ms: int = 0) -> list[dict]:
        """The samples kept, oldest first; only those taken after ``after_ms``."""
        out = []
        for text in self.client.lrange(self.keys.series, 0, -1):
            try:
                sample = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            if isinstance(sample, dict) and sample.get("ts", 0) > after_ms:
                out.append(sample)
        return out

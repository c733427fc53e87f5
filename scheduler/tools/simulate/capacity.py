"""``sched capacity --trace``: the capacity answer on the cluster a replayed trace leaves.

The trace is replayed as ``sched simulate`` replays it (``replay.py``: the production
worker and scripts on a private ``redis-server``, on a virtual clock), until the last
event of the trace by default (its last arrival, node change or drain: the cluster as the
trace leaves it, with the tasks that still run then), or ``until_s``. The pools given are
put in the replay's namespace, and the answer is worked out there by the same code as on
a live cluster (``scheduler/control/capacity.py``).
"""

from __future__ import annotations

import dataclasses

from scheduler.control.capacity import CapacityOptions, answer
from scheduler.model.pools import Pool
from scheduler.tools.simulate import private_redis
from scheduler.tools.simulate.replay import EPOCH_MS, Replay, Settings
from scheduler.tools.simulate.report import summarise
from scheduler.tools.simulate.trace import Trace


def last_event_s(trace: Trace) -> float:
    return max((event.time_ms for event in trace.events), default=0) / 1000


def capacity_after(trace: Trace, pools: list[Pool], options: CapacityOptions | None = None,
                   settings: Settings | None = None, progress=None) -> dict:
    """Replay ``trace`` up to ``settings.until_s`` (default: its last event), then answer.
    Returns the answer with ``simulated_s`` and the replay's ``report`` (as ``sched
    simulate --json`` gives it)."""
    settings = settings or Settings()
    if settings.until_s is None:
        settings = dataclasses.replace(settings, until_s=last_event_s(trace))
    with private_redis() as url:
        replay = Replay(trace, settings, url, "capacity")
        try:
            replay.run(progress)
            for pool in pools:
                replay.store.put_pool(pool)
            result = answer(replay.store, options)
            report = summarise(replay)
        finally:
            replay.store.clear_namespace()
            replay.app.close()
    result["simulated_s"] = (replay.clock.now - EPOCH_MS) / 1000
    result["report"] = {k: v for k, v in report.items() if k not in ("series", "tenant_series")}
    return result

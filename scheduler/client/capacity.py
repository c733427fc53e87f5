"""Capacity: which pools and how many nodes the pending work needs, which nodes could go,
and acting on it through a hook (``sched capacity``)."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control import capacity_hooks
from scheduler.control.capacity import CapacityOptions, answer
from scheduler.control.capacity_hooks import Cooldowns, Hook


class CapacityClient(ClientBase):
    """Capacity answers, proven by the placement engine on a copy of the cluster."""

    def capacity(self, *, expander: str | list[str] | None = None, threshold: float = 0.5,
                 max_remove: int | None = None, scale_up: bool = True, scale_down: bool = True,
                 record: bool = False) -> dict:
        """The capacity answer now: ``scale_up`` (pools and nodes to add for the pending
        tasks, chosen by ``expander``: ``least-waste``, ``price``, ``priority``,
        ``most-tasks``, or a chain such as ``"priority,least-waste"``; the tasks no pool
        takes, with why) and ``scale_down`` (nodes below ``threshold`` utilisation whose
        tasks fit elsewhere under every hard rule and disruption budget, at most
        ``max_remove``, and the cost saved). With ``record``, the answer is kept for the
        dashboard and its decision worked out with the default cooldowns (no hook)."""
        options = CapacityOptions(expander=expander, threshold=threshold, max_remove=max_remove,
                                  scale_up=scale_up, scale_down=scale_down)
        if record:
            return capacity_hooks.run_once(self.store, self.namespace, options)
        return answer(self.store, options)

    def act_on_capacity(self, *, exec_cmd: str | None = None, webhook: str | None = None,
                        expander: str | list[str] | None = None, threshold: float = 0.5,
                        max_remove: int | None = None, cooldowns: Cooldowns | None = None,
                        timeout_s: float = capacity_hooks.HOOK_TIMEOUT_S) -> dict:
        """One answer, acted on: the command (the decision as JSON on its standard input)
        or the webhook (the decision POSTed as JSON) is called when the decision is to
        scale up or down and the cooldowns allow it. The answer is recorded (the
        dashboard's capacity panel) with a ``capacity`` event. Returns the answer with
        ``decision`` and, when a hook was called, ``hook``."""
        options = CapacityOptions(expander=expander, threshold=threshold, max_remove=max_remove)
        return capacity_hooks.run_once(self.store, self.namespace, options, Hook(exec_cmd, webhook, timeout_s),
                                       cooldowns)

    def last_capacity(self) -> dict | None:
        """The last answer recorded (by ``sched capacity --record``, ``--exec``, ``--webhook``
        or ``--watch``), with ``recorded_at`` (ms), or None."""
        record = self.store.capacity_record()
        if record.last is None:
            return None
        return {**record.last, "recorded_at": record.at_ms}

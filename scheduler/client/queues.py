"""Queues: how many tasks wait in each of the scheduling queues."""

from __future__ import annotations

from scheduler.client.base import ClientBase


class QueueClient(ClientBase):
    """Count the queues."""

    def queue_counts(self) -> dict[str, int]:
        """Tasks in each queue: active, backoff, unschedulable, inflight."""
        return self.app.queue.counts()

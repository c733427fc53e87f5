"""Counting failed attempts (sign-ins, API requests with a wrong token) per user or
address, in Redis: one counter per who, whose TTL is the window the failures count in,
so that nothing is kept once the window has passed."""

from __future__ import annotations


class FailedAttempts:
    """Counters under ``prefix`` (``sched:ui:failed:``, ``sched:api:failed:``)."""

    def __init__(self, client, prefix: str):
        self.client, self.prefix = client, prefix

    def count(self, who: str) -> int:
        return int(self.client.get(self.prefix + who) or 0)

    def failed(self, who: str, window_s: int) -> int:
        """Count one more failure; the count lasts ``window_s`` from the first of them."""
        key = self.prefix + who
        with self.client.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, window_s, nx=True)
            return int(pipe.execute()[0])

    def forget(self, who: str) -> None:
        self.client.delete(self.prefix + who)

    def retry_after_s(self, who: str) -> int:
        """Seconds until the window of ``who``'s failures ends (0: none counted)."""
        return max(0, int(self.client.ttl(self.prefix + who)))

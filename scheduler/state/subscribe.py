"""Following a pub/sub channel (``sched:{ns}:events``) on any topology, across failovers.

The scripts publish with classic ``PUBLISH``. On a Redis Cluster a message published on
one node is passed to every node over the cluster bus, so a subscriber may listen on any
node; redis-py's cluster pub/sub listens on the node serving the channel's slot. What
redis-py does not do on a cluster is move a subscription off a node that died: its
connection stays on the dead node. A :class:`Follower` subscribes again, after a
backoff, on whichever node the client then finds (and, under Sentinel, on the new
master), so it carries on after a failover. Messages published while it was away are
not replayed: pub/sub is at-most-once, and events are notifications, not the state itself.
"""

from __future__ import annotations

import time
from typing import Callable

from redis.exceptions import AuthenticationError, ClusterDownError, ConnectionError, RedisError, TimeoutError

AWAY = (ConnectionError, TimeoutError, ClusterDownError)
FIRST_WAIT_S, LAST_WAIT_S = 0.05, 1.0  # the backoff between attempts to subscribe again


class Follower:
    """A subscription to one channel that outlives failovers. It subscribes at once (so
    nothing published after the constructor returns is missed while Redis answers)."""

    def __init__(self, client, channel: str, on_subscribed: Callable[[], None] | None = None):
        self.client, self.channel, self.on_subscribed = client, channel, on_subscribed
        self._wait = FIRST_WAIT_S
        self._pubsub = None
        self._subscribe()

    def _subscribe(self) -> None:
        pubsub = self.client.pubsub()
        try:
            pubsub.subscribe(self.channel)
        except BaseException:
            pubsub.close()
            raise
        self._pubsub = pubsub

    def next(self, timeout: float) -> str | None:
        """The data of the next message, or None when none came within about ``timeout``
        seconds (also while Redis is away: the follower is then subscribing again)."""
        try:
            if self._pubsub is None:
                self._subscribe()
            message = self._pubsub.get_message(timeout=timeout)
        except AuthenticationError:
            raise  # a refused password will not become right
        except AWAY:
            self._away(timeout)
            return None
        if message is None:
            return None
        if message["type"] == "subscribe":
            self._wait = FIRST_WAIT_S
            if self.on_subscribed is not None:
                self.on_subscribed()
        elif message["type"] == "message":
            return message["data"]
        return None

    def _away(self, timeout: float) -> None:
        self.close()
        time.sleep(min(self._wait, max(timeout, 0.01)))
        self._wait = min(self._wait * 2, LAST_WAIT_S)
        _find_channel_node(self.client, self.channel)

    def close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except RedisError:
                pass
            self._pubsub = None


def _find_channel_node(client, channel: str) -> None:
    """Make a cluster client learn which node now serves the channel's slot: a keyed
    command fails on the dead node and makes redis-py re-read the layout (elsewhere,
    or when the cluster is still failing over, it does no harm)."""
    try:
        client.exists(channel)
    except RedisError:
        pass

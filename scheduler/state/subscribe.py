"""Following a pub/sub channel (``sched:{ns}:events``) on any topology, across failovers.

The scripts publish with classic ``PUBLISH``. On a Redis Cluster a message published on
one node is passed to every node over the cluster bus, so a subscriber may listen on any
node; redis-py's cluster pub/sub listens on the node serving the channel's slot. What
redis-py does not do on a cluster is move a subscription off a node that died: its
connection stays on the dead node. :func:`follow` subscribes again, after a backoff, on
whichever node the client then finds (and, under Sentinel, on the new master), so a
follower carries on after a failover. Messages published while it was away are not
replayed: pub/sub is at-most-once, and events are notifications, not the state itself.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from redis.exceptions import AuthenticationError, ClusterDownError, ConnectionError, RedisError, TimeoutError


def follow(client, channel: str, *, stop: Callable[[], bool] = lambda: False, poll_s: float = 0.5,
           on_subscribed: Callable[[], None] | None = None) -> Iterator[str]:
    """Yield the data of each message on ``channel`` until ``stop()`` returns True
    (checked at least every ``poll_s`` seconds). ``on_subscribed`` is called each time
    Redis confirms the subscription (again, after a reconnection)."""
    wait = 0.05
    while not stop():
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(channel)
            while not stop():
                message = pubsub.get_message(timeout=poll_s)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    wait = 0.05
                    if on_subscribed is not None:
                        on_subscribed()
                elif message["type"] == "message":
                    yield message["data"]
        except AuthenticationError:
            raise  # a refused password will not become right
        except (ConnectionError, TimeoutError, ClusterDownError):
            time.sleep(wait)
            wait = min(wait * 2, 1.0)
            _find_channel_node(client, channel)
        finally:
            pubsub.close()


def _find_channel_node(client, channel: str) -> None:
    """Make a cluster client learn which node now serves the channel's slot: a keyed
    command fails on the dead node and makes redis-py re-read the layout (elsewhere,
    or when the cluster is still failing over, it does no harm)."""
    try:
        client.exists(channel)
    except RedisError:
        pass

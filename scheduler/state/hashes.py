"""Reading many hashes at once: every node when a worker (or the parent of several) loads
its copy of the cluster, many tasks or jobs in one look.

A redis-py pipeline spends about as much of the reader's CPU per command as decoding the
node does (queueing the call, packing it, a response callback that turns the reply into
a dict): thousands of ``HGETALL`` calls cost tens of milliseconds before any node exists.
Here the commands are written as one buffer per chunk and the replies read straight off
the connection; the connection's retry (the failover bound) resends a chunk that failed,
as it would a pipeline. A Redis Cluster client, whose keys may live on several shards,
takes the pipeline.
"""

from __future__ import annotations

import redis

CHUNK = 1000  # keys per round trip: bounds what a reply buffers, whatever the cluster's size


def hgetall_many(client, keys: list[str]) -> list[dict[str, str]]:
    """``HGETALL`` of each key, in order (an empty dict for a key that does not exist)."""
    if not isinstance(client, redis.Redis):
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hgetall(key)
            return pipe.execute()
    replies: list[dict[str, str]] = []
    for start in range(0, len(keys), CHUNK):
        replies += _chunk(client, keys[start:start + CHUNK])
    return replies


def _chunk(client: redis.Redis, keys: list[str]) -> list[dict[str, str]]:
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        encode = connection.encoder.encode
        packed = b"".join([b"*2\r\n$7\r\nHGETALL\r\n$%d\r\n%s\r\n" % (len(key), key)
                           for key in (encode(key) for key in keys)])

        def send_and_read() -> list:
            connection.send_packed_command([packed])
            return [connection.read_response() for _ in keys]

        # A failed attempt leaves replies unread: the connection is dropped before a retry.
        replies = connection.retry.call_with_retry(send_and_read, lambda _error: connection.disconnect())
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    # RESP3 replies are maps already; RESP2 ones are flat lists of fields and values.
    return [reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2])) for reply in replies]

"""Reading many hashes at once: every node when a worker (or the parent of several) loads
its copy of the cluster, every live task when a plan copies it.

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


def hmget_many(client, keys: list[str], fields: tuple[str, ...]) -> list[dict[str, str]]:
    """``HMGET`` of ``fields`` of each key, in order, each as a dict of the fields it has
    (empty for a key that does not exist): what a reader needs of many big hashes."""
    if not isinstance(client, redis.Redis):
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, *fields)
            rows = pipe.execute()
    else:
        tail = b"".join(b"$%d\r\n%s\r\n" % (len(f), f) for f in (field.encode() for field in fields))
        head = b"*%d\r\n$5\r\nHMGET\r\n" % (len(fields) + 2)
        rows = []
        for start in range(0, len(keys), CHUNK):
            rows += _chunk(client, keys[start:start + CHUNK], head, tail)
    return [{name: value for name, value in zip(fields, row) if value is not None} for row in rows]


def _chunk(client: redis.Redis, keys: list[str], head: bytes | None = None, tail: bytes = b"") -> list:
    """One round trip of ``HGETALL`` (or, given ``head`` and ``tail``, of the command they
    frame: the key goes between them) per key."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        encode = connection.encoder.encode
        if head is None:
            packed = b"".join([b"*2\r\n$7\r\nHGETALL\r\n$%d\r\n%s\r\n" % (len(key), key)
                               for key in (encode(key) for key in keys)])
        else:
            packed = b"".join([head + b"$%d\r\n%s\r\n" % (len(key), key) + tail
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
    if head is not None:
        return replies
    # RESP3 replies are maps already; RESP2 ones are flat lists of fields and values.
    return [reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2])) for reply in replies]

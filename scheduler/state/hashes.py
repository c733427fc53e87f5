"""Reading many keys at once: every node when a worker (or the parent of several) loads
its copy of the cluster, every live task when a plan copies it, many tasks or jobs in one
look, what runs on the nodes a preemption weighs.

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
    replies = _many(client, keys, "hgetall", b"HGETALL", ())
    # RESP3 replies are maps already; RESP2 ones are flat lists of fields and values.
    return [reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2])) for reply in replies]


def hmget_many(client, keys: list[str], fields: tuple[str, ...]) -> list[dict[str, str]]:
    """``HMGET`` of ``fields`` of each key, in order, each as a dict of the fields it has
    (empty for a key that does not exist): what a reader needs of many big hashes."""
    return [{name: value for name, value in zip(fields, row) if value is not None}
            for row in _many(client, keys, "hmget", b"HMGET", fields)]


def smembers_many(client, keys: list[str]) -> list[set[str]]:
    """``SMEMBERS`` of each key, in order."""
    return [set(reply) for reply in _many(client, keys, "smembers", b"SMEMBERS", ())]


def _many(client, keys: list[str], name: str, command: bytes, fields: tuple[str, ...]) -> list:
    """``command key *fields`` for each key, in order: a chunk of keys per round trip."""
    if not isinstance(client, redis.Redis):
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                getattr(pipe, name)(key, *fields)
            return pipe.execute()
    replies: list = []
    for start in range(0, len(keys), CHUNK):
        replies += _chunk(client, keys[start:start + CHUNK], command, fields)
    return replies


def _chunk(client: redis.Redis, keys: list[str], command: bytes, fields: tuple[str, ...]) -> list:
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        encode = connection.encoder.encode
        head = b"*%d\r\n$%d\r\n%s\r\n" % (len(fields) + 2, len(command), command)
        tail = b"".join(b"$%d\r\n%s\r\n" % (len(field), field) for field in (encode(f) for f in fields))
        packed = b"".join([b"%s$%d\r\n%s\r\n%s" % (head, len(key), key, tail) for key in (encode(key) for key in keys)])

        def send_and_read() -> list:
            connection.send_packed_command([packed])
            return [connection.read_response() for _ in keys]

        # A failed attempt leaves replies unread: the connection is dropped before a retry.
        return connection.retry.call_with_retry(send_and_read, lambda _error: connection.disconnect())
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)

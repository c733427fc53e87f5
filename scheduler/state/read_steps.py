"""Reads written once and run two ways. A read is a generator: it yields each round
trip's commands (a :class:`Batch`) and is sent their replies, in order, then returns what
it read. :func:`run` sends them from the caller's thread with the Store's client (a raw
pipeline, state/raw_pipeline.py: redis-py's on a Redis Cluster); :func:`run_on_loop` on
the event loop (state/loop_redis.py), with no thread to hop to: a busy API server's reads
of a job, a page of jobs and the nodes (benchmarks-history.md, The HTTP API under concurrent
clients).

A read that goes on with blocking calls of the Store (a rare case: a page that finds the
index of job ids to make, a launcher's launches) first yields :data:`BLOCKING_CALLS`: run on a
thread, it goes on at once; on the loop, it is given up (:class:`NeedsThread`), and its
caller does the whole read on a thread instead. Replies come as Redis sends them (a hash
as a flat list); a Redis Cluster pipeline's come converted by redis-py: :func:`as_hash`
and :func:`newest_id` take both.
"""

from __future__ import annotations

from typing import Any, Generator

from redis.exceptions import NoScriptError

from scheduler.state.raw_pipeline import read_pipeline

BLOCKING_CALLS = "blocking calls"  # yielded by a read that goes on with blocking calls


class NeedsThread(Exception):
    """The read cannot go on on the event loop: do it on a thread (:func:`run`)."""


class Batch:
    """One round trip's commands, queued as on a pipeline (``execute_command``, so that
    ``Scripts.queue`` lays out a script's call here as on any pipeline)."""

    def __init__(self):
        self.commands: list[tuple] = []

    def execute_command(self, *args, **_options) -> None:
        self.commands.append(args)

    def __len__(self) -> int:
        return len(self.commands)


Steps = Generator[Batch | str, Any, Any]


def run(store, steps: Steps):
    """What ``steps`` read, each round trip sent with ``store``'s client; a script Redis
    lost (a restart) is loaded and its round trip sent again."""
    replies = None
    while True:
        try:
            batch = steps.send(replies)
        except StopIteration as done:
            return done.value
        replies = None if batch is BLOCKING_CALLS else _round_trip(store, batch)


def _round_trip(store, batch: Batch) -> list:
    if not batch.commands:
        return []
    for reloaded in (False, True):
        with read_pipeline(store.client) as pipe:
            for command in batch.commands:
                pipe.execute_command(*command)
            try:
                return pipe.execute()
            except NoScriptError:
                if reloaded:
                    raise
                store.scripts.load_all()
    raise AssertionError("unreachable")


async def run_on_loop(connection, steps: Steps):
    """What ``steps`` read, each round trip sent on ``connection`` (a LoopRedis); raises
    NeedsThread where a read needs blocking calls, or Redis is not there to answer."""
    replies = None
    while True:
        try:
            batch = steps.send(replies)
        except StopIteration as done:
            return done.value
        if batch is BLOCKING_CALLS:
            steps.close()
            raise NeedsThread("the read goes on with blocking calls")
        replies = await connection.execute(batch.commands) if batch.commands else []


def as_hash(reply) -> dict[str, str]:
    """A hash as read: redis-py's dict, or the flat list of fields and values Redis sends."""
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


def newest_id(reply) -> str:
    """The id in the reply of ``XREVRANGE stream + - COUNT 1`` ("0-0" for an empty stream)."""
    return reply[0][0] if reply else "0-0"

"""Reads on the event loop: one connection per process's loop to the Redis the App's
client talks to (a unix socket or TCP), on which the reads of every request are written
as they come and their replies, read by hiredis, handed back in order. No thread to hop
to, no pool or lock to take: a round trip costs the loop a few microseconds, where a
redis-py call from a request thread costs tens (benchmarks-history.md, The HTTP API under
concurrent clients).

It serves the API's reads that fit (state/read_steps.py) and nothing else: whatever it
cannot do is :class:`Unavailable` at once, and the caller reads the ordinary way, on a
thread, whose client waits out a failover and reloads a script Redis lost. So: a Redis
Cluster, a Sentinel-managed master, TLS or a credential provider have no connection
here; nor has a Redis that did not answer a round trip within :data:`TIMEOUT_S` (the
connection is dropped, and made again at the next read, at most every
:data:`RETRY_S`), nor an error reply.
"""

from __future__ import annotations

import asyncio
import collections
import time

import hiredis
import redis
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection

from scheduler.state.read_steps import NeedsThread

TIMEOUT_S = 2.0  # a round trip not answered within it fails, and the connection is dropped
RETRY_S = 1.0  # after a failed connection, the loop does not try again for this long


class Unavailable(NeedsThread):
    """No answer on the loop: read on a thread."""


class LoopRedis:
    """Round trips on the running event loop (:meth:`execute`), for a client's Redis."""

    def __init__(self, address: dict, decode: bool, hello: list[tuple]):
        self.address, self.decode, self.hello = address, decode, hello
        self._loop = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future | None = None
        self._down_until = 0.0

    @classmethod
    def for_client(cls, client) -> LoopRedis | None:
        """One for ``client``'s Redis, or None where this cannot connect as it does."""
        if type(client) is not redis.Redis or type(client.connection_pool) is not redis.ConnectionPool:
            return None  # a cluster, or a Sentinel's pool
        kind, options = client.connection_pool.connection_class, client.connection_pool.connection_kwargs
        if issubclass(kind, SSLConnection) or options.get("credential_provider") is not None:
            return None
        if issubclass(kind, UnixDomainSocketConnection):
            address = {"path": options["path"]}
        elif issubclass(kind, Connection):
            address = {"host": options.get("host", "localhost"), "port": int(options.get("port", 6379))}
        else:
            return None
        hello = []
        if options.get("password"):
            hello.append(("AUTH", *([options["username"]] if options.get("username") else []), options["password"]))
        if int(options.get("db") or 0):
            hello.append(("SELECT", int(options["db"])))
        return cls(address, bool(options.get("decode_responses")), hello)

    async def execute(self, commands: list[tuple]) -> list:
        """The replies of ``commands``, sent together; Unavailable when they cannot be had."""
        protocol = self._protocol
        if protocol is None or protocol.closed or self._loop is not asyncio.get_running_loop():
            protocol = await self._connect()
        replies = await protocol.send(commands)
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):  # NOSCRIPT, or anything: the thread's client says it
                raise Unavailable(str(reply))
        return replies

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (a test's): its own connection
            self._loop, self._protocol, self._connecting, self._down_until = loop, None, None, 0.0
        if self._connecting is None:
            if time.monotonic() < self._down_until:
                raise Unavailable("Redis did not answer on the loop a moment ago")
            self._connecting = loop.create_future()
            try:
                protocol = await asyncio.wait_for(self._open(loop), TIMEOUT_S)
            except (OSError, asyncio.TimeoutError, Unavailable) as exc:
                self._down_until = time.monotonic() + RETRY_S
                self._connecting.set_exception(Unavailable(f"no connection on the loop ({exc})"))
                self._connecting.exception()  # retrieved: waiters get their own
                self._connecting = None
                raise Unavailable(f"no connection on the loop ({exc})") from None
            self._protocol = protocol
            self._connecting.set_result(protocol)
            self._connecting = None
            return protocol
        return await asyncio.shield(self._connecting)

    async def _open(self, loop) -> _Protocol:
        make = lambda: _Protocol(self.decode)  # noqa: E731
        if "path" in self.address:
            _, protocol = await loop.create_unix_connection(make, self.address["path"])
        else:
            _, protocol = await loop.create_connection(make, self.address["host"], self.address["port"])
        if self.hello:
            for reply in await protocol.send(self.hello):
                if isinstance(reply, hiredis.ReplyError):
                    protocol.close()
                    raise Unavailable("Redis refused the connection's sign-in")
        return protocol


class _Protocol(asyncio.Protocol):
    """One connection: round trips answered in the order they were sent."""

    def __init__(self, decode: bool):
        self.reader = hiredis.Reader(encoding="utf-8") if decode else hiredis.Reader()
        self.pending: collections.deque = collections.deque()  # [future, replies wanted, replies, sent at]
        self.transport = None
        self.closed = False
        self._watching = False
        self._unsent: list[bytes] = []  # commands of this turn of the loop, written together at its end

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, commands: list[tuple]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(Unavailable("the connection was lost"))
            return future
        self.pending.append([future, len(commands), [], time.monotonic()])
        if not self._unsent:  # the first round trip of this turn: one write for all of them, after it
            asyncio.get_running_loop().call_soon(self._write)
        self._unsent += [hiredis.pack_command(command) for command in commands]
        if not self._watching:
            self._watching = True
            asyncio.get_running_loop().call_later(TIMEOUT_S / 2, self._watch)
        return future

    def _write(self) -> None:
        unsent, self._unsent = self._unsent, []
        if not self.closed:
            self.transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        pending = self.pending
        while (reply := self.reader.gets()) is not False:
            if not pending:  # a reply no round trip waits for: out of step
                return self.close()
            head = pending[0]
            head[2].append(reply)
            if len(head[2]) == head[1]:
                pending.popleft()
                if not head[0].done():
                    head[0].set_result(head[2])

    def _watch(self) -> None:
        """A round trip unanswered for TIMEOUT_S drops the connection (and fails them all)."""
        self._watching = False
        if self.closed or not self.pending:
            return
        if time.monotonic() - self.pending[0][3] > TIMEOUT_S:
            return self.close()
        self._watching = True
        asyncio.get_running_loop().call_later(TIMEOUT_S / 2, self._watch)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.connection_lost(None)

    def connection_lost(self, exc) -> None:
        if self.closed:
            return
        self.closed = True
        while self.pending:
            future = self.pending.popleft()[0]
            if not future.done():
                future.set_exception(Unavailable("the connection was lost"))

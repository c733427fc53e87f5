"""A namespace's keys read whole and written back: what ``sched snapshot save/restore``
stores in a file (the file itself is ``scheduler/control/snapshot.py``).

Every key of a namespace lives in the slot of its hash tag ``{ns}``, so one script call
can read any of them at once; but one call over a whole namespace could hold Redis for
seconds. The keys are read instead in pages of bounded size (``lua/dump_page.lua``: each
key's ``DUMP`` and time to live, a few hundred keys or about a megabyte per call), each
page with the namespace's *change mark*: its stream's newest entry id and the counters
that the few unannounced changes move (claims, node changes, queued tasks, cluster
events; only the dashboard's samples, ``series.lua``, move none, and stand alone). The
mark is read once before the keys are listed; when every page comes back with that same
mark, nothing changed the namespace's scripted state in between, and the pages together
are the namespace at one moment. Otherwise the read is worth nothing and
the caller reads again. What is written outside scripts (a task's output, agents'
heartbeats, the workers' counters) and the dashboard's samples are read as they were
when their page was.

Restoring writes the payloads with ``RESTORE ... REPLACE`` under the target's own key
names (the part after ``sched:{ns}:`` is kept), in pipelined batches, into a namespace
that holds no key but ``restoring``: a marker naming the snapshot, set before the first
key is written and deleted after the last, so that a restore cut short is finished by
running the same restore again, and refused for any other snapshot.
"""

from __future__ import annotations

from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from scheduler.state.layout import CURRENT, LayoutStore
from scheduler.state.namespace import NamespaceStore

PAGE_KEYS = 256  # keys per dump_page.lua call at most
PAGE_BYTES = 1 << 20  # a call stops once its payloads pass this (a bigger key goes alone)
PAGES_PER_TRIP = 8  # calls per pipeline
RESTORES_PER_TRIP = 256  # RESTORE commands per pipeline

# The version of the key layout this code reads and writes (scheduler/state/layout.py), which
# a snapshot records: a snapshot of a newer layout is refused.
KEY_LAYOUT = CURRENT

Entry = tuple[str, int, bytes]  # (key name after the namespace's prefix, PTTL or -1, DUMP payload)


class ChangedWhileRead(Exception):
    """The namespace changed between two pages of one read: read it again."""


class SnapshotStore(NamespaceStore):
    """Reading a namespace whole and writing one back, for snapshots."""

    def key_layout(self) -> int:
        """The version of the namespace's key layout (what a snapshot of it records; an
        empty namespace's is the current one)."""
        return LayoutStore.layout_version(self) or KEY_LAYOUT

    def redis_version(self) -> str:
        """The version of the Redis serving the namespace (a DUMP payload loads on the same
        or a newer one)."""
        client = self.client
        if isinstance(client, RedisCluster):
            info = client.info("server", target_nodes=client.get_node_from_key(self.keys.active))
        else:
            info = client.info("server")
        if info and "redis_version" not in info:  # a reply per node
            info = next(iter(info.values()))
        return str(info.get("redis_version", ""))

    def _mark_keys(self) -> list[str]:
        k = self.keys
        return [k.stream, k.cycle, k.node_seq, k.enqueue_seq, k.move_cycle]

    def _key_names(self) -> list[str]:
        """Every key of the namespace (a SCAN: on a cluster, of the node serving its slot only)."""
        options = {}
        if isinstance(self.client, RedisCluster):
            options["target_nodes"] = self.client.get_node_from_key(self.keys.active)
        return list(self.client.scan_iter(match=f"{self.keys.prefix}*", count=1000, **options))

    def _dump_pages(self, pages: list[list[str]]) -> list[tuple[str, int, list[tuple[int, bytes]]]]:
        """One dump_page.lua call per page, in one round trip: per page, the mark, how many
        of its keys the call dumped, and (PTTL, payload) of each of those."""
        def send():
            pipe = self.client.pipeline(transaction=False)
            for page in pages:
                self.scripts.queue(pipe, "dump_page", [*self._mark_keys(), *page], [PAGE_BYTES], read_only=True,
                                   **{NEVER_DECODE: []})
            return pipe.execute()

        try:
            replies = send()
        except NoScriptError:  # Redis restarted or failed over since: load it, read again
            self.scripts.load("dump_page")
            replies = send()
        out = []
        for reply in replies:
            done = int(reply[1])
            out.append((reply[0].decode(), done, [(int(reply[2 + 2 * i]), reply[3 + 2 * i]) for i in range(done)]))
        return out

    def change_mark(self) -> str:
        """The namespace's change mark now (see the module's docstring)."""
        return self._dump_pages([[]])[0][0]

    def dump_namespace(self, write: Callable[[Entry], None]) -> str:
        """Hand every key of the namespace to ``write`` as (name after the prefix, PTTL,
        DUMP payload), all as of one moment; returns the change mark of that moment.
        Raises :class:`ChangedWhileRead` when the namespace changed during the read (what
        ``write`` got is then worth nothing)."""
        mark = self.change_mark()
        keys = sorted(self._key_names())
        cut, waiting = len(self.keys.prefix), deque(keys)
        while waiting:
            pages = [[waiting.popleft() for _ in range(min(PAGE_KEYS, len(waiting)))]
                     for _ in range(min(PAGES_PER_TRIP, -(-len(waiting) // PAGE_KEYS)))]
            for page, (page_mark, done, dumped) in zip(pages, self._dump_pages(pages)):
                if page_mark != mark:
                    raise ChangedWhileRead(mark, page_mark)
                waiting.extend(page[done:])  # left for lack of room in that call: in a later one
                for key, (pttl, payload) in zip(page, dumped):
                    if pttl != -2:  # gone since it was listed, before the mark's moment
                        write((key[cut:], pttl, payload))
        return mark

    @contextmanager
    def writes_paused(self, timeout_ms: int) -> Iterator[None]:
        """Pause every client's writes on the server serving the namespace (``CLIENT PAUSE
        ... WRITE``: reads and read-only scripts go on, keys do not expire meanwhile) for
        at most ``timeout_ms``; the server ends the pause by itself if this process dies."""
        client, options = self.client, {}
        if isinstance(client, RedisCluster):
            options["target_nodes"] = client.get_node_from_key(self.keys.active)
        client.execute_command("CLIENT PAUSE", timeout_ms, "WRITE", **options)
        try:
            yield
        finally:
            client.execute_command("CLIENT UNPAUSE", **options)

    def key_count(self) -> int:
        return len(self._key_names())

    def restore_marker(self) -> str | None:
        """The snapshot a restore into this namespace is writing (None: no restore under way)."""
        return self.client.get(self.keys.restoring)

    def begin_restore(self, snapshot: str) -> bool:
        """Mark the namespace as being restored from ``snapshot``; False when another
        restore holds it."""
        if self.client.set(self.keys.restoring, snapshot, nx=True):
            return True
        return self.client.get(self.keys.restoring) == snapshot

    def restore_entries(self, entries: Iterable[Entry]) -> int:
        """Write the keys under this namespace's prefix (replacing any of the same name);
        returns how many."""
        prefix, written = self.keys.prefix, 0
        pipe = self.client.pipeline(transaction=False)
        queued = 0
        for rest, pttl, payload in entries:
            pipe.restore(prefix + rest, max(pttl, 0), payload, replace=True)
            queued += 1
            if queued == RESTORES_PER_TRIP:
                pipe.execute()
                written, queued = written + queued, 0
                pipe = self.client.pipeline(transaction=False)
        if queued:
            pipe.execute()
            written += queued
        return written

    def end_restore(self) -> None:
        self.client.delete(self.keys.restoring)
        self.register_namespace()

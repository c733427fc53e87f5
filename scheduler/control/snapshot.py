"""Snapshot files: a namespace's whole state in one file (``sched snapshot save/restore``).

The file is JSON lines, gzip-compressed when its name ends in ``.gz``: a header, one line
per key, and a trailer that says how many keys came (a file cut short is refused whole)::

    {"sched_snapshot": 1, "namespace": "prod", "layout": 1, "saved_at": 1795305669501,
     "mark": "1795305669501-3|812|640|96|12", "redis_version": "7.0.15"}
    {"key": "task:web.0", "ttl": -1, "dump": "<base64 of the key's DUMP payload>"}
    ...
    {"end": true, "keys": 2329}

Key names are kept without their ``sched:{ns}:`` prefix, so a snapshot loads under any
namespace's name: no value of a namespace names its namespace or a key's full name, so
nothing inside the payloads needs renaming. ``layout`` is the version of the key layout
the namespace was written in (:meth:`Store.key_layout`); a snapshot of a layout newer
than this code's is refused. A DUMP payload loads on a Redis of the same or a newer
version.

Saving reads the namespace page by page under its change mark
(``scheduler/state/snapshots.py``) into a spool and, when the namespace changed
meanwhile, reads it again, up to ``tries`` times; a namespace that changes all along
(workers placing, agents starting and ending tasks) is then read once more with the
server's writes paused (``CLIENT PAUSE ... WRITE``: writers wait, as through a short
stall of Redis, for about as long as the read takes). The file is written (through a
temporary file beside it, then renamed) only from a read that was whole. Restoring reads
the whole file once to check it before it writes anything.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import os
import struct
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Iterator

import orjson
import redis

from scheduler.model.errors import SpecError
from scheduler.state.snapshots import KEY_LAYOUT, ChangedWhileRead, Entry
from scheduler.state.store import Store

FORMAT = 1  # the file's own version
TRIES = 3  # reads while the namespace works on, before one with its writes paused
RETRY_PAUSE_S = 0.05  # times the try's number
MAX_PAUSE_MS = 5000  # how long that read may hold writes at most


class BadSnapshot(SpecError):
    """The file is not a whole snapshot this sched reads (damaged, cut short, foreign, of
    a newer format or key layout): refused before anything is written."""


class NamespaceBusy(SpecError):
    """The namespace changed during every read: no snapshot was written."""

    exit_code = 1


@dataclass(frozen=True)
class Header:
    namespace: str
    layout: int
    saved_at: int
    mark: str
    redis_version: str

    @property
    def identity(self) -> str:
        """What names this snapshot in a restore's marker, so that restoring the same file
        again finishes a restore that was cut short."""
        return hashlib.sha256(f"{self.namespace}|{self.saved_at}|{self.mark}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Summary:
    """What a save wrote or a restore loaded."""

    namespace: str  # the namespace saved, or restored into
    keys: int
    saved_at: int  # when the snapshot was taken (ms)
    layout: int
    source_namespace: str  # the namespace the snapshot was taken of
    tries: int = 1  # reads a save needed
    paused_ms: int = 0  # how long writes were paused for the last (0: not paused)

    def as_dict(self) -> dict:
        return asdict(self)


def _open(path: Path, mode: str) -> IO[bytes]:
    return gzip.open(path, mode) if path.name.endswith(".gz") else open(path, mode)


# ----------------------------------------------------------------------------- saving
def save(store: Store, target: str | Path | IO[bytes], tries: int = TRIES, max_pause_ms: int = MAX_PAUSE_MS) -> Summary:
    """Write the namespace of ``store`` to ``target`` (a path, or a binary file open for
    writing) as of one moment: up to ``tries`` reads while the namespace works on, then,
    if each met a change and ``max_pause_ms`` > 0, one more with the server's writes
    paused for at most that long (at once, when the namespace keeps no event stream: its
    change mark would miss what the scripts announce). Raises :class:`NamespaceBusy`
    when no read was whole, SpecError when the namespace cannot be saved."""
    namespace = store.keys.namespace
    if isinstance(target, (str, Path)):
        _check_writable(Path(target))  # before reading anything
    if store.restore_marker() is not None:
        raise SpecError(f"namespace {namespace} holds a restore that did not finish; run the same "
                        f"`sched snapshot restore` again to finish it, then save.")
    streamless = store.stream.maxlen() == 0
    if streamless and max_pause_ms <= 0:
        raise SpecError(f"namespace {namespace} keeps no event stream, whose position tells a read that nothing "
                        f"changed meanwhile, so it is read with writes paused, which --max-pause 0 forbids; give "
                        f"a pause, or keep events (`sched events keep 100000`).")
    plain = 0 if streamless else tries
    for attempt in range(1, plain + 2):
        paused = attempt > plain
        if paused and max_pause_ms <= 0:
            break
        with tempfile.TemporaryFile() as spool:
            started = time.monotonic()
            read = _read_paused(store, spool, max_pause_ms, plain) if paused else _read_once(store, spool)
            took_ms = int((time.monotonic() - started) * 1000)
            if read is None or (paused and took_ms >= max_pause_ms):  # the pause may have ended under it
                if not paused:
                    time.sleep(RETRY_PAUSE_S * attempt)
                continue
            header, count = read
            _write(target, header, spool, count)
            return Summary(namespace, count, header.saved_at, header.layout, namespace, attempt,
                           max(1, took_ms) if paused else 0)
    if max_pause_ms > 0:
        raise NamespaceBusy(f"namespace {namespace} changed during each of {plain} reads, and its read with writes "
                            f"paused outlasted the pause ({max_pause_ms} ms), so no snapshot was written; give a "
                            f"longer --max-pause.")
    raise NamespaceBusy(f"namespace {namespace} changed during each of {plain} reads, so no snapshot was written; "
                        f"save it at a quieter moment, or let it pause writes for one read (--max-pause).")


def _read_paused(store: Store, spool: IO[bytes], max_pause_ms: int, plain: int) -> tuple[Header, int] | None:
    """:func:`_read_once` with the server's writes paused."""
    try:
        with store.writes_paused(max_pause_ms):
            return _read_once(store, spool)
    except redis.ResponseError as exc:
        if "NOPERM" not in str(exc):
            raise
        raise NamespaceBusy(f"namespace {store.keys.namespace} "
                            f"{'keeps no event stream' if plain == 0 else f'changed during each of {plain} reads'}, "
                            f"and this Redis user may not pause writes (CLIENT PAUSE) for a read; save it as a user "
                            f"that may.") from None


def _read_once(store: Store, spool: IO[bytes]) -> tuple[Header, int] | None:
    """The namespace's keys in ``spool`` as they come (raw: length-prefixed name, TTL and
    payload, so that a read with writes paused does no more than it must): (header, how
    many), or None when it changed during the read."""
    count = 0
    chunk: list[bytes] = []

    def write(entry: Entry) -> None:
        nonlocal count
        rest, pttl, payload = entry
        name = rest.encode()
        chunk.append(_RAW.pack(len(name), pttl, len(payload)) + name + payload)
        count += 1
        if len(chunk) >= 1024:
            spool.write(b"".join(chunk))
            chunk.clear()

    saved_at, layout, version = store.now_ms(), store.key_layout(), store.redis_version()
    try:
        mark = store.dump_namespace(write)
    except ChangedWhileRead:
        return None
    spool.write(b"".join(chunk))
    return Header(store.keys.namespace, layout, saved_at, mark, version), count


_RAW = struct.Struct(">IqI")  # name length, PTTL, payload length


def _lines(spool: IO[bytes]) -> Iterator[bytes]:
    """The spool's entries as the file's lines."""
    spool.seek(0)
    while head := spool.read(_RAW.size):
        name_length, pttl, payload_length = _RAW.unpack(head)
        name, payload = spool.read(name_length).decode(), spool.read(payload_length)
        yield orjson.dumps({"key": name, "ttl": pttl, "dump": base64.b64encode(payload).decode()}) + b"\n"


def _write(target: str | Path | IO[bytes], header: Header, spool: IO[bytes], count: int) -> None:
    def copy(out: IO[bytes]) -> None:
        out.write(orjson.dumps({"sched_snapshot": FORMAT, **asdict(header)}) + b"\n")
        batch: list[bytes] = []
        for line in _lines(spool):
            batch.append(line)
            if len(batch) >= 1024:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))
        out.write(orjson.dumps({"end": True, "keys": count}) + b"\n")

    if not isinstance(target, (str, Path)):
        copy(target)
        target.flush()
        return
    path = Path(target)
    if path.exists() and not path.is_file():  # a device or a pipe (/dev/null, a FIFO): written, never replaced
        try:
            with _open(path, "wb") as out:
                copy(out)
        except OSError as exc:
            raise SpecError(f"cannot write the snapshot to {path}: {exc.strerror or exc}.") from None
        return
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gz" if path.name.endswith(".gz") else "",
                                             dir=path.parent)
    except OSError as exc:
        raise SpecError(f"cannot write the snapshot to {path}: {exc.strerror or exc}.") from None
    os.close(handle)
    try:
        with _open(Path(temporary), "wb") as out:
            copy(out)
        os.replace(temporary, path)
    except OSError as exc:  # the disk filled up, say: the file it was to replace is left as it was
        raise SpecError(f"cannot write the snapshot to {path}: {exc.strerror or exc}.") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _check_writable(path: Path) -> None:
    """One sentence, before the namespace is read, when ``path`` cannot be written."""
    folder = path.parent
    if not folder.is_dir():
        raise SpecError(f"cannot write the snapshot to {path}: folder {folder} does not exist.")
    if path.is_dir():
        raise SpecError(f"cannot write the snapshot to {path}: it is a folder; name a file in it.")
    if not os.access(folder, os.W_OK):
        raise SpecError(f"cannot write the snapshot to {path}: folder {folder} is not writable.")


# ----------------------------------------------------------------------------- restoring
def read_header(source: Path) -> tuple[Header, int]:
    """Check the whole file (every line an entry, the trailer's count right) and return its
    header and how many keys it holds; SpecError naming the file and line otherwise."""
    count, header = 0, None
    try:
        with _open(source, "rb") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise BadSnapshot(f"{source}, line {number}: not a snapshot line (JSON); is it a file of "
                                      f"`sched snapshot save`?") from None
                if number == 1:
                    header = _header(source, record)
                elif isinstance(record, dict) and record.get("end") is True:
                    if record.get("keys") != count or next(lines, None) is not None:
                        raise BadSnapshot(f"{source}: the snapshot says it holds {record.get('keys')} keys but "
                                          f"{count} came before its end; it is damaged.")
                    return header, count
                else:
                    _entry(source, number, record)
                    count += 1
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise BadSnapshot(f"cannot read the snapshot {source}: {exc}.") from None
    if header is None:
        raise BadSnapshot(f"{source} is empty, not a snapshot.")
    raise BadSnapshot(f"{source} ends before its last line: the snapshot was cut short ({count} keys read).")


def _header(source: Path, record) -> Header:
    if not isinstance(record, dict) or record.get("sched_snapshot") is None:
        raise BadSnapshot(f"{source} is not a snapshot of `sched snapshot save` (its first line is no snapshot "
                          f"header).")
    if record["sched_snapshot"] != FORMAT:
        raise BadSnapshot(f"{source} is a snapshot of format {record['sched_snapshot']}; this sched reads format "
                          f"{FORMAT}: use the sched that saved it, or a newer one.")
    try:
        header = Header(str(record["namespace"]), int(record["layout"]), int(record["saved_at"]), str(record["mark"]),
                        str(record.get("redis_version", "")))
    except (KeyError, TypeError, ValueError):
        raise BadSnapshot(f"{source}: its header lacks the namespace, layout, time or mark.") from None
    if header.layout > KEY_LAYOUT:
        raise BadSnapshot(f"{source} holds key layout {header.layout}, newer than this sched knows ({KEY_LAYOUT}); "
                          f"restore it with a newer sched.")
    return header


def _entry(source: Path, number: int, record) -> Entry:
    try:
        rest, ttl, payload = record["key"], int(record["ttl"]), base64.b64decode(record["dump"], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise BadSnapshot(f"{source}, line {number}: not a key of a snapshot (key, ttl and dump).") from None
    if not isinstance(rest, str) or not rest or "{" in rest or "}" in rest:
        raise BadSnapshot(f"{source}, line {number}: {rest!r} is not a key name of a namespace.")
    return rest, ttl, payload


def entries(source: Path) -> Iterator[Entry]:
    """The keys of a file :func:`read_header` has checked."""
    with _open(source, "rb") as lines:
        for number, line in enumerate(lines, 1):
            record = orjson.loads(line)
            if number > 1 and not record.get("end"):
                yield _entry(source, number, record)


def restore(store: Store, source: Path, header: Header, count: int) -> Summary:
    """Load the checked snapshot into the (empty) namespace of ``store``. A namespace
    holding anything but a restore of this same snapshot that was cut short is refused in
    one sentence; a restore that fails on a key removes what it wrote."""
    namespace = store.keys.namespace
    marker = store.restore_marker()
    if marker is None:
        found = store.key_count()
        if found:
            raise SpecError(f"namespace {namespace} is not empty ({found} keys); a snapshot loads only into an empty "
                            f"namespace: give another with --namespace.")
    elif marker != header.identity:
        raise SpecError(f"namespace {namespace} holds an unfinished restore of another snapshot; finish it by restoring "
                        f"that snapshot again, or give another namespace with --namespace.")
    if not store.begin_restore(header.identity):
        raise SpecError(f"another restore into namespace {namespace} began meanwhile; give another namespace with "
                        f"--namespace.")
    try:
        written = store.restore_entries(entries(source))
    except redis.ResponseError as exc:
        store.clear_namespace()
        raise SpecError(f"the snapshot {source} does not load into this Redis ({exc}); it was saved from Redis "
                        f"{header.redis_version or 'of an unknown version'}, so restore it into that version or a newer "
                        f"one; nothing of it was kept.") from None
    if written != count:  # the file changed under us
        store.clear_namespace()
        raise SpecError(f"the snapshot {source} changed while it was restored; nothing of it was kept.")
    store.end_restore()
    return Summary(namespace, written, header.saved_at, header.layout, header.namespace)

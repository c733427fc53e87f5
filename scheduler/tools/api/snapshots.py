"""``/v1/snapshot``: the namespace's whole state as a file, and back (``sched snapshot
save`` and ``restore``; ``scheduler/control/snapshot.py`` says what a snapshot is).

``GET`` answers the snapshot file itself, JSON lines, as of one moment (gzip-compressed
on the way when the client accepts it). ``POST`` takes one (JSON lines, or the gzip file
``sched snapshot save FILE.gz`` writes) of at most :data:`MAX_SNAPSHOT` bytes once
decompressed, into the request's namespace, which must be empty. A save that pauses the
server's writes (``max_pause``) holds every namespace's, so asking for one takes a
token of every namespace.
"""

from __future__ import annotations

import gzip
import re
import tempfile
from datetime import datetime, timezone

from scheduler.control.snapshot import BadSnapshot
from scheduler.model.errors import SpecError
from scheduler.tools.api import schemas as s
from scheduler.tools.api.access import Guard
from scheduler.tools.api.problems import Problem
from scheduler.tools.api.route import OPERATOR, Call, File, Param, get, post

MAX_SNAPSHOT = 1 << 30  # bytes of JSON lines a restore over HTTP takes (about 2.9 million keys at 360 bytes a key)
MAX_PAUSE_S = 10
LINES = "application/x-ndjson"
FILE = {"type": "string", "description": "The snapshot: JSON lines, a header, one line per key and a trailer "
                                         "(docs/reliability.md, Snapshots), as `sched snapshot save FILE` writes."}


def save_snapshot(call: Call):
    pause = call.query["max_pause"]
    if pause > 0:
        Guard.allow(call.access, call.sched.namespace, OPERATOR, True,
                    "pause the server's writes, every namespace's, for a snapshot (max_pause)")
    spool = tempfile.TemporaryFile(prefix="sched-snapshot-")
    encoding = "gzip" if _accepts_gzip(call.headers.get("accept-encoding", "")) else ""
    try:
        out = gzip.GzipFile(fileobj=spool, mode="wb", compresslevel=6, mtime=0) if encoding else spool
        summary = call.sched.snapshot_save(out, call.query["tries"], pause)
        if encoding:
            out.close()  # the gzip trailer; the spool stays open
        spool.seek(0)
    except SpecError as exc:
        spool.close()
        raise Problem(409, _for_http(str(exc))) from None
    except BaseException:
        spool.close()
        raise
    when = datetime.fromtimestamp(summary["saved_at"] / 1000, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return File(spool, f"{summary['namespace']}-{when}.snap.jsonl", encoding)


def restore_snapshot(call: Call):
    try:
        return call.sched.snapshot_restore(call.body, namespace=call.sched.namespace)
    except BadSnapshot as exc:  # the file: nothing was written
        raise Problem(422, _for_http(str(exc), str(call.body))) from None
    except SpecError as exc:  # the namespace: not empty, another restore in it
        raise Problem(409, _for_http(str(exc), str(call.body))) from None


def _accepts_gzip(header: str) -> bool:
    for part in header.lower().split(","):
        name, _, params = part.partition(";")
        if name.strip() in ("gzip", "*"):
            quality = re.search(r"q\s*=\s*([0-9.]+)", params)
            try:
                return quality is None or float(quality.group(1)) > 0
            except ValueError:
                return False
    return False


def _for_http(sentence: str, path: str = "") -> str:
    """The CLI's sentence, with the request's words for the CLI's options and file."""
    if path:
        sentence = sentence.replace(f"the snapshot {path}", "the uploaded snapshot").replace(path,
                                                                                            "the uploaded snapshot")
    return sentence.replace("with --namespace", "with ?namespace=").replace("--max-pause", "max_pause")


ROUTES = [
    get("/v1/snapshot", save_snapshot, "Download the namespace's whole state, as of one moment", FILE, media=LINES,
        role=OPERATOR, refusals=(409,), lasting=True,
        query=(Param("tries", {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                     "reads while the namespace works on, before one with writes paused"),
               Param("max_pause", {"type": "number", "minimum": 0, "maximum": MAX_PAUSE_S, "default": 0},
                     "when each of those reads met a change: pause the server's writes (every namespace's) for at "
                     "most this many seconds for one more read; above 0 takes a token of every namespace")),
        description="`sched snapshot save`: the file itself (Content-Disposition names it), JSON lines, "
                    "gzip-compressed on the way with `Accept-Encoding: gzip`. Nothing is sent before a read was "
                    "whole: a namespace that changed during every read is a 409."),
    post("/v1/snapshot", restore_snapshot, "Load a snapshot into the namespace, which must be empty", s.SNAPSHOT,
         role=OPERATOR, upload=MAX_SNAPSHOT, refusals=(409, 422), lasting=True,
         description="`sched snapshot restore`: JSON lines (`application/x-ndjson`), or gzip of them "
                     "(`application/gzip`, or `Content-Encoding: gzip`), at most 1 GiB once decompressed (413). "
                     "A damaged, cut short or foreign file is a 422, a namespace that is not empty a 409, both "
                     "before anything is written; a restore cut short is finished by sending the same file again."),
]

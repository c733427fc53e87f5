"""Logging for the long-running processes (``sched worker``, ``sched agent``): one setup,
two formats.

``text`` (the default) is one readable line per record; ``json`` is one JSON object per
line (``time``, ``level``, ``logger``, ``message`` and the record's fields) for log
shippers. A record's fields are passed as ``log.info("...", extra={"fields": {...}})``.
In text, a message that takes arguments already says what matters in words (``worker-0
started: namespace default, Redis ...``), so its fields are left to the JSON format; a
message without arguments (the periodic summaries) is followed by its fields as
``key=value``.

:func:`configure` also puts the choice in the environment (``SCHED_LOG_LEVEL``,
``SCHED_LOG_FORMAT``), so that worker processes spawned by ``--concurrency`` and agents
started by ``sched demo`` log the same way: they call :func:`configure` with no arguments.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from datetime import datetime, timezone

import orjson

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
ENV_LEVEL, ENV_FORMAT = "SCHED_LOG_LEVEL", "SCHED_LOG_FORMAT"
SUMMARY_EVERY_S = 10.0

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "fields"}


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")


def _fields(record: logging.LogRecord) -> dict:
    fields = dict(getattr(record, "fields", None) or {})
    fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": _time(record), "level": record.levelname.lower(), "logger": record.name,
                 "message": record.getMessage(), **_fields(record)}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record)} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        fields = _fields(record) if not record.args else None  # with arguments, the words say it
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Log to stderr at ``level`` in ``fmt`` (default: the environment's choice, else info
    and text), and pass the choice on to child processes through the environment."""
    level = (level or os.environ.get(ENV_LEVEL) or "info").lower()
    fmt = (fmt or os.environ.get(ENV_FORMAT) or "text").lower()
    if level not in LEVELS:
        level = "info"
    if fmt not in FORMATS:
        fmt = "text"
    os.environ[ENV_LEVEL], os.environ[ENV_FORMAT] = level, fmt
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("rq", "rq.worker", "urllib3"):  # RQ logs every job at info; its warnings still show
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class Summary:
    """Counts added as they happen, logged as one line about every ``every_s`` seconds
    (only when something happened): a busy worker logs 6 lines a minute, not one per batch."""

    def __init__(self, log: logging.Logger, message: str, every_s: float = SUMMARY_EVERY_S):
        self.log, self.message, self.every_s = log, message, every_s
        self.counts: dict[str, int] = {}
        self.since = time.monotonic()

    def add(self, **counts: int) -> None:
        for name, value in counts.items():
            self.counts[name] = self.counts.get(name, 0) + value
        self.flush()

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.since < self.every_s:
            return
        if any(self.counts.values()):
            fields = {**self.counts, "seconds": round(now - self.since, 1)}
            self.log.info(self.message, extra={"fields": fields})
        self.counts = {}
        self.since = now

"""The two log formats of the long-running processes: a text line says a thing once (its
fields follow as key=value only where the message does not already say them, and empty
ones not at all), and a JSON line carries every field either way."""

from __future__ import annotations

import logging

import orjson

from scheduler.tools.logs import JsonFormatter, TextFormatter


def record(message: str, args: tuple, fields: dict) -> logging.LogRecord:
    entry = logging.LogRecord("sched.worker", logging.INFO, __file__, 1, message, args, None)
    entry.fields = fields
    return entry


def test_a_start_line_says_everything_once():
    fields = {"namespace": "default", "redis": "unix:///tmp/r.sock", "metrics_port": None, "batch_size": 512,
              "pid": 42}
    start = record("%s started: namespace %s, Redis %s, %s", ("worker-0", "default", "unix:///tmp/r.sock",
                                                               "no metrics port"), fields)
    text = TextFormatter().format(start)
    assert text.endswith(" info    sched.worker: worker-0 started: namespace default, Redis unix:///tmp/r.sock, "
                         "no metrics port batch_size=512 pid=42"), text
    assert text.count("unix:///tmp/r.sock") == 1 and text.count("default") == 1 and "metrics_port" not in text
    assert orjson.loads(JsonFormatter().format(start))["batch_size"] == 512


def test_a_summary_shows_its_counts():
    summary = record("worker-0: scheduling", (), {"placed": 12, "seconds": 10.0})
    assert TextFormatter().format(summary).endswith("sched.worker: worker-0: scheduling placed=12 seconds=10.0")
    line = orjson.loads(JsonFormatter().format(summary))
    assert line["message"] == "worker-0: scheduling" and line["placed"] == 12

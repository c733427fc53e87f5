"""Checking what a browser or script sends, before anything is read or written.

Each function takes the raw text of a query, path or form value and returns it checked,
or raises :class:`BadInput` with one sentence saying what is wrong. Nothing here reads or
writes Redis, so bad input can never cause a write.
"""

from __future__ import annotations

import re

from scheduler.model import AVAILABILITIES, MAX_REPLICAS, check_job_id, check_node_name
from scheduler.model.errors import SpecError
from scheduler.state.app import App
from scheduler.state.keys import Keys
from scheduler.tools.ui import data

MAX_TEXT = 256  # longer values are refused before any check quotes them back
_TASK_INDEX_RE = re.compile(r"^[0-9]{1,9}$")
_REPLICAS_RE = re.compile(r"^[0-9]{1,7}$")
_LOCAL_PATH_RE = re.compile(r"^/(?![/\\])[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*$")


class BadInput(Exception):
    """A request the dashboard refuses with a 4xx; the message is one sentence."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _text(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadInput(f"{what} is missing.")
    if len(value) > MAX_TEXT:
        raise BadInput(f"{what} is too long (at most {MAX_TEXT} characters).")
    return value


def namespace(value: str | None, default: str) -> str:
    """A namespace as :class:`Keys` accepts it (non-empty, no braces, colons or spaces),
    printable; an absent or empty value means ``default``."""
    if value is None or value == "":
        return default
    value = _text(value, "the namespace")
    if not value.isprintable():
        raise BadInput("the namespace must be printable text.")
    try:
        Keys(value)
    except ValueError:
        raise BadInput("the namespace must be free of braces, colons and spaces.") from None
    return value


def node_name(value: str) -> str:
    try:
        return check_node_name(_text(value, "the node name"))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def job_id(value: str) -> str:
    try:
        return check_job_id(_text(value, "the job id"))
    except SpecError as exc:
        raise BadInput(str(exc)) from None


def task_id(value: str) -> str:
    """``<job id>.<index>``, as the scheduler names every task."""
    value = _text(value, "the task id")
    job, dot, index = value.rpartition(".")
    if not dot or not _TASK_INDEX_RE.match(index):
        raise BadInput(f"task id {value!r} is not valid; a task id is <job id>.<index>, e.g. web.0.")
    job_id(job)
    return value


def replicas(value) -> int:
    """A whole number from 0 to MAX_REPLICAS, as form text or a JSON integer."""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        text = ""
    if not _REPLICAS_RE.match(text) or int(text) > MAX_REPLICAS:
        raise BadInput(f"replicas must be a whole number from 0 to {MAX_REPLICAS}.")
    return int(text)


def availability(value) -> str:
    if value not in AVAILABILITIES:
        raise BadInput(f"availability must be one of {', '.join(AVAILABILITIES)}.")
    return value


def local_path(value: str | None, default: str = "/") -> str:
    """Where to send a browser after a form: a path on this site, never another site."""
    if isinstance(value, str) and len(value) <= 2 * MAX_TEXT and _LOCAL_PATH_RE.match(value):
        return value
    return default


def scoped_app(request) -> App:
    """The App for the request's ``?ns=`` (checked), sharing the dashboard's connection."""
    base = request.app.state.sched
    return data.namespace_app(base, namespace(request.query_params.get("ns"), base.keys.namespace))

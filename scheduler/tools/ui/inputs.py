"""Checking what a browser or script sends, before anything is read or written.

Each function takes the raw text of a query, path or form value and returns it checked,
or raises :class:`BadInput` with one sentence saying what is wrong. Nothing here reads or
writes Redis, so bad input can never cause a write.
"""

from __future__ import annotations

import re

from starlette.convertors import Convertor, register_url_convertor

from scheduler.model import AVAILABILITIES, MAX_REPLICAS, check_job_id, check_node_name
from scheduler.model.errors import SpecError
from scheduler.state.app import App
from scheduler.state.keys import Keys
from scheduler.tools.ui import data

MAX_TEXT = 256  # longer values are refused before any check quotes them back
_TASK_INDEX_RE = re.compile(r"^[0-9]{1,9}$")
_REPLICAS_RE = re.compile(r"^[0-9]{1,7}$")
_VERSION_RE = re.compile(r"^[1-9][0-9]{0,8}$")
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


def deployment_id(value: str) -> str:
    """``<job id>@<version>``, as the scheduler names every deployment."""
    value = _text(value, "the deployment id")
    job, at, number = value.rpartition("@")
    if not at or not _VERSION_RE.match(number):
        raise BadInput(f"deployment id {value!r} is not valid; a deployment id is <job id>@<version>, e.g. web@2.")
    job_id(job)
    return value


def deployment_action(value: str) -> str:
    if value not in data.DEPLOYMENT_ACTIONS:
        raise BadInput(f"there is no deployment action {value[:40]!r}; the actions are "
                       f"{', '.join(data.DEPLOYMENT_ACTIONS)}.", status=404)
    return value


def version(value, what: str = "version") -> int:
    """A job version: a whole number from 1, as form or query text or a JSON integer."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _VERSION_RE.match(text):
        raise BadInput(f"{what} must be a job version, a whole number from 1.")
    return int(text)


def compare(params) -> tuple[int, int] | None:
    """Two versions of a job to compare (``?from=1&to=3``), or None when neither is given."""
    old, new = params.get("from"), params.get("to")
    if not old and not new:
        return None
    if not old or not new:
        raise BadInput("to compare two versions, give both from and to.")
    return version(old, "from"), version(new, "to")


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


class _IdConvertor(Convertor):
    """A route's ``{job_id:job}`` or ``{task_id:task}``: one path segment, or a launch's id
    with its one "/" (``nightly/periodic-1700000000``), so that ``/api/jobs/web/stop`` stays
    the stop action of job ``web``, never a job ``web/stop``."""

    def __init__(self, regex: str):
        self.regex = regex

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


_LAUNCH = r"(?:/(?:periodic-[0-9]+|dispatch-[0-9]+-[0-9a-f]+))?"
register_url_convertor("job", _IdConvertor(r"[^/]+" + _LAUNCH))
register_url_convertor("task", _IdConvertor(r"[^/]+" + _LAUNCH + r"(?:\.[^/]+)?"))


def with_launch_ids(path: str) -> str:
    """A route's path with its job and task ids taking a launch's "/" (see ``_IdConvertor``)."""
    return path.replace("{job_id}", "{job_id:job}").replace("{task_id}", "{task_id:task}")

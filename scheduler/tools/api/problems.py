"""Errors as problem documents (RFC 9457): ``application/problem+json`` with the HTTP
status, its title, and in ``detail`` the very sentence the CLI prints after ``Error:``.

Where a :class:`SpecError` comes from says which status it gets: raised while a request
is read and checked (a job spec, a field's value) it is **422**, since nothing was done;
raised by the action itself (stopping a stopped job, removing a node that runs tasks,
promoting a finished deployment) it is **409**, a refusal given the state of things.
"""

from __future__ import annotations

from contextlib import contextmanager
from http import HTTPStatus

import orjson
import redis
from starlette.responses import Response

from scheduler.model.errors import NotFound, PermissionDenied, RedisUnavailable, SchedError, SpecError
from scheduler.tools.ui.inputs import BadInput

MEDIA_TYPE = "application/problem+json"


class Problem(Exception):
    """A request answered with ``status`` and the one sentence ``detail``."""

    def __init__(self, status: int, detail: str, headers: dict | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


@contextmanager
def unprocessable():
    """Checking what the request asks for: a SpecError here is a 422."""
    try:
        yield
    except SpecError as exc:
        raise Problem(422, str(exc)) from None


def problem_of(exc: BaseException) -> Problem:
    """The problem an error raised while serving a request is."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, BadInput):
        return Problem(exc.status, str(exc))
    if isinstance(exc, NotFound):
        return Problem(404, str(exc))
    if isinstance(exc, SpecError):
        return Problem(409, str(exc))
    if isinstance(exc, PermissionDenied):
        return Problem(403, str(exc))
    if isinstance(exc, (RedisUnavailable, redis.RedisError)):
        return Problem(503, f"Redis is not available: {str(exc).rstrip('.')}.")
    if isinstance(exc, SchedError):
        return Problem(400, str(exc))
    raise exc


def response(problem: Problem, instance: str = "") -> Response:
    body = {"type": "about:blank", "title": HTTPStatus(problem.status).phrase, "status": problem.status,
            "detail": problem.detail}
    if instance:
        body["instance"] = instance
    return Response(orjson.dumps(body), status_code=problem.status, media_type=MEDIA_TYPE, headers=problem.headers)

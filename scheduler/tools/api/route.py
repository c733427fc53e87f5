"""What a route of the API is, and how every request is served.

Each noun's module lists its routes (:class:`Route`): method, path, the function that
does the work (``run``, given a :class:`Call`: a ``Client`` of the request's namespace
acting as the token, and the checked path, query and body), the role it takes, and the
JSON Schemas of its query, body and answer. The same list makes the Starlette routes
(:func:`endpoint`) and the OpenAPI document (:mod:`openapi`), so the two cannot drift.

Serving a request, in order: the token (:mod:`access`: 401, 429), the namespace and role
(403), the path and query parameters (400), the body (413, 415, 400 for JSON that does
not parse, 422 for a value the schema or the model refuses), then ``run`` in a worker
thread, whose errors become problem documents (:mod:`problems`). Nothing is written
before every check has passed.

A route may also answer a file (:class:`File`, streamed: a snapshot) and take one
(``upload``: JSON lines, or gzip of them, spooled to a temporary file within a bound
before ``run`` sees its path).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import os
import re
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

from scheduler.client import Client
from scheduler.model.errors import SpecError
from scheduler.model import job_schema, names
from scheduler.model.names import check_tenant
from scheduler.state import read_steps
from scheduler.state.api_tokens import ROLES
from scheduler.tools.api import problems, schemas, sse
from scheduler.tools.api.access import Access, Guard
from scheduler.tools.api.problems import Problem
from scheduler.tools.ui import data, inputs
from scheduler.tools.ui.api import JSON

VIEWER, SUBMITTER, OPERATOR = ROLES
MAX_BODY = 8 * 1024 * 1024  # bytes of a request body (a bulk submit of many jobs fits)
SMALL_BODY = 65_536  # bytes of a body read before its token is checked (larger ones wait for the check)
JSON_TYPES = ("application/json",)
TEXT_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "application/x-ndjson", "application/jsonl",
              "text/plain")
LINES_TYPES = ("application/x-ndjson", "application/jsonl")  # a file a route takes: JSON lines...
GZIP_TYPE = "application/gzip"  # ...or gzip of them (as `sched snapshot save FILE.gz` writes)
FILE_CHUNK = 1 << 20  # bytes of a file answer sent at a time


@dataclass(frozen=True)
class Param:
    """A query parameter: its JSON Schema (``string`` with an optional ``enum``,
    ``integer`` or ``number`` with bounds, ``boolean``, or an ``array`` of strings given
    by repeating the parameter)."""

    name: str
    schema: dict
    description: str
    required: bool = False


def _tenant(value: str) -> str:
    try:
        return check_tenant(value)
    except SpecError as exc:
        raise inputs.BadInput(str(exc)) from None


def _pool(value: str) -> str:
    from scheduler.model.pools import check_pool_name

    try:
        return check_pool_name(value)
    except SpecError as exc:
        raise inputs.BadInput(str(exc)) from None


def _move_id(value: str) -> str:
    plan, dash, index = value.partition("-")
    if not (dash and plan.isdigit() and index.isdigit() and len(value) <= 24):
        raise inputs.BadInput(f"move id {value[:40]!r} is not valid; a move id is <plan>-<index>, e.g. 3-1.")
    return value


ID = f"(?:{job_schema.JOB_ID}|{job_schema.CHILD_ID})"
JOB_ID = {"type": "string", "pattern": f"^{ID}$", "maxLength": inputs.MAX_TEXT}
NODE_NAME = {"type": "string", "pattern": f"^{names._NODE_NAME_RE.pattern}$", "maxLength": inputs.MAX_TEXT}
# Path parameters, by name: schema, description, and the check of their text.
PATH_PARAMS: dict[str, tuple[dict, str, Callable[[str], str]]] = {
    "name": ({"type": "string", "pattern": f"^{names._NODE_NAME_RE.pattern}$"}, "a node's name", inputs.node_name),
    "job_id": ({"type": "string", "pattern": f"^{ID}$"}, "a job's id", inputs.job_id),
    "task_id": ({"type": "string", "pattern": f"^{ID}\\.[0-9]{{1,9}}$"}, "a task's id: <job id>.<index>",
                inputs.task_id),
    "deployment_id": ({"type": "string", "pattern": f"^{ID}@[1-9][0-9]{{0,8}}$"},
                      "a deployment's id: <job id>@<version>", inputs.deployment_id),
    "tenant": ({"type": "string", "pattern": f"^{names._TENANT_RE.pattern}$"}, "a tenant's name", _tenant),
    "move_id": ({"type": "string", "pattern": r"^[1-9][0-9]{0,11}-[1-9][0-9]{0,3}$"}, "a move's id: <plan>-<index>",
                _move_id),
    "pool": ({"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"}, "a pool's name", _pool),
}
NAMESPACE = Param("namespace", {"type": "string", "pattern": f"^(?:{names._NAMESPACE_RE.pattern})?$"},
                  "The namespace to act in; by default the token's own (for a token of every namespace, or without "
                  "tokens, the server's).")


@dataclass(frozen=True)
class Answer:
    """A success with another status than the route's first (201 for a new job), or with
    headers (``X-Sched-Next-Token``); a blocking route's with ``newest_event``, the id of
    the namespace's newest event as of the state it answers (read with it, or before it):
    its ``X-Sched-Index``."""

    status: int
    body: Any
    headers: dict = field(default_factory=dict)
    newest_event: str | None = None


@dataclass(frozen=True)
class File:
    """A success whose body is a file's bytes, streamed from ``handle`` (a binary file
    at its start, closed once sent), ``gzip``-compressed for the way when so encoded."""

    handle: IO[bytes]
    filename: str
    encoding: str = ""


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    run: Callable
    summary: str
    answer: dict | None  # the JSON Schema of a success's body (None: a stream of server-sent events)
    role: str = VIEWER
    query: tuple[Param, ...] = ()
    body: dict | None = None  # the JSON Schema of the request's body (None: it takes none)
    body_required: bool = True  # False: a request may send none (every field is optional)
    texts: bool = False  # the body may also be YAML text or JSON lines
    status: tuple[int, ...] = (200,)
    refusals: tuple[int, ...] = ()  # 404, 409, 422 beyond what every route may answer
    every_namespace: bool = False  # takes a token of every namespace
    description: str = ""
    needs_namespace: bool = True  # False: the route reads no namespace (it takes no ?namespace=)
    lasting: bool = False  # may take long (a wait): run in the streams' threads, not the requests'
    media: str = "application/json"  # the media type of a success's body
    upload: int = 0  # takes a file (JSON lines, or gzip of them) of at most this many bytes, once decompressed
    blocking: bool = False  # takes Nomad's blocking query (?index=N&wait=30s) and answers X-Sched-Index
    answer_headers: tuple[str, ...] = ()  # headers a success may carry, beyond X-Sched-Index

    @property
    def operation_id(self) -> str:
        return self.run.__name__

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    @property
    def doing(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class Call:
    """One request, checked: a Client of its namespace acting as its token, and its
    path parameters, query and body."""

    sched: Client
    path: dict[str, str]
    query: dict[str, Any]
    body: Any
    headers: Any
    access: Access


def get(path, run, summary, answer, **options) -> Route:
    return Route("GET", path, run, summary, answer, **options)


def post(path, run, summary, answer, **options) -> Route:
    return Route("POST", path, run, summary, answer, **options)


def put(path, run, summary, answer, **options) -> Route:
    return Route("PUT", path, run, summary, answer, **options)


def delete(path, run, summary, answer, **options) -> Route:
    return Route("DELETE", path, run, summary, answer, **options)


# ----------------------------------------------------------------------------- checks
def query_values(route: Route, params) -> dict[str, Any]:
    """The route's query parameters, checked against their schemas (400 otherwise)."""
    known = {p.name for p in route.query} | {"namespace"}
    for name in params.keys():
        if name not in known:
            raise Problem(400, f"there is no query parameter {name[:40]!r}{_did_you_mean(name, known)}.")
    values: dict[str, Any] = {}
    for param in route.query:
        if param.schema.get("type") == "array":
            given = params.getlist(param.name)
            if param.required and not given:
                raise Problem(400, f"the query parameter {param.name} is missing.")
            for item in given:
                _check_value(param, item, param.schema["items"])
            values[param.name] = tuple(given)
            continue
        raw = params.get(param.name)
        if raw is None:
            if param.required:
                raise Problem(400, f"the query parameter {param.name} is missing.")
            values[param.name] = param.schema.get("default")
            continue
        values[param.name] = _check_value(param, raw, param.schema)
    return values


def _check_value(param: Param, raw: str, schema: dict):
    kind, name = schema.get("type"), param.name
    if len(raw) > inputs.MAX_TEXT:
        raise Problem(400, f"the query parameter {name} is too long (at most {inputs.MAX_TEXT} characters).")
    if kind == "integer":
        low, high = schema.get("minimum", 0), schema.get("maximum")
        if not re.fullmatch(r"-?[0-9]{1,19}", raw) or int(raw) < low or (high is not None and int(raw) > high):
            bound = f"from {low} to {high}" if high is not None else f"of {low} or more"
            raise Problem(400, f"the query parameter {name} must be a whole number {bound}.")
        return int(raw)
    if kind == "number":
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        high = schema.get("maximum")
        if "minimum" in schema:
            low, above = schema["minimum"], value >= schema["minimum"]
        else:
            low = schema.get("exclusiveMinimum", 0)
            above = value > low
        if not above or (high is not None and value > high) or value != value:
            raise Problem(400, f"the query parameter {name} must be a number "
                               + (f"from {low:g}" if "minimum" in schema else f"above {low:g}")
                               + (f" and at most {high:g}." if high is not None else "."))
        return value
    if kind == "boolean":
        if raw not in ("true", "false", "1", "0"):
            raise Problem(400, f"the query parameter {name} must be true or false.")
        return raw in ("true", "1")
    if "enum" in schema and raw not in schema["enum"]:
        raise Problem(400, f"the query parameter {name} must be one of {', '.join(schema['enum'])}"
                           f"{_did_you_mean(raw, schema['enum'])}.")
    if not raw:
        raise Problem(400, f"the query parameter {name} is empty.")
    if "pattern" in schema and not re.search(schema["pattern"], raw):
        raise Problem(400, f"the query parameter {name} {raw[:60]!r} is not valid: {param.description}.")
    return raw


def body_fields(schema: dict, body) -> None:
    """A JSON body against an object schema: the fields it names, their types, those it
    requires (422 with one sentence, the first problem found)."""
    if schema.get("type") != "object" or "properties" not in schema:
        return
    if not isinstance(body, dict):
        raise Problem(422, "the request body must be a JSON object.")
    properties = schema["properties"]
    if schema.get("additionalProperties") is False:
        for name in body:
            if name not in properties:
                raise Problem(422, f"unknown field {str(name)[:40]!r}{_did_you_mean(str(name), properties)}; "
                                   f"the fields are {', '.join(properties)}.")
    for name in schema.get("required", ()):
        if name not in body:
            raise Problem(422, f"the field {name} is missing.")
    for name, value in list(body.items()):
        schema = properties.get(name, {})
        kinds = schema.get("type")
        if kinds is not None and not any(_is(value, kind) for kind in ([kinds] if isinstance(kinds, str) else kinds)):
            wanted = " or ".join(_KIND_WORDS[k] for k in ([kinds] if isinstance(kinds, str) else kinds))
            raise Problem(422, f"the field {name} must be {wanted}.")
        if kinds is not None and "integer" in _kinds(kinds) and "number" not in _kinds(kinds) \
                and isinstance(value, float):
            body[name] = value = int(value)  # 2.0 is the whole number 2, as JSON Schema reads it
        _within(name, schema, value)


def _within(name: str, schema: dict, value) -> None:
    """A field's value against its schema's bounds and pattern (422 naming the field);
    of ``anyOf`` schemas, the one of the value's type."""
    for member in schema.get("anyOf", ()):
        if "type" in member and any(_is(value, kind) for kind in _kinds(member["type"])):
            schema = member
            break
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum")
        if (low is not None and (value < low or ("exclusiveMinimum" in schema and value == low))) \
                or (high is not None and value > high):
            what = "a whole number" if schema.get("type") == "integer" else "a number"
            bound = (f"from {low} to {high}" if high is not None else f"of {low} or more") \
                if "exclusiveMinimum" not in schema else f"above {low}" + (f" and at most {high}" if high else "")
            raise Problem(422, f"{name} must be {what} {bound}.")
    if "enum" in schema and value not in schema["enum"]:
        raise Problem(422, f"{name} must be one of {', '.join(map(str, schema['enum'])) or 'nothing'}.")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise Problem(422, f"{name} {value[:60]!r} is not valid: {schema.get('description', 'see its pattern')}.")


def _kinds(kinds) -> list[str]:
    return [kinds] if isinstance(kinds, str) else list(kinds)


_KIND_WORDS = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false",
               "object": "an object", "array": "a list", "null": "null"}


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return not isinstance(value, bool) and (isinstance(value, int)
                                                or isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "object": dict, "array": list,
                              "null": type(None)}[kind])


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


async def read_body(route: Route, request: Request):
    """The body: parsed JSON, or text for a route that takes YAML or JSON lines."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not kind and not route.body_required and request.headers.get("content-length", "0") == "0":
        kind = JSON_TYPES[0]  # no body at all, where every field is optional
    if kind not in JSON_TYPES and not (route.texts and kind in TEXT_TYPES):
        takes = "application/json" + (", application/yaml or application/x-ndjson" if route.texts else "")
        raise Problem(415, f"send the body as {takes} (Content-Type).")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise Problem(413, f"the request body is larger than {MAX_BODY // (1024 * 1024)} MiB.")
    if kind not in JSON_TYPES:
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(422, "the request body is not UTF-8 text.") from None
    try:
        body = orjson.loads(raw or b"null")
    except orjson.JSONDecodeError as exc:
        raise Problem(400, f"the request body is not valid JSON ({str(exc).split(':')[0]}).") from None
    if not raw and route.body is not None and not route.body_required:
        body = {}  # a POST without a body, where every field is optional
    elif schemas.resolve(route.body or {}).get("type") == "object" and not isinstance(body, dict):
        raise Problem(422, "the request body must be a JSON object.")
    body_fields(schemas.resolve(route.body or {}), body)
    return body


async def read_upload(route: Route, request: Request) -> Path:
    """A file body (JSON lines; gzip of them as ``application/gzip`` or with
    ``Content-Encoding: gzip``), decompressed into a temporary file: its path. Over
    ``route.upload`` bytes once decompressed, a 413 (so a small gzip that inflates
    without end is refused too)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if kind not in (*LINES_TYPES, GZIP_TYPE):
        raise Problem(415, f"send the body as {LINES_TYPES[0]} (JSON lines) or {GZIP_TYPE} (Content-Type).")
    if encoding not in ("identity", "gzip"):
        raise Problem(415, f"the Content-Encoding {encoding[:40]!r} is not taken: send gzip, or none.")
    inflate = zlib.decompressobj(wbits=31) if kind == GZIP_TYPE or encoding == "gzip" else None
    handle, name = tempfile.mkstemp(prefix="sched-upload-")
    size = 0
    try:
        with os.fdopen(handle, "wb") as out:
            async for chunk in request.stream():
                while chunk:
                    if inflate is None:
                        data, chunk = chunk, b""
                    else:
                        if inflate.eof:
                            raise Problem(422, "the request body goes on after the end of its gzip stream.")
                        data = inflate.decompress(chunk, route.upload + 1 - size)
                        chunk = inflate.unconsumed_tail
                    size += len(data)
                    if size > route.upload:
                        bound = f"{route.upload >> 20} MiB" if route.upload >= 1 << 20 else f"{route.upload} bytes"
                        raise Problem(413, f"the request body is larger than {bound}"
                                           f"{' once decompressed' if inflate else ''}.")
                    out.write(data)
        if inflate is not None and not inflate.eof:
            raise Problem(422, "the request body ends before the end of its gzip stream.")
    except zlib.error:
        os.unlink(name)
        raise Problem(422, "the request body is not gzip, as its Content-Type or Content-Encoding says.") from None
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)


# ----------------------------------------------------------------------------- serving
def _admit(route: Route, request: Request) -> tuple[Access, str]:
    """Blocking: the request's access and namespace, or a 401, 403 or 429."""
    guard: Guard = request.app.state.guard
    address = (request.scope.get("client") or ("",))[0]
    access = guard.admit(request.headers.get("authorization"), address)
    return access, _namespace(route, request, access)


def _namespace(route: Route, request: Request, access: Access) -> str:
    """The namespace the request acts in, once its access may (403 otherwise)."""
    base = request.app.state.sched
    asked = request.query_params.get("namespace") if route.needs_namespace else None
    if asked is None or asked == "":
        namespace = access.namespace if access.namespace != "*" else base.keys.namespace
    else:
        namespace = inputs.namespace(asked, base.keys.namespace)
    request.app.state.guard.allow(access, namespace, route.role, route.every_namespace, route.doing)
    return namespace


def _call(route: Route, request: Request, access: Access, namespace: str, body) -> Call:
    path = {name: PATH_PARAMS[name][2](value) for name, value in request.path_params.items()}
    query = query_values(route, request.query_params)
    base = request.app.state.sched
    client = Client(app=data.namespace_app(base, namespace), actor=access.actor)
    return Call(client, path, query, body, request.headers, access)


def _result(route: Route, outcome, request: Request):
    if isinstance(outcome, sse.Stream):
        return sse.response(request, outcome.source, outcome.ready)
    if isinstance(outcome, Answer):
        return JSON(outcome.body, status_code=outcome.status, headers=outcome.headers)
    if isinstance(outcome, File):
        headers = {"content-disposition": f'attachment; filename="{outcome.filename}"'}
        if outcome.encoding:
            headers["content-encoding"] = outcome.encoding
        chunks = iter(lambda: outcome.handle.read(FILE_CHUNK), b"")
        return StreamingResponse(chunks, status_code=route.status[0], media_type=route.media, headers=headers,
                                 background=BackgroundTask(outcome.handle.close))
    return JSON(outcome, status_code=route.status[0])


def _small(request: Request) -> bool:
    """A body that says it is small enough to read before its token is checked."""
    length = request.headers.get("content-length", "")
    return length.isdigit() and int(length) <= SMALL_BODY


async def in_thread(request: Request, work: Callable, *args):
    """``work(*args)`` in one of the process's request threads (``app.state.threads``, a
    bounded pool: its threads' Redis connections are the process's), the loop free
    meanwhile. A plain executor: anyio's worker threads cost three times as much CPU a
    hop (benchmarks-history.md, The HTTP API under concurrent clients)."""
    return await asyncio.get_running_loop().run_in_executor(request.app.state.threads,
                                                            functools.partial(work, *args))


def run(route: Route, call: Call):
    """What ``route.run`` answers, on a thread: its reads, for a route that writes them as
    steps (a generator function, state/read_steps.py), sent with the Store's client."""
    if inspect.isgeneratorfunction(route.run):
        return read_steps.run(call.sched.store, route.run(call))
    return route.run(call)


_THREAD = object()  # what _on_loop answers for a request it leaves to a request thread


async def _on_loop(route: Route, request: Request):
    """A read served on the event loop, without a thread: a route whose reads are steps,
    for a token the process has kept (access.py) and a Redis the loop can reach
    (state/loop_redis.py). Anything else, or a read that needs blocking calls, answers
    _THREAD: the request is then served on a thread as any other."""
    connection = request.app.state.loop_redis
    if connection is None:
        return _THREAD
    access = request.app.state.guard.kept(request.headers.get("authorization"),
                                          (request.scope.get("client") or ("",))[0])
    if access is None:
        return _THREAD
    call = _call(route, request, access, _namespace(route, request, access), None)
    try:
        outcome = await read_steps.run_on_loop(connection, route.run(call))
    except read_steps.NeedsThread:
        return _THREAD
    return _indexed(route, outcome) if route.blocking else outcome


def endpoint(route: Route):
    """The Starlette endpoint serving ``route``."""
    steps = inspect.isgeneratorfunction(route.run)

    def admitted_run(request: Request, body=None):
        access, namespace = _admit(route, request)
        if isinstance(body, Problem):  # the body was read first, but the token is answered for first
            raise body
        call = _call(route, request, access, namespace, body)
        if route.blocking:
            return _blocking_run(route, call)
        return run(route, call)

    async def serve(request: Request):
        try:
            if route.upload:
                outcome = await _run_upload(route, request)
            elif route.lasting or (route.blocking and "index" in request.query_params):
                body = None
                if route.body is not None:  # (a lasting route's body is small: a drain's options)
                    if not _small(request):
                        await run_in_threadpool(_admit, route, request)  # the token first, for a larger one
                    try:
                        body = await read_body(route, request)
                    except Problem as problem:
                        body = problem
                outcome = await anyio.to_thread.run_sync(admitted_run, request, body,
                                                         limiter=sse.limiter(request.app))
            elif route.body is None:
                outcome = await _on_loop(route, request) if steps else _THREAD
                if outcome is _THREAD:
                    outcome = await in_thread(request, admitted_run, request)
            elif _small(request):  # read before the token is checked: one thread hop, not two
                try:
                    body = await read_body(route, request)
                except Problem as problem:
                    body = problem
                outcome = await in_thread(request, admitted_run, request, body)
            else:
                access, namespace = await in_thread(request, _admit, route, request)
                call = _call(route, request, access, namespace, await read_body(route, request))
                outcome = await in_thread(request, run, route, call)
            return _result(route, outcome, request)
        except Exception as exc:  # noqa: BLE001 - problem_of raises again what it does not know
            return problems.response(problems.problem_of(exc), request.url.path)

    serve.__name__ = route.operation_id
    return serve


async def _run_upload(route: Route, request: Request):
    """A route that takes a file: the token first, then the body into a temporary file,
    then ``run`` (in the streams' threads: it may take long), the file removed after."""
    access, namespace = await in_thread(request, _admit, route, request)
    call = _call(route, request, access, namespace, None)
    call.body = await read_upload(route, request)
    try:
        return await anyio.to_thread.run_sync(run, route, call, limiter=sse.limiter(request.app))
    finally:
        call.body.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- blocking queries
MAX_BLOCK_S = 300
BLOCK_STEP_S = 1.0  # one XREAD BLOCK of a blocking query waits this long at most
INDEX = Param("index", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
              "a blocking query (Nomad's): answer once the namespace's index (X-Sched-Index) is past this one, or "
              "after wait")
WAIT = Param("wait", {"type": "string", "pattern": r"^[0-9]{1,6}(?:ms|s|m)?$", "default": "5m"},
             f"how long a blocking query waits at most: 30s, 2m, 500ms (seconds without a unit); at most "
             f"{MAX_BLOCK_S} s")
BLOCKING = (INDEX, WAIT)
_SEQ_BITS = 20  # an index is a stream id <ms>-<seq> as one number: ms << 20 | seq


def stream_index(entry_id: str) -> int:
    ms, _, seq = entry_id.partition("-")
    return int(ms) << _SEQ_BITS | min(int(seq or 0), (1 << _SEQ_BITS) - 1)


def _wait_s(text: str) -> float:
    number = re.match(r"[0-9]+", text).group()
    unit = text[len(number):] or "s"
    return min(MAX_BLOCK_S, int(number) * {"ms": 0.001, "s": 1, "m": 60}[unit])


def _blocking_run(route: Route, call: Call):
    """``route.run`` after the namespace's index (its event stream's newest id) has moved
    past ``?index=`` or ``?wait=`` has passed; the answer carries ``X-Sched-Index``, which
    the route read with the state it answers or before it (:func:`indexed`), so a change
    after it is never missed by the next query. A namespace that keeps no stream has no
    index to wait on: it answers at once."""
    wanted = call.query.get("index")
    stream = call.sched.store.stream
    if wanted is not None and stream_index(stream.last_id()) <= wanted and stream.maxlen() > 0:
        after = f"{wanted >> _SEQ_BITS}-{wanted & ((1 << _SEQ_BITS) - 1)}"
        deadline = time.monotonic() + _wait_s(call.query["wait"])
        while (left := deadline - time.monotonic()) > 0:  # a second at a time: within the client's read timeout
            entries, _ = stream.read(after, count=1, block_ms=max(1, int(1000 * min(left, BLOCK_STEP_S))))
            if entries:
                break
    return _indexed(route, run(route, call))


def _indexed(route: Route, outcome) -> Answer:
    """A blocking route's answer with its ``X-Sched-Index``."""
    if not isinstance(outcome, Answer) or outcome.newest_event is None:
        raise TypeError(f"{route.doing} is a blocking route: it answers with the index it read (indexed())")
    return Answer(outcome.status, outcome.body, {**outcome.headers, "x-sched-index": str(stream_index(
        outcome.newest_event))})


def indexed(call: Call, read: Callable[[], Any], status: int = 200) -> Answer:
    """A blocking route's answer: what ``read()`` gives, with the namespace's newest event
    id read just before it (for routes whose reads cannot take it in their own)."""
    newest = call.sched.store.stream.last_id()
    return Answer(status, read(), newest_event=newest)

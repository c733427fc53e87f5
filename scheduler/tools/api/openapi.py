"""The OpenAPI 3.1 document of the API, made from the route table (``GET
/v1/openapi.json``): every route with its parameters, body, answers and the problems it
may answer, and the schemas they name (:mod:`schemas`)."""

from __future__ import annotations

from http import HTTPStatus

from scheduler.tools.api import schemas
from scheduler.tools.api.route import GZIP_TYPE, LINES_TYPES, NAMESPACE, PATH_PARAMS, Route
from scheduler.tools.ui.inputs import MAX_TEXT

VERSION = "1"
PROBLEM_CONTENT = {"application/problem+json": {"schema": schemas.PROBLEM}}
EVERY_ROUTE_PROBLEMS = (400, 401, 403, 429, 503)
ANSWER_HEADERS = {
    "X-Sched-Index": {"description": "the namespace's index as of the answer: send it back as ?index= to wait for "
                                     "the next change (a blocking query)", "schema": {"type": "integer"}},
    "X-Sched-Next-Token": {"description": "the next page's next_token; none after the last page",
                           "schema": {"type": "string"}},
}
NOUN_OF = {"token": "tokens", "quota": "quotas", "openapi.json": "meta", "memory": "config"}


def document(routes: list[Route]) -> dict:
    paths: dict[str, dict] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "sched HTTP API", "version": VERSION,
                 "description": "Everything `sched` does, over HTTP, for programs in any language: "
                                "docs/http-api.md. Errors are problem documents (RFC 9457) whose `detail` is "
                                "the sentence the CLI prints."},
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.NAMED.items())),
                       "securitySchemes": {"token": {"type": "http", "scheme": "bearer",
                                                     "description": "A token from `sched token create`."}}},
        "security": [{"token": []}],
    }


def operation(route: Route) -> dict:
    parameters = [{"name": name, "in": "path", "required": True, "schema": PATH_PARAMS[name][0],
                   "description": PATH_PARAMS[name][1]} for name in route.path_params]
    for param in ((NAMESPACE,) if route.needs_namespace else ()) + route.query:
        schema = param.schema if param is NAMESPACE else _text_bounds(param.schema)
        entry = {"name": param.name, "in": "query", "required": param.required, "schema": schema,
                 "description": param.description}
        if param.schema.get("type") == "array":
            entry.update(style="form", explode=True)
        parameters.append(entry)
    if route.answer is None:
        success = {"text/event-stream": {"schema": {"type": "string"}}}
    else:
        success = {route.media: {"schema": route.answer}}
    responses = {str(status): {"description": HTTPStatus(status).phrase, "content": success}
                 for status in route.status}
    headers = {name: ANSWER_HEADERS[name] for name in route.answer_headers}
    if route.blocking:
        headers["X-Sched-Index"] = ANSWER_HEADERS["X-Sched-Index"]
    if headers:
        for status in route.status:
            responses[str(status)]["headers"] = headers
    for status in sorted({*EVERY_ROUTE_PROBLEMS, *route.refusals,
                          *((413, 415, 422) if route.body is not None or route.upload else ())}):
        responses[str(status)] = {"description": HTTPStatus(status).phrase, "content": PROBLEM_CONTENT}
    op = {"operationId": route.operation_id, "summary": route.summary, "tags": [tag(route)],
          "x-sched-role": route.role, "parameters": parameters, "responses": responses}
    if route.description:
        op["description"] = route.description
    if route.every_namespace:
        op["x-sched-every-namespace"] = True
    if route.upload:
        lines = {"type": "string", "description": f"JSON lines, at most {route.upload >> 20} MiB (once decompressed)"}
        gzipped = {"type": "string", "contentEncoding": "binary", "description": "gzip of the JSON lines"}
        op["requestBody"] = {"required": True, "content": {**{media: {"schema": lines} for media in LINES_TYPES},
                                                           GZIP_TYPE: {"schema": gzipped}}}
    if route.body is not None:
        content = {"application/json": {"schema": route.body}}
        if route.texts:
            content["application/yaml"] = {"schema": {"type": "string", "format": "binary"}}
            content["application/x-ndjson"] = {"schema": {"type": "string", "format": "binary"}}
        op["requestBody"] = {"required": route.body_required, "content": content}
    return op


def tag(route: Route) -> str:
    word = route.path.split("/")[2]
    return NOUN_OF.get(word, word)


def _text_bounds(schema: dict) -> dict:
    """A query parameter's schema with the bounds every text parameter has: not empty, at
    most ``MAX_TEXT`` characters (each item of a repeated one)."""
    if schema.get("type") == "array":
        return {**schema, "items": _text_bounds(schema["items"])}
    if schema.get("type") == "string" and "enum" not in schema:
        return {"minLength": 1, "maxLength": MAX_TEXT, **schema}
    return schema

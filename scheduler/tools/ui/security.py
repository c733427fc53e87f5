"""Same-origin checks for every POST, and the headers every response carries.

A POST is accepted only when its ``Origin`` header (or, without one, its ``Referer``)
names this very host, so another site cannot make a visitor's browser drain a node or
stop a job (CSRF). Pages may load scripts, styles and data only from here (CSP), and
may not be framed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, PlainTextResponse

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HEADERS = {
    "content-security-policy": ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                "style-src-attr 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


def same_origin(headers: Headers) -> bool:
    """The request's Origin (else Referer) is this host, as the browser addressed it."""
    host = headers.get("host", "")
    source = headers.get("origin") or headers.get("referer") or ""
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()


class Security:
    """ASGI middleware: refuse cross-origin POSTs (403, nothing runs) and add the headers above."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if scope["method"] not in SAFE_METHODS and not same_origin(headers):
            message = "cross-origin request refused: the Origin or Referer header must name this host."
            if "text/html" in headers.get("accept", ""):
                response = PlainTextResponse(message, status_code=403)
            else:
                response = JSONResponse({"error": message}, status_code=403)
            return await response(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                extra = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    extra.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)

"""Signing in to the dashboard: who may look (viewer) and who may act (operator).

With sign-in on (:class:`AuthSettings`), every page, JSON route and event stream needs a
session, but ``/signin`` and ``/static/``. A session is a random id kept in Redis with a
TTL (:mod:`scheduler.state.dashboard_users`), carried in an HttpOnly, SameSite=Strict
cookie signed with HMAC-SHA256 under a key kept in Redis, so a forged or altered cookie
is refused without a lookup. Signing out deletes the session.

Every POST but the sign-in itself must carry the session's CSRF token (a ``csrf`` form
or JSON field, or an ``X-CSRF-Token`` header; ``static/auth.js`` adds the field to the
pages' forms), on top of the same-origin check of :mod:`security`. Actions need the
operator role. Failed sign-ins are counted per user and per address, in Redis with the
window as TTL; past the limit, sign-in is refused without looking at the password.

``/metrics`` takes ``Authorization: Bearer <token>`` when a metrics token is set (for
Prometheus, which cannot sign in); otherwise it needs a session when sign-in is on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

from scheduler.state.dashboard_users import DashboardUsers
from scheduler.tools.ui import passwords
from scheduler.tools.ui.inputs import local_path

ROLES = ("viewer", "operator")
COOKIE = "sched_session"
SESSION_S = 12 * 3600
FAILED_WINDOW_S = 15 * 60
MAX_FAILED = {"user": 5, "address": 20}  # failed sign-ins per window before sign-in is refused
MAX_FORM = 4096  # bytes of a sign-in form
MAX_BODY = 16_384  # bytes of an action's body (as api.MAX_BODY)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = ("/signin", "/static/")


@dataclass(frozen=True)
class SignedIn:
    name: str
    role: str
    csrf: str


_current: ContextVar[SignedIn | None] = ContextVar("sched_ui_signed_in", default=None)


def signed_in() -> SignedIn | None:
    """Who made the request being served (None without sign-in); templates call it."""
    return _current.get()


@dataclass(frozen=True)
class AuthSettings:
    """``sign_in``: sessions required; ``metrics_token``: the bearer token /metrics takes."""

    sign_in: bool
    metrics_token: str | None = None


class Sessions:
    """Cookies and sessions over :class:`DashboardUsers` (blocking Redis calls: run them
    in a thread)."""

    def __init__(self, app):
        self.app = app
        self._key: bytes | None = None

    @property
    def users(self) -> DashboardUsers:
        return DashboardUsers(self.app.client)

    def key(self) -> bytes:
        if self._key is None:
            self._key = self.users.secret()
        return self._key

    def _mac(self, text: str) -> str:
        digest = hmac.new(self.key(), text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def cookie_value(self, session: str) -> str:
        return f"{session}.{self._mac('session:' + session)}"

    def session_of(self, cookie: str | None) -> str | None:
        """The session id a cookie carries, if its signature holds."""
        if not cookie or "." not in cookie:
            return None
        session, _, mac = cookie.rpartition(".")
        return session if hmac.compare_digest(mac, self._mac("session:" + session)) else None

    def csrf(self, session: str) -> str:
        return self._mac("csrf:" + session)

    def who(self, cookie: str | None) -> tuple[str, SignedIn] | None:
        """(session id, who) for a cookie naming a live session; None otherwise."""
        session = self.session_of(cookie)
        if session is None:
            return None
        found = self.users.session_user(session)
        if found is None:
            return None
        return session, SignedIn(name=found[0], role=found[1], csrf=self.csrf(session))

    def sign_in(self, name: str, password: str, address: str) -> tuple[str | None, str]:
        """(cookie value, "") when the password is right; else (None, why not)."""
        users = self.users
        for kind, who in (("user", name), ("address", address)):
            if users.failures(kind, who) >= MAX_FAILED[kind]:
                minutes = max(1, -(-users.retry_after_s(kind, who) // 60))
                return None, (f"too many failed sign-ins for this {'user' if kind == 'user' else 'address'}; "
                              f"try again in {minutes} minute{'s' if minutes > 1 else ''}.")
        record = users.get(name) if name else None
        # An unknown user's password is checked all the same, so the answer takes as long.
        right = passwords.verify(password, record["password"] if record else passwords.UNKNOWN_USER)
        if not (record and right):
            users.failed("user", name, FAILED_WINDOW_S)
            users.failed("address", address, FAILED_WINDOW_S)
            return None, "wrong user name or password."
        users.forget_failures("user", name)
        return self.cookie_value(users.open_session(name, record["password"], SESSION_S)), ""

    def sign_out(self, session: str) -> None:
        self.users.close_session(session)


# ----------------------------------------------------------------------------- the middleware
class Auth:
    """ASGI middleware enforcing :class:`AuthSettings` (see the module's docstring)."""

    def __init__(self, app, settings: AuthSettings, sessions: Sessions):
        self.app, self.settings, self.sessions = app, settings, sessions

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        headers = Headers(scope=scope)
        token = self.settings.metrics_token
        if path == "/metrics" and token is not None:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return await _refuse(401, "a metrics token is required: Authorization: Bearer <token>.", headers,
                                     scope, receive, send, www_authenticate=True)
            return await self.app(scope, receive, send)
        if not self.settings.sign_in or path == "/signin" or path.startswith("/static/"):
            return await self.app(scope, receive, send)
        found = await run_in_threadpool(self.sessions.who, Request(scope).cookies.get(COOKIE))
        if found is None:
            if path.startswith("/api/") and "text/html" not in headers.get("accept", "") or path == "/metrics":
                return await _refuse(401, "sign in first (POST /signin).", headers, scope, receive, send)
            target = path + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
            response = RedirectResponse("/signin?" + urlencode({"next": target}), status_code=303)
            return await response(scope, receive, send)
        session, user = found
        if method not in SAFE_METHODS:
            if path != "/signout" and user.role != "operator":
                return await _refuse(403, f"{user.name} is a viewer: only operators may drain, pause, activate, "
                                          "scale or stop.", headers, scope, receive, send)
            body, receive = await _buffered(receive)
            if body is None:
                return await _refuse(413, f"the request body is larger than {MAX_BODY} bytes.", headers, scope,
                                     receive, send)
            if not hmac.compare_digest(_csrf_token(headers, body).encode(), user.csrf.encode()):
                return await _refuse(403, "the CSRF token is missing or wrong: reload the page and try again.",
                                     headers, scope, receive, send)
        scope.setdefault("state", {})["session"] = session
        reset = _current.set(user)
        try:
            await self.app(scope, receive, send)
        finally:
            _current.reset(reset)


async def _buffered(receive):
    """The request's body (None past MAX_BODY) and a ``receive`` that gives it again."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY:
            return None, receive
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _csrf_token(headers: Headers, body: bytes) -> str:
    if headers.get("x-csrf-token"):
        return headers["x-csrf-token"]
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if kind == "application/json":
            found = orjson.loads(body or b"{}")
            value = found.get("csrf") if isinstance(found, dict) else None
        else:
            value = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)).get("csrf")
    except (ValueError, UnicodeDecodeError, orjson.JSONDecodeError):
        return ""
    return value if isinstance(value, str) else ""


async def _refuse(status: int, message: str, headers: Headers, scope, receive, send,
                  www_authenticate: bool = False) -> None:
    extra = {"www-authenticate": "Bearer"} if www_authenticate else {}
    if "text/html" in headers.get("accept", ""):
        response: Response = PlainTextResponse(message, status_code=status, headers=extra)
    else:
        response = JSONResponse({"error": message}, status_code=status, headers=extra)
    await response(scope, receive, send)


# ----------------------------------------------------------------------------- the routes
def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "") and "text/html" not in request.headers.get(
        "accept", "")


def _page(request: Request, status: int = 200, message: str = "", name: str = "") -> HTMLResponse:
    html = request.app.state.pages.env.get_template("signin.html").render(
        message=message, name=name, next=local_path(request.query_params.get("next")))
    return HTMLResponse(html, status_code=status)


async def signin(request: Request):
    """GET: the form. POST: a form or JSON {user, password, next}; a session cookie and
    a redirect to ``next`` (JSON: who signed in and the CSRF token) when right."""
    sessions: Sessions = request.app.state.sessions
    if request.method == "GET":
        return _page(request)
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM:
            return _answer(request, 413, "the sign-in form is too large.")
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        try:
            fields = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError:
            fields = None
        if not isinstance(fields, dict):
            return _answer(request, 400, "send {\"user\": ..., \"password\": ...} as JSON, or a form.")
    else:
        fields = dict(parse_qsl(raw.decode("utf-8", errors="replace"), keep_blank_values=True, max_num_fields=10))
    name, password = fields.get("user"), fields.get("password")
    if not isinstance(name, str) or not isinstance(password, str) or not name or not password:
        return _answer(request, 400, "give a user name and a password.", name if isinstance(name, str) else "")
    address = (request.scope.get("client") or ("",))[0]  # as uvicorn saw it (after trusted proxies' headers)
    cookie, why = await run_in_threadpool(sessions.sign_in, name[:256], password[:1024], address)
    if cookie is None:
        return _answer(request, 429 if why.startswith("too many") else 401, why, name)
    target = local_path(fields.get("next") if isinstance(fields.get("next"), str) else None)
    if _wants_json(request):
        session = sessions.session_of(cookie)
        found = await run_in_threadpool(sessions.users.session_user, session)
        response: Response = JSONResponse({"user": name, "role": found[1] if found else "",
                                           "csrf": sessions.csrf(session)})
    else:
        response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, cookie, max_age=SESSION_S, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


def _answer(request: Request, status: int, message: str, name: str = "") -> Response:
    if _wants_json(request):
        return JSONResponse({"error": message}, status_code=status)
    return _page(request, status, message, name)


async def signout(request: Request):
    """End the session (the middleware checked its CSRF token) and go to the sign-in page."""
    session = request.scope.get("state", {}).get("session")
    if session:
        await run_in_threadpool(request.app.state.sessions.sign_out, session)
    response: Response = (JSONResponse({"signed_out": True}) if _wants_json(request)
                          else RedirectResponse("/signin", status_code=303))
    response.delete_cookie(COOKIE, path="/")
    return response

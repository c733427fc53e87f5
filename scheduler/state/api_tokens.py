"""The HTTP API's bearer tokens and its failed attempts, in Redis, outside every namespace
(one API server serves every namespace of its Redis; each token reaches one, or all).

``sched:api:tokens``             HASH  token name -> JSON {namespace, role, created,
                                       expires, sha256}: what ``sched token ls`` lists
                                       and ``revoke`` finds
``sched:api:token:<sha256>``     STRING JSON {name, namespace, role, created, expires}
                                       under the SHA-256 of the token, with the token's
                                       TTL when it has one: what a request is checked
                                       against (one GET)
``sched:api:failed:<address>``   STRING requests from an address refused for a missing
                                       or wrong token, with the TTL of the window they
                                       count in
``sched:api:revoked``            CHANNEL the SHA-256 of each token revoked, for the API
                                       servers that keep tokens they checked
                                       (checked_tokens.py)

The token itself is kept nowhere: it is 32 random bytes, shown once when made, and only
its SHA-256 is stored (a random secret of that length needs no slow hash). A token that
expires leaves its name in ``sched:api:tokens`` until the next ``create`` or ``ls``,
which drop it. ``namespace`` is ``*`` for a token of every namespace.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time

import orjson

from scheduler.model.errors import NotFound, SpecError
from scheduler.model.names import check_namespace
from scheduler.state.failed_attempts import FailedAttempts

TOKENS = "sched:api:tokens"
TOKEN_PREFIX = "sched:api:token:"
FAILED_PREFIX = "sched:api:failed:"
REVOKED_CHANNEL = "sched:api:revoked"
EVERY_NAMESPACE = "*"
ROLES = ("viewer", "submitter", "operator")  # each may do what the ones before it may
TOKEN_PREFIX_TEXT = "sched_"  # what every token starts with, so that a leaked one is recognised
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise SpecError(f"token name {name!r} is not valid; use up to 64 letters, digits, '.', '_', '-' and '@', "
                        "starting with a letter or digit.")
    return name


class ApiTokens:
    def __init__(self, client):
        self.client = client

    def create(self, name: str, namespace: str, role: str, ttl_s: int | None = None) -> dict:
        """Make a token: ``{name, namespace, role, created, expires, token}``, the token
        shown this once. Refused (one sentence) if a live token has the name."""
        check_name(name)
        if namespace != EVERY_NAMESPACE:
            check_namespace(namespace)
        if role not in ROLES:
            raise SpecError(f"role {role!r} is not one of {', '.join(ROLES)}.")
        if ttl_s is not None and ttl_s < 1:
            raise SpecError("a token's time to live must be at least one second.")
        self._drop_expired()
        token = TOKEN_PREFIX_TEXT + secrets.token_urlsafe(32)
        now = int(time.time() * 1000)
        record = {"name": name, "namespace": namespace, "role": role, "created": now,
                  "expires": now + ttl_s * 1000 if ttl_s else None}
        # The name first: a process that dies between the two writes leaves a name that
        # `revoke` removes, never a working token that nothing lists.
        if not self.client.hsetnx(TOKENS, name, orjson.dumps({**record, "sha256": digest(token)}).decode()):
            raise SpecError(f"a token named {name} exists; revoke it first (sched token revoke {name}).")
        self.client.set(TOKEN_PREFIX + digest(token), orjson.dumps(record).decode(), ex=ttl_s)
        return {**record, "token": token}

    def check(self, token: str) -> dict | None:
        """The record of a live token, or None."""
        return self._record(self.client.get(TOKEN_PREFIX + digest(token)))

    def admit(self, token: str | None, address: str) -> tuple[int, dict | None]:
        """The refusals counted for ``address`` and the record of ``token`` (None: no
        live token), in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(FAILED_PREFIX + address)
            pipe.get(TOKEN_PREFIX + digest(token or ""))
            failures, raw = pipe.execute()
        return int(failures or 0), self._record(raw) if token else None

    @staticmethod
    def _record(raw) -> dict | None:
        if not raw:
            return None
        record = orjson.loads(raw)
        if record.get("expires") is not None and record["expires"] <= time.time() * 1000:
            return None  # Redis expires the key a moment later
        return record

    def records(self) -> list[dict]:
        """Every live token's record (without the token, which is kept nowhere), by name."""
        self._drop_expired()
        out = []
        for name, raw in sorted(self.client.hgetall(TOKENS).items()):
            record = orjson.loads(raw)
            out.append({key: record.get(key) for key in ("name", "namespace", "role", "created", "expires")})
        return out

    def revoke(self, name: str) -> dict:
        """End a token at once; returns its record."""
        raw = self.client.hget(TOKENS, check_name(name))
        if not raw:
            raise NotFound(f"there is no token named {name}; sched token ls lists them.")
        record = orjson.loads(raw)
        self.client.delete(TOKEN_PREFIX + record["sha256"])  # first: it stops working now
        self.client.publish(REVOKED_CHANNEL, record["sha256"])  # servers that kept it checked forget it
        self.client.hdel(TOKENS, name)
        return {key: record.get(key) for key in ("name", "namespace", "role", "created", "expires")}

    def _drop_expired(self) -> None:
        """Forget the names of tokens whose key has expired."""
        entries = self.client.hgetall(TOKENS)
        if not entries:
            return
        names = list(entries)
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.exists(TOKEN_PREFIX + orjson.loads(entries[name])["sha256"])
            alive = pipe.execute()
        gone = [name for name, live in zip(names, alive) if not live]
        if gone:
            self.client.hdel(TOKENS, *gone)

    def failures(self) -> FailedAttempts:
        """Requests refused for a missing or wrong token, per address."""
        return FailedAttempts(self.client, FAILED_PREFIX)

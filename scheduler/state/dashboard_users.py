"""The dashboard's users, sessions and failed sign-ins, in Redis, outside every namespace
(one dashboard shows every namespace of its Redis).

``sched:ui:users``           HASH  user name -> JSON {role, password (an scrypt hash with
                                   its salt and parameters), created}
``sched:ui:secret``          STRING the key that signs session cookies (made once, at random)
``sched:ui:session:<id>``    STRING "<user>|<fingerprint of the password hash>", with the
                                   session's TTL; deleted by signing out
``sched:ui:failed:<kind>:<who>`` STRING failed sign-ins of a user or from an address, with
                                   the TTL of the window they count in

A session names its user's password fingerprint, so a new password (or removing the
user) ends every session of that user at its next request.
"""

from __future__ import annotations

import hashlib
import secrets
import time

import orjson

from scheduler.state.failed_attempts import FailedAttempts

USERS = "sched:ui:users"
SECRET = "sched:ui:secret"
SESSION_PREFIX = "sched:ui:session:"
FAILED_PREFIX = "sched:ui:failed:"


def fingerprint(password_hash: str) -> str:
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


class DashboardUsers:
    def __init__(self, client):
        self.client = client

    # Users.
    def put(self, name: str, role: str, password_hash: str) -> bool:
        """Add or replace a user; True when it is new."""
        record = {"role": role, "password": password_hash, "created": int(time.time() * 1000)}
        return bool(self.client.hset(USERS, name, orjson.dumps(record).decode()))

    def get(self, name: str) -> dict | None:
        raw = self.client.hget(USERS, name)
        return orjson.loads(raw) if raw else None

    def remove(self, name: str) -> bool:
        return bool(self.client.hdel(USERS, name))

    def all(self) -> dict[str, dict]:
        return {name: orjson.loads(raw) for name, raw in sorted(self.client.hgetall(USERS).items())}

    def any(self) -> bool:
        return bool(self.client.hlen(USERS))

    def secret(self) -> bytes:
        """The cookie-signing key, made on first use (SET NX: two dashboards agree)."""
        self.client.set(SECRET, secrets.token_hex(32), nx=True)
        return bytes.fromhex(self.client.get(SECRET))

    # Sessions.
    def open_session(self, name: str, password_hash: str, ttl_s: int) -> str:
        session = secrets.token_urlsafe(24)
        self.client.set(SESSION_PREFIX + session, f"{name}|{fingerprint(password_hash)}", ex=ttl_s)
        return session

    def session_user(self, session: str) -> tuple[str, str] | None:
        """(user name, role) of a live session whose user still has the password it
        signed in with; None otherwise."""
        value = self.client.get(SESSION_PREFIX + session)
        if not value:
            return None
        name, _, mark = value.rpartition("|")
        record = self.get(name)
        if record is None or fingerprint(record["password"]) != mark:
            return None
        return name, record["role"]

    def close_session(self, session: str) -> None:
        self.client.delete(SESSION_PREFIX + session)

    # Failed sign-ins.
    def _failed(self, kind: str) -> FailedAttempts:
        return FailedAttempts(self.client, f"{FAILED_PREFIX}{kind}:")

    def failures(self, kind: str, who: str) -> int:
        return self._failed(kind).count(who)

    def failed(self, kind: str, who: str, window_s: int) -> int:
        """Count one more failure; the count lasts ``window_s`` from the first of them."""
        return self._failed(kind).failed(who, window_s)

    def forget_failures(self, kind: str, who: str) -> None:
        self._failed(kind).forget(who)

    def retry_after_s(self, kind: str, who: str) -> int:
        return self._failed(kind).retry_after_s(who)

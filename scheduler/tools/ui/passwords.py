"""Dashboard passwords, stored as ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (base64): salted
with 16 random bytes, with the cost parameters next to the hash so that raising them
later leaves old hashes readable. ``hashlib.scrypt`` at n=2^14, r=8, p=1 takes 16 MiB
and some tens of milliseconds: slow for a guesser, quick for one sign-in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from scheduler.model.errors import SpecError

N, R, P = 2**14, 8, 1
MIN_LENGTH = 10
_MAXMEM = 64 * 2**20


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def hash_password(password: str) -> str:
    check(password)
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=_MAXMEM, dklen=32)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify(password: str, stored: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (compared in constant time)."""
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        found = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                               maxmem=_MAXMEM, dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, expected)


# Verified against when the user does not exist, so that the answer takes as long.
UNKNOWN_USER = f"scrypt${N}${R}${P}${_b64(b'0' * 16)}${_b64(b'0' * 32)}"


def check(password) -> str:
    if not isinstance(password, str) or len(password) < MIN_LENGTH:
        raise SpecError(f"a dashboard password needs at least {MIN_LENGTH} characters.")
    if not password.isprintable():
        raise SpecError("a dashboard password must be printable text (no line breaks).")
    return password

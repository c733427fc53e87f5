"""Who may do what through the API: bearer tokens (``sched token create``), each of one
namespace (or of every one) and one role.

Every request but ``GET /v1/openapi.json`` carries ``Authorization: Bearer <token>``;
the token's SHA-256 is looked up in Redis (:mod:`scheduler.state.api_tokens`), in one
round trip with the count of the address's refusals, and what was found is kept a few
seconds for the next requests of the same token and address
(:mod:`scheduler.state.checked_tokens`: a revocation ends it at once). A request without a live token gets
**401**; an address that sent :data:`MAX_FAILED` such requests in
:data:`FAILED_WINDOW_S` gets **429** (with ``Retry-After``) whatever its token, until the
window ends. A live token asking for another namespace than its
own, or for what its role does not allow, gets **403**. The roles go up:

- ``viewer``: every read (lists, shows, explain, logs, plan, events);
- ``submitter``: also submit, scale, stop and revert jobs, and act on deployments;
- ``operator``: also register, drain, pause, activate and remove nodes, set tenants'
  weights, the stream's bound and the namespace's settings, run ``gc``, upgrade the key
  layout, and save and restore snapshots.

A quota limits a namespace, so setting one (and listing every namespace's) takes a token
of every namespace (``sched token create NAME --all-namespaces``): an operator's to set.
So does a snapshot's save that may pause the server's writes (``max_pause``): that holds
every namespace's.

Served on loopback with ``--no-auth``, every request is allowed and actions are recorded
as done by the server's Redis user, as the dashboard does without sign-in.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.state.api_tokens import EVERY_NAMESPACE, ROLES, ApiTokens
from scheduler.state.checked_tokens import CheckedTokens
from scheduler.tools.api.problems import Problem

MAX_FAILED = 20  # requests with a missing or wrong token per address and window
FAILED_WINDOW_S = 15 * 60


@dataclass(frozen=True)
class Access:
    """What a request may do: as the token ``name`` (None: no token needed), in
    ``namespace`` (``*``: every one), with ``role``."""

    name: str | None
    namespace: str
    role: str

    @property
    def actor(self) -> str | None:
        """Who its actions are recorded as done by (None: the server's Redis user)."""
        return f"token:{self.name}" if self.name is not None else None

    def allows(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


OPEN = Access(None, EVERY_NAMESPACE, ROLES[-1])


def _bearer(authorization: str | None) -> str:
    """The token of ``Authorization: Bearer <token>`` ("" for none)."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class Guard:
    """Admits requests (blocking: it reads Redis, so call it in a thread)."""

    def __init__(self, client, auth: bool):
        self.tokens = ApiTokens(client)
        self.checked = CheckedTokens(client)
        self.auth = auth

    def kept(self, authorization: str | None, address: str) -> Access | None:
        """Without blocking (on the event loop): the access of a token this process has
        kept, else None (then :meth:`admit`, in a thread)."""
        if not self.auth:
            return OPEN
        token = _bearer(authorization)
        record = self.checked.peek(token, address) if token else None
        return None if record is None else Access(record["name"], record["namespace"], record["role"])

    def admit(self, authorization: str | None, address: str) -> Access:
        if not self.auth:
            return OPEN
        token = _bearer(authorization)
        record = self.checked.get(token, address) if token else None
        if record is not None:
            return Access(record["name"], record["namespace"], record["role"])
        failed, record = self.tokens.admit(token or None, address)
        if failed >= MAX_FAILED:
            wait = max(1, self.tokens.failures().retry_after_s(address))
            raise Problem(429, f"too many requests without a valid token from this address; try again in "
                               f"{-(-wait // 60)} minute(s).", headers={"retry-after": str(wait)})
        if record is None:
            self.tokens.failures().failed(address, FAILED_WINDOW_S)
            said = "a token is required" if not authorization else "the token is not valid (revoked, expired or mistyped)"
            raise Problem(401, f"{said}: send Authorization: Bearer <token> (sched token create makes one).",
                          headers={"www-authenticate": "Bearer"})
        self.checked.keep(token, address, record)
        return Access(record["name"], record["namespace"], record["role"])

    @staticmethod
    def allow(access: Access, namespace: str, role: str, every_namespace: bool, doing: str) -> None:
        """Raise 403 unless ``access`` may do ``doing`` (``POST /v1/jobs``) in ``namespace``."""
        if access.name is None:
            return
        who = f"token {access.name}, {'an' if access.role == 'operator' else 'a'} {access.role}"
        if every_namespace and access.namespace != EVERY_NAMESPACE:
            raise Problem(403, f"{who} of namespace {access.namespace}, may not {doing}: that takes a token of every "
                               f"namespace (sched token create NAME --all-namespaces).")
        if access.namespace not in (EVERY_NAMESPACE, namespace):
            raise Problem(403, f"{who} of namespace {access.namespace}, may not reach namespace {namespace}.")
        if not access.allows(role):
            scope = "every namespace" if access.namespace == EVERY_NAMESPACE else f"namespace {access.namespace}"
            raise Problem(403, f"{who} of {scope}, may not {doing}: that takes {'an' if role == 'operator' else 'a'} "
                               f"{role}'s token.")

"""What every part of the :class:`~scheduler.client.Client` stands on: its namespace's
App (connection, store, keys), who its actions are recorded as done by, and the history
they are recorded in."""

from __future__ import annotations

from typing import Self

from scheduler.state.app import App, default_namespace
from scheduler.state.history import Record


class ClientBase:
    """One namespace of a scheduler: the connection, and the record of what is done."""

    def __init__(self, url: str | None = None, namespace: str | None = None, *, app: App | None = None,
                 actor: str | None = None):
        self.app = app or App(redis_url=url, namespace=default_namespace() if namespace is None else namespace)
        self.actor = actor

    @property
    def by(self) -> str:
        """Who this client's actions are recorded as done by."""
        return self.actor or self.store.redis_user()

    def _record(self, action: str, *, job: str = "", node: str = "", **details) -> None:
        self.store.record_history([Record(action, self.actor, job=job, node=node, details=details)])

    def audit_trail(self, job: str | None = None, node: str | None = None) -> list[dict]:
        """Who did what, oldest first: to the job, to the node, or (neither given) to the
        namespace's quota and tenants. Each entry is ``{ts, action, by, details}``."""
        return self.store.read_history(job=job, node=node)

    @property
    def namespace(self) -> str:
        return self.app.keys.namespace

    @property
    def store(self):
        return self.app.store

    def close(self) -> None:
        self.app.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

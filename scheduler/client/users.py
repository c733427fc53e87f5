"""Users: the Redis ACL users confined to a namespace, who may sign in to the dashboard,
and the sentence for what Redis refuses a user."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.model.errors import PermissionDenied
from scheduler.state import acl
from scheduler.state.dashboard_users import DashboardUsers


class UserClient(ClientBase):
    """Make, list, remove and sync Redis users; the dashboard's users."""

    def create_user(self, name: str, namespace: str, role: str) -> dict:
        """A Redis user confined to ``namespace`` with ``role``'s commands, on every server:
        ``{name, namespace, role, url, servers, missed, persisted}``; ``url`` (this
        client's URL with the user's credentials) holds the password, which is kept
        nowhere else."""
        record = acl.AclUsers(self.app.client).create(name, namespace, role)
        record["url"] = acl.user_url(self.app.url, name, record.pop("password"))
        return record

    def users(self) -> list[dict]:
        """The Redis users ``create_user`` made: ``{name, namespace, role, created, active}``."""
        return acl.AclUsers(self.app.client).records()

    def remove_user(self, name: str) -> dict:
        return acl.AclUsers(self.app.client).remove(name)

    def sync_users(self) -> list[dict]:
        """Set every user ``create_user`` made again on every server (after a restart of a
        server that keeps no ACL file, or a new replica)."""
        return acl.AclUsers(self.app.client).sync()

    def dashboard_users(self) -> DashboardUsers:
        """Who may sign in to ``sched ui`` (``sched:ui:users``, shared by every namespace)."""
        return DashboardUsers(self.app.client)

    def refusal(self, exc: BaseException, doing: str) -> PermissionDenied:
        """The one sentence for Redis refusing this client's user something (``NOPERM``)
        while ``doing`` (``sched job submit``...)."""
        return PermissionDenied(acl.refusal_sentence(self.app.client, exc, self.namespace, doing))

"""Layout: the version of the namespace's key layout, and moving it forward."""

from __future__ import annotations

from scheduler.client.base import ClientBase


class LayoutClient(ClientBase):
    """Read and upgrade the key layout."""

    def layout(self) -> int:
        """The version of the namespace's key layout (0: empty; scheduler/state/layout.py)."""
        return self.store.layout_version()

    def upgrade(self) -> dict:
        """Move the namespace's key layout forward to the one this sched writes, in place
        (``sched upgrade``). Returns ``{namespace, from, to, steps}``."""
        return self.store.upgrade_layout()

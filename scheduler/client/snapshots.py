"""Snapshots: a namespace's whole state saved to a file, and loaded back
(docs/reliability.md, Snapshots)."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.state.app import App


class SnapshotClient(ClientBase):
    """Save and restore snapshots."""

    def snapshot_save(self, target, tries: int = 3, max_pause: float = 5.0) -> dict:
        """Write the namespace's whole state, as of one moment, to ``target`` (a path,
        gzip-compressed when it ends in ``.gz``, or a binary file open for writing): up to
        ``tries`` reads while it works on, then, if each met a change, one with the
        server's writes paused for at most ``max_pause`` seconds (0: never). Returns
        ``{namespace, keys, saved_at, layout, source_namespace, tries, paused_ms}``.
        Raises ``SpecError`` (``NamespaceBusy``) when no read was whole."""
        from scheduler.control import snapshot  # gzip and tempfile: only for this

        return snapshot.save(self.store, target, tries, int(max_pause * 1000)).as_dict()

    def snapshot_restore(self, source, namespace: str | None = None) -> dict:
        """Load a snapshot file into ``namespace`` (by default the one it was saved from),
        which must be empty: a ``SpecError`` in one sentence otherwise, before anything is
        written; a restore cut short is finished by running it again. Returns
        ``{namespace, keys, saved_at, layout, source_namespace, tries, paused_ms}``."""
        from pathlib import Path

        from scheduler.control import snapshot

        path = Path(source)
        header, count = snapshot.read_header(path)
        target = namespace or header.namespace
        app = self.app if target == self.namespace else App(client=self.app.client, namespace=target)
        return snapshot.restore(app.store, path, header, count).as_dict()

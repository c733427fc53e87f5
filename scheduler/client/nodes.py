"""Nodes: registering them, their availability (pause, activate; drains are ``drains.py``'s),
and their taints."""

from __future__ import annotations

from typing import Iterable

from scheduler.client.base import ClientBase
from scheduler.control import drains
from scheduler.model import Node, SpecError, make_node
from scheduler.model.errors import NotFound
from scheduler.model.taints import EFFECTS, Taint, parse_taint, taints_from_text


class NodeClient(ClientBase):
    """Add, list, pause, activate, remove and taint nodes (drains: ``drains.py``)."""

    def add_node(self, name: str, *, cpu, memory, gpu=None, resources: dict | None = None,
                 labels: dict | list | None = None, engine_labels: dict | list | None = None, os: str = "linux",
                 arch: str = "amd64", role: str = "worker", plugins: Iterable[str] = (),
                 taints: Iterable[str] = ()) -> bool:
        """Register a node (no agent: it stays ready), or update it. Returns True when new.
        ``taints``: ``KEY[=VALUE]:EFFECT`` texts; given, they replace the node's."""
        extra = dict(resources or {})
        if gpu is not None:
            extra["gpu"] = gpu
        node = make_node(name, cpu=cpu, memory=memory, resources=extra, labels=labels, engine_labels=engine_labels,
                         os=os, arch=arch, role=role, plugins=list(plugins), taints=list(taints))
        return self.put_node(node)

    def put_node(self, node: Node) -> bool:
        return self.store.put_node(node)

    def nodes(self) -> list[Node]:
        return self.store.nodes()

    def node(self, name: str) -> Node:
        return self.store.get_node(name)

    def pause(self, name: str) -> str:
        """No new tasks on the node; what runs there stays (a drain in progress is
        cancelled). Returns the availability before."""
        before = self.store.set_availability(name, "pause")
        drains.cancel(self.store, name, "the node was paused")
        self._record("pause", node=name, before=before)
        return before

    def activate(self, name: str) -> str:
        """Let the node take tasks again (a drain in progress is cancelled). Returns the
        availability before."""
        before = self.store.set_availability(name, "active")
        drains.cancel(self.store, name, "the node was activated")
        self._record("activate", node=name, before=before)
        return before

    def remove_node(self, name: str) -> None:
        self.store.remove_node(name)

    def taint(self, name: str, taint: str | Taint) -> dict:
        """Taint a node (``KEY[=VALUE]:EFFECT``, kube's ``kubectl taint``), replacing a taint
        of the same key and effect; returns ``{node, before, after}`` (the taints as text).
        A NoExecute taint evicts running tasks that do not tolerate it."""
        parsed = parse_taint(taint) if isinstance(taint, str) else taint
        before, after = self.store.taint(name, parsed)
        self._record("taint", node=name, taint=str(parsed))
        return {"node": name, "before": before, "after": after}

    def untaint(self, name: str, key: str, effect: str = "") -> dict:
        """Remove the node's taints of ``key`` (of ``effect`` only, if given); returns
        ``{node, before, after}``."""
        if effect and effect not in EFFECTS:
            raise SpecError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}.")
        before, after = self.store.untaint(name, key, effect)
        if before == after:  # the script wrote nothing: neither is anything recorded
            named = f"{key}:{effect}" if effect else key
            having = " ".join(str(t) for t in taints_from_text(before)) or "none"
            raise NotFound(f"node {name} has no taint {named}; its taints are {having}.")
        self._record("untaint", node=name, taint=f"{key}:{effect}" if effect else key)
        return {"node": name, "before": before, "after": after}


def node_record(n: Node, tasks: int, drain: dict | None = None) -> dict:
    """A node as ``sched node ls --json`` and ``GET /v1/nodes`` give it; ``drain``: its
    drain in progress, if any (``{state, message, left, deadline_at, ...}``)."""
    record = {"name": n.name, "capacity": n.capacity, "allocated": {r: n.allocated.get(r, 0) for r in n.capacity},
              "labels": n.labels, "availability": n.availability, "status": n.status, "tasks": tasks,
              "platform": {"os": n.os, "arch": n.arch}, "role": n.role, "plugins": sorted(n.plugins),
              "taints": [str(t) for t in n.taints], "slots": n.slots or None}  # None: no agent's limit
    if drain is not None:
        record["drain"] = drain
    return record

"""Drains in Redis: each node's last drain (``drain:<node>``), the drains in progress
(``nodes:drains``), and ``drain_set.lua``, the one script that changes them. What a drain
does is ``scheduler/control/drains.py``'s."""

from __future__ import annotations

from scheduler.model.errors import NotFound
from scheduler.model.names import check_node_name
from scheduler.state.namespace import NamespaceStore


class DrainStore(NamespaceStore):
    def set_drain(self, name: str, states: tuple[str, ...], new_state: str = "",
                  fields: dict | None = None) -> tuple[bool, str, str]:
        """``drain_set.lua``: change the node's drain if it is in one of ``states`` (any when
        empty; ``-`` stands for no drain yet); a new state ``draining`` also makes the node's
        availability drain. Returns (done, the drain's state, the node's availability before)."""
        check_node_name(name)
        k = self.keys
        pairs = [str(x) for item in (fields or {}).items() for x in item]
        reply = self.scripts.drain_set(
            keys=[k.drain(name), k.drains, k.node(name), k.node_changes, k.node_seq, k.node_epoch, k.stream, k.config],
            args=[self.events_arg, name, ",".join(states), new_state, self.scripts.now_arg(), len(pairs) // 2, *pairs])
        if reply[0] == -1:
            raise NotFound(f"node {name!r} does not exist.")
        return bool(reply[0]), reply[1], reply[2] if len(reply) > 2 else ""

    def drain_record(self, name: str) -> dict[str, str]:
        """The node's last drain as stored (empty when it was never drained this way)."""
        return self.client.hgetall(self.keys.drain(name))

    def drain_records(self, names: list[str]) -> list[dict[str, str]]:
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.keys.drain(name))
            return pipe.execute()

    def draining_nodes(self) -> list[str]:
        """The nodes whose drain is in progress."""
        return sorted(self.client.hkeys(self.keys.drains))

"""The nodes as columns, so a batch can narrow thousands of nodes to a few candidates
with numpy before the exact placement logic looks at them one by one.

The placer keeps one table across calls and syncs it with the node objects it is given:
a node whose object changed (the worker's cache re-read it) gets its row rewritten, and
the placer rewrites the rows of nodes it places on. Static facts (labels, plugins,
platform...) are cached as boolean masks per static part of a spec, and preference paths
as integer group codes; both are recomputed when a node's description changes.

Only an optimisation: every candidate is still checked with :func:`scheduler.fit.misfit`
before it is used, so a stale or approximate column can cost a candidate, never a wrong
placement.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from scheduler.model import ACTIVE, READY, Node


def _description(node: Node) -> tuple:
    return (node.labels, node.engine_labels, node.plugins, node.os, node.arch, node.role, node.hostname, node.taints)


class NodeTable:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.rows: dict[str, int] = {}
        self.epoch = 0  # bumped when any node's description (what static filters read) changes
        self.capacity: dict[str, np.ndarray] = {}
        self.allocated: dict[str, np.ndarray] = {}
        self.tasks = np.zeros(0, dtype=np.int64)
        self.slots = np.zeros(0, dtype=np.int64)  # 0: no limit (a node without an agent)
        self.limited = False  # some row has slots (room() then looks at them)
        self.usable = np.zeros(0, dtype=bool)
        self._ids = np.zeros(0, dtype=np.int64)
        self._source: Sequence[Node] | None = None  # the list last synced from
        self.builds = 0  # bumped when the rows are laid out anew
        self.touched: set[int] = set()  # rows rewritten since FewestTasks last looked
        self._nominated: set[int] = set()
        self._static: dict[tuple, tuple[int, np.ndarray, np.ndarray]] = {}
        self._codes: dict[tuple, tuple[int, np.ndarray, list[tuple]]] = {}
        self._columns: dict[tuple, tuple[int, np.ndarray]] = {}

    def sync(self, nodes: Sequence[Node]) -> None:
        """Make the rows match ``nodes`` (same order), rewriting only rows whose object changed.
        The same list as last time is taken to hold the same objects (the placer keeps their
        rows current itself), so groups of one batch sync once."""
        if nodes is self._source and len(nodes) == len(self.nodes):
            return
        self._source = nodes
        ids = np.fromiter(map(id, nodes), dtype=np.int64, count=len(nodes))
        same_shape = len(nodes) == len(self.nodes) == len(self._ids)
        if same_shape:
            changed = np.flatnonzero(ids != self._ids)
            if any(nodes[i].name != self.nodes[i].name for i in changed.tolist()):
                same_shape = False
        if not same_shape:
            self._build(nodes)
        else:
            for i in changed.tolist():
                if not self._replace(i, nodes[i]):
                    self._build(nodes)
                    break
        self._ids = ids

    def replaced(self, names) -> None:
        """Rows of these nodes take the new objects now in the list last synced (a list
        its owner updates in place, telling us which entries it replaced)."""
        source = self._source
        for name in names:
            i = self.rows.get(name)
            if i is None or source is None or i >= len(source) or source[i].name != name:
                self._start_over()
                return
            if source[i] is not self.nodes[i]:
                if not self._replace(i, source[i]):
                    self._build(source)
                    self._ids = np.fromiter(map(id, source), dtype=np.int64, count=len(source))
                    return
                self._ids[i] = id(source[i])

    def changed(self, names) -> None:
        """Rows of these nodes take their values again: the same objects, changed in place."""
        rows, source = self.rows, self._source
        found = [rows.get(name) for name in names]
        if source is None or None in found:
            self._start_over()
            return
        self.write_rows(found)  # type: ignore[arg-type]

    def _start_over(self) -> None:
        """The next sync lays every row out anew: comparing objects cannot find what changed in place."""
        self._source = None
        self._ids = np.zeros(0, dtype=np.int64)

    def _replace(self, i: int, new: Node) -> bool:
        """Put a new object for row ``i``; False if it brings a resource the table lacks."""
        if set(new.capacity) - set(self.capacity):
            return False
        if _description(self.nodes[i]) != _description(new):
            self.epoch += 1
        self.nodes[i] = new
        for resource, column in self.capacity.items():
            column[i] = new.capacity.get(resource, 0)
        self.slots[i] = new.slots
        self.limited = self.limited or new.slots > 0
        self.write(i)
        return True

    def _build(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self.rows = {node.name: i for i, node in enumerate(self.nodes)}
        size = len(self.nodes)
        resources = sorted({r for node in self.nodes for r in node.capacity})
        self.capacity = {r: np.array([n.capacity.get(r, 0) for n in self.nodes], dtype=np.int64) for r in resources}
        self.allocated = {r: np.array([n.allocated.get(r, 0) for n in self.nodes], dtype=np.int64)
                          for r in resources}
        self.tasks = np.array([n.tasks for n in self.nodes], dtype=np.int64) if size else np.zeros(0, np.int64)
        self.slots = np.array([n.slots for n in self.nodes], dtype=np.int64) if size else np.zeros(0, np.int64)
        self.limited = bool(self.slots.any())
        self.usable = np.array([n.status == READY and n.availability == ACTIVE for n in self.nodes], dtype=bool)
        self._nominated = {i for i, node in enumerate(self.nodes) if node.nominations}
        self.epoch += 1
        self.builds += 1
        self.touched.clear()

    def write(self, row: int) -> None:
        """Copy one node's changing values (allocation, task count, usability) into its row
        (its capacity changes only with a new object: :meth:`_replace`)."""
        node = self.nodes[row]
        allocated = node.allocated
        for resource, column in self.allocated.items():
            column[row] = allocated.get(resource, 0)
        self.tasks[row] = node.tasks
        self.touched.add(row)
        self.usable[row] = node.status == READY and node.availability == ACTIVE
        if node.nominations:
            self._nominated.add(row)
        else:
            self._nominated.discard(row)

    def write_rows(self, rows: list[int]) -> None:
        """:meth:`write` for many rows: one numpy assignment per column instead of one per
        value (a few rows are written one by one, where that is cheaper)."""
        if len(rows) < 16:
            for row in rows:
                self.write(row)
            return
        nodes = [self.nodes[row] for row in rows]
        for resource, column in self.allocated.items():
            column[rows] = [node.allocated.get(resource, 0) for node in nodes]
        self.tasks[rows] = [node.tasks for node in nodes]
        self.usable[rows] = [node.status == READY and node.availability == ACTIVE for node in nodes]
        self.touched.update(rows)
        nominated = self._nominated
        for row, node in zip(rows, nodes):
            if node.nominations:
                nominated.add(row)
            elif row in nominated:
                nominated.discard(row)

    def room(self, needs: dict[str, int]) -> np.ndarray:
        """Usable nodes with a free task slot and room for ``needs`` in every resource
        (nominations aside)."""
        mask = self.usable.copy()
        if self.limited:
            mask &= self.slots_free()
        for resource, amount in needs.items():
            if amount <= 0:
                continue
            if resource not in self.capacity:
                return np.zeros(len(self.nodes), dtype=bool)
            mask &= self.capacity[resource] - self.allocated[resource] >= amount
        return mask

    def slots_free(self) -> np.ndarray:
        """Nodes with no slot limit or a slot left (nominations aside)."""
        return (self.slots == 0) | (self.tasks < self.slots)

    def static(self, key: tuple, check: Callable[[Node], str | None]) -> tuple[np.ndarray, np.ndarray]:
        """Each node's static verdict (None, or the reason it fails) and the mask of nodes
        passing, cached per static part of a spec."""
        cached = self._static.get(key)
        if cached is None or cached[0] != self.epoch:
            reasons = np.array([check(node) for node in self.nodes] or [None], dtype=object)[: len(self.nodes)]
            if len(self._static) > 64:
                self._static.clear()
            cached = self._static[key] = (self.epoch, reasons, np.equal(reasons, None))  # type: ignore[call-overload]
        return cached[1], cached[2]

    def column(self, key: tuple, value: Callable[[Node], float]) -> np.ndarray:
        """A number per node that depends on what it is (a static score), cached per key
        while no node's description changes."""
        cached = self._columns.get(key)
        if cached is None or cached[0] != self.epoch:
            column = np.fromiter((value(node) for node in self.nodes), dtype=np.float64, count=len(self.nodes))
            if len(self._columns) > 64:
                self._columns.clear()
            cached = self._columns[key] = (self.epoch, column)
        return cached[1]

    def nominated(self) -> np.ndarray:
        """Rows of nodes holding room for preemptors (their fit needs the exact check)."""
        return np.array(sorted(i for i in self._nominated if self.nodes[i].nominations), dtype=np.int64)

    def groups(self, key: tuple, path_of: Callable[[Node], tuple]) -> tuple[np.ndarray, list[tuple]]:
        """Each node's preference path as an integer code, and the paths by code."""
        cached = self._codes.get(key)
        if cached is None or cached[0] != self.epoch:
            paths: dict[tuple, int] = {}
            codes = np.fromiter((paths.setdefault(path_of(node), len(paths)) for node in self.nodes),
                                dtype=np.int64, count=len(self.nodes))
            if len(self._codes) > 64:
                self._codes.clear()
            cached = self._codes[key] = (self.epoch, codes, list(paths))
        return cached[1], cached[2]

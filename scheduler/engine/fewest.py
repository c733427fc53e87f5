"""The rows of a node table in order of task count, kept across placements for as long as
the random tie-breaks last (the placer draws them anew after 512 placements), so that
finding the few nodes with the fewest tasks that fit a task takes a few steps instead of
a pass over every node.

It serves the placer's shortcut for rankings that come down to the task count
(``Placer._fewest_tasks``), where one-task jobs of many shapes each need the best node or
two: the order is sorted once per set of tie-breaks (only once they have been asked for
often enough for a sort to pay), and a
row the table rewrites after that (a placement, an undo) leaves it and is kept apart, by
its new key. The candidates are the first rows of the order that qualify and the rows
kept apart whose key is lower than theirs: exact, since every row still in the order has
the key it was sorted by.
"""

from __future__ import annotations

from bisect import insort
from typing import Callable

import numpy as np

RESORT = 1024  # rows kept apart before the order is sorted again
BUDGET = 48  # rows looked at, beyond the ones wanted, before giving up (the caller scans instead)
PATIENCE = 16  # calls with the same tie-breaks before sorting (a sort costs about as much as 8-10 scans)


class FewestTasks:
    def __init__(self) -> None:
        self._noise: np.ndarray | None = None  # the tie-breaks the order was sorted with
        self._builds = -1  # the table's layout the order was sorted for
        self._order: list[int] = []
        self._start = 0  # the rows of the order before this one are all kept apart
        self._keys = np.zeros(0)  # per row, its key when sorted
        self._apart: dict[int, float] = {}  # row -> its key now, for rows rewritten since
        self._apart_sorted: list[tuple[float, int]] = []  # (key, row), some no longer current
        self._lo = 0  # the entries of _apart_sorted before this one are no longer current
        self._calls = 0  # calls since the tie-breaks were last new
        self._drawn: np.ndarray | None = None  # the tie-breaks those calls were made with

    def best(self, table, noise: np.ndarray, wanted: int, qualifies: Callable[[int], bool],
             codes: list[int] | None = None, groups: int = 1) -> dict[int, list[int]] | None:
        """Per group (``codes``: each row's group, of ``groups``; none: one group 0), the
        ``wanted`` rows that qualify with the lowest ``tasks + noise`` (fewer if fewer
        qualify), best first, ties by row; None if that takes too long to find, or if the
        tie-breaks are too new for sorting to pay (their first few calls are scanned)."""
        if noise is not self._noise:
            self._calls = self._calls + 1 if noise is self._drawn else 1
            self._drawn = noise
            if self._calls < PATIENCE:
                return None
        self._sync(table, noise)
        apart, keys, order = self._apart, self._keys, self._order
        while self._start < len(order) and order[self._start] in apart:
            self._start += 1
        entries = self._apart_sorted
        while self._lo < len(entries) and apart.get(entries[self._lo][1]) != entries[self._lo][0]:
            self._lo += 1
        found: dict[int, list[tuple[float, int]]] = {}
        full = looked = 0
        for i in range(self._start, len(order)):
            row = order[i]
            if row in apart:
                continue
            looked += 1
            if qualifies(row):
                group = found.setdefault(0 if codes is None else codes[row], [])
                if len(group) < wanted:
                    group.append((float(keys[row]), row))
                    if len(group) == wanted:
                        full += 1
                        if full == groups:
                            break
            if looked > BUDGET + wanted * groups:
                return None
        limits = {g: (rows[-1][0] if len(rows) == wanted else float("inf")) for g, rows in found.items()}
        limit = max(limits.values(), default=float("inf")) if len(found) == groups else float("inf")
        for i in range(self._lo, len(entries)):
            key, row = entries[i]
            if key > limit:
                break
            if apart.get(row) == key and qualifies(row):
                g = 0 if codes is None else codes[row]
                if key <= limits.get(g, float("inf")):
                    found.setdefault(g, []).append((key, row))
        return {g: [row for _, row in sorted(found[g])[:wanted]] for g in sorted(found)}

    def _sync(self, table, noise: np.ndarray) -> None:
        if (noise is not self._noise or table.builds != self._builds
                or len(self._apart_sorted) - self._lo + len(table.touched) > min(RESORT, len(self._order) // 8)):
            keys = table.tasks + noise
            self._order = np.argsort(keys, kind="stable").tolist()
            self._keys = keys
            self._noise, self._builds = noise, table.builds
            self._apart, self._apart_sorted, self._start, self._lo = {}, [], 0, 0
            table.touched.clear()
            return
        for row in table.touched:
            key = float(table.tasks[row] + noise[row])
            if self._apart.get(row, float(self._keys[row])) != key:  # else its key is still the one it is sorted by
                self._apart[row] = key
                insort(self._apart_sorted, (key, row), lo=self._lo)
        table.touched.clear()

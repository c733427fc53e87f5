"""Live tasks of counted jobs per topology domain, as a worker reads them from
``tally:dom:<job>`` and keeps them while it places (each placement of a counted job
counts on every domain field of its node, as ``lua/commit.lua`` does)."""

from __future__ import annotations

from typing import Iterable, Mapping

from scheduler.model.domains import TOTAL, node_domains


class DomainCounts:
    """job -> ``<attribute>=<value>`` (and ``*``) -> live tasks."""

    def __init__(self, counts: Mapping[str, Mapping[str, int]] | None = None):
        self.counts: dict[str, dict[str, int]] = {job: dict(fields) for job, fields in (counts or {}).items()}

    def of(self, jobs: Iterable[str], field: str) -> int:
        """The tasks of ``jobs`` in one domain (``field``)."""
        counts = self.counts
        return sum(counts[job].get(field, 0) for job in jobs if job in counts)

    def total(self, jobs: Iterable[str]) -> int:
        return self.of(jobs, TOTAL)

    def add(self, job: str, node, sign: int = 1) -> None:
        """Count (or with ``sign`` -1 uncount) one task of ``job`` on ``node``."""
        fields = self.counts.setdefault(job, {})
        for field in fields_of(node):
            left = fields.get(field, 0) + sign
            if left:
                fields[field] = left
            else:
                fields.pop(field, None)

    def copy(self) -> DomainCounts:
        return DomainCounts(self.counts)


_FIELDS: dict[int, tuple] = {}  # id of a node object -> (the object, its fields and TOTAL)


def fields_of(node) -> tuple[str, ...]:
    """``node_domains(node)`` and :data:`TOTAL`, made once per node object: a worker's copy
    of a node changes in place only in what it holds (its description comes with a new
    object), and a group of a counted job counts every placement."""
    cached = _FIELDS.get(id(node))
    if cached is None or cached[0] is not node:
        if len(_FIELDS) > 65536:
            _FIELDS.clear()
        cached = _FIELDS[id(node)] = (node, (*node_domains(node), TOTAL))
    return cached[1]

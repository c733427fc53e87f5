"""The nodes a job may run on, as its static filters say (constraints, platform, plugins,
taints), among the nodes that take work (ready, active): what a spread is measured over.
Worked out once per static part of a spec, which most jobs share."""

from __future__ import annotations

from scheduler.engine.cluster import Cluster
from scheduler.engine.filters import filter_pipeline
from scheduler.model import JobSpec, Node


class Eligible:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._by_key: dict[tuple, list[Node]] = {}
        self._names: dict[tuple, set[str]] = {}

    def nodes(self, spec: JobSpec) -> list[Node]:
        key = (tuple(c.text for c in spec.constraints), spec.plugins, spec.tolerations)
        found = self._by_key.get(key)
        if found is None:
            check = filter_pipeline(spec, taints=True).static_check
            found = self._by_key[key] = [node for node in self.cluster.order
                                         if self.cluster.usable(node) and check(node) is None]
        return found

    def names(self, spec: JobSpec) -> set[str]:
        key = (tuple(c.text for c in spec.constraints), spec.plugins, spec.tolerations)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = {node.name for node in self.nodes(spec)}
        return found

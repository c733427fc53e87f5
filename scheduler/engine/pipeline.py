"""The filter pipeline (SwarmKit's): may this node take one more task of this job?

Each :class:`Filter` loads the task once (``set_task``: whatever depends on the job
alone) and is then asked about many nodes (``check``). A failing check returns its
explanation, a reason from :mod:`scheduler.model.reasons`; counted over the nodes, those
reasons are what a pending task says (``0/12 nodes available: 7 insufficient cpu, ...``).
The filters themselves are in ``filters.py`` (and ``taints.py``), which both build on
this module.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from mypy_extensions import mypyc_attr

from scheduler.model import JobSpec, Node
from scheduler.model.reasons import Explanation


@mypyc_attr(allow_interpreted_subclasses=True)  # an extension point, compiled or not
class Filter:
    """One check. ``set_task`` returns False when the job asks nothing of this filter."""

    name = ""
    static = False  # True: the verdict depends only on what the node is, so it may be cached

    def set_task(self, job: JobSpec) -> bool:
        return True

    def check(self, node: Node, job_on_node: int) -> str | None:
        """None if ``node`` passes, else the reason it does not."""
        raise NotImplementedError


class Pipeline:
    """The filters a job needs, loaded with it; ``check`` reports the first one a node fails.

    ``check(node, n) is None`` exactly when ``static_check(node) is None`` and
    ``misfit(node, job.resources, job.ports, job.max_per_node, n, job.priority, job.id) is None``: the placer
    relies on that split to cache the static half.
    """

    def __init__(self, job: JobSpec, filters: Iterable[Filter]):
        self.job = job
        self.filters = tuple(f for f in filters if f.set_task(job))
        self.static = tuple(f for f in self.filters if f.static)

    def check(self, node: Node, job_on_node: int = 0) -> str | None:
        for f in self.filters:
            reason = f.check(node, job_on_node)
            if reason is not None:
                return reason
        return None

    def static_check(self, node: Node) -> str | None:
        for f in self.static:
            reason = f.check(node, 0)
            if reason is not None:
                return reason
        return None

    def explain(self, nodes: Iterable[Node], job_counts: Mapping[str, int]) -> Explanation:
        """Reasons counted over ``nodes`` for one more task of the job, one per node."""
        result = Explanation()
        count = job_counts.get
        for node in nodes:
            result.nodes_evaluated += 1
            reason = self.check(node, count(node.name, 0))
            if reason is None:
                result.available += 1
            else:
                result.add(reason)
        return result

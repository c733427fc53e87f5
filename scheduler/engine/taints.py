"""Taints and tolerations (kube's TaintToleration): a static filter for the taints that
refuse (``NoSchedule``, ``NoExecute``) and a score for those that only discourage
(``PreferNoSchedule``). ``lua/commit.lua`` refuses untolerated taints too."""

from __future__ import annotations

from scheduler.engine.pipeline import Filter
from scheduler.model import reasons
from scheduler.model.taints import intolerable_preferences, untolerated


class Taints(Filter):
    """The node has no NoSchedule or NoExecute taint the job does not tolerate."""

    def __init__(self) -> None:
        # Set on the instance: compiled code reads Filter's own slots, not a Python
        # subclass's class attributes.
        self.name = "taints"
        self.static = True

    def set_task(self, job):
        self.tolerations = job.tolerations
        return True

    def check(self, node, job_on_node):
        if not node.taints:
            return None
        taint = untolerated(node.taints, self.tolerations)
        return None if taint is None else reasons.untolerated_taint(str(taint))


def discouraged(node, tolerations) -> int:
    """How many of the node's PreferNoSchedule taints the job does not tolerate."""
    return intolerable_preferences(node.taints, tolerations) if node.taints else 0


def prefers_against(nodes, tolerations) -> bool:
    """Whether some node has a PreferNoSchedule taint the job does not tolerate."""
    return any(node.taints and intolerable_preferences(node.taints, tolerations) for node in nodes)

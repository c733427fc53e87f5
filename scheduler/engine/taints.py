"""Taints and tolerations (kube's TaintToleration): a static filter for the taints that
refuse (``NoSchedule``, ``NoExecute``, and a ``NoExecute`` one tolerated for 0 seconds)
and what ranks a node lower: ``PreferNoSchedule`` taints the job does not tolerate (a
score), and ``NoExecute`` taints it tolerates only for ``toleration_seconds`` (after
every node that would keep the task: its replacement goes elsewhere when it can).
``lua/commit.lua`` refuses what the filter refuses."""

from __future__ import annotations

import math

from scheduler.engine.pipeline import Filter
from scheduler.model import reasons
from scheduler.model.taints import NO_EXECUTE, intolerable_preferences, tolerance_s, untolerated


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
        return None if taint is None else refusal(taint, self.tolerations)


def refusal(taint, tolerations) -> str:
    """Why ``taint`` (as ``untolerated`` found it) refuses a task; ``lua/commit.lua`` says the same."""
    if tolerance_s(taint, tolerations) is None:
        return reasons.untolerated_taint(str(taint))
    return reasons.tolerated_for_no_time(str(taint))


def discouraged(node, tolerations) -> int:
    """How many of the node's PreferNoSchedule taints the job does not tolerate."""
    return intolerable_preferences(node.taints, tolerations) if node.taints else 0


def evicts(node, tolerations) -> bool:
    """Whether the node has a NoExecute taint the job tolerates only for a while: a task
    placed there would be evicted ``toleration_seconds`` later."""
    return bool(node.taints) and any(
        taint.effect == NO_EXECUTE and tolerance_s(taint, tolerations) not in (None, math.inf)
        for taint in node.taints)


def prefers_against(nodes, tolerations) -> bool:
    """Whether some node has a PreferNoSchedule taint the job does not tolerate, or a
    NoExecute taint it tolerates only for a while (either ranks the node lower, which the
    rule path does)."""
    return any(node.taints and (intolerable_preferences(node.taints, tolerations) or evicts(node, tolerations))
               for node in nodes)

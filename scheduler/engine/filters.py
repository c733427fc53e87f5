"""Filters: may this node take one more task of this job?

SwarmKit's filters, each a :class:`~scheduler.engine.pipeline.Filter`, and the chain
they make. The dynamic filters (readiness, resources, task slots, host ports, max_per_node) put
their share of the task's needs to :func:`scheduler.fit.misfit`, so the rule the Lua commit
mirrors is written once. The static ones (plugins, constraints, platform) look only at what a node
*is*, never at what runs on it, so the placer may cache their verdict per node.

The pipeline order below is the order reasons are reported in: a node is counted once,
under the first filter it fails.
"""

from __future__ import annotations

from scheduler.model import reasons
from scheduler.engine.fit import misfit
from scheduler.engine.pipeline import Filter, Pipeline
from scheduler.engine.taints import Taints
from scheduler.model import JobSpec

_NOTHING: dict[str, int] = {}  # no resources: lets a filter ask misfit about one part of the needs
PLATFORM_KEYS = frozenset({"node.platform.os", "node.platform.arch"})


class NodeReady(Filter):
    """Status ready and availability active (not paused, not drained)."""

    name = "ready"

    def check(self, node, job_on_node):
        return misfit(node, _NOTHING, (), 0, 0, slots=False)


class Resources(Filter):
    """Room for the task's cpu, memory and named resources (``gpu``...) beyond what is allocated."""

    name = "resources"

    def set_task(self, job):
        self.needs = {resource: amount for resource, amount in job.resources.items() if amount > 0}
        self.priority, self.job = job.priority, job.id
        return bool(self.needs)

    def check(self, node, job_on_node):
        return misfit(node, self.needs, (), 0, 0, self.priority, self.job, slots=False)


class TaskSlots(Filter):
    """A free task slot on a node whose agent has slots (less those held for preemptors
    the task must leave alone); a node without slots has no such limit."""

    name = "slots"

    def set_task(self, job):
        self.priority, self.job = job.priority, job.id
        return True

    def check(self, node, job_on_node):
        return misfit(node, _NOTHING, (), 0, 0, self.priority, self.job)


class Plugins(Filter):
    """Every plugin the job needs is installed on the node."""

    name = "plugins"
    static = True

    def set_task(self, job):
        self.required = [(plugin, reasons.missing_plugin(plugin)) for plugin in job.plugins]
        return bool(self.required)

    def check(self, node, job_on_node):
        have = node.plugins
        for plugin, reason in self.required:
            if plugin not in have:
                return reason
        return None


class _ConstraintSet(Filter):
    """The job's constraints whose key ``wanted`` accepts, checked in the order written."""

    static = True

    def wanted(self, key: str) -> bool:
        raise NotImplementedError

    def reason(self, constraint) -> str:
        raise NotImplementedError

    def set_task(self, job):
        # distinct_property depends on where the job's tasks are: a domain rule, not a filter
        self.checks = [(c.get, c.test, self.reason(c)) for c in job.constraints
                       if self.wanted(c.key) and not c.dynamic]
        return bool(self.checks)

    def check(self, node, job_on_node):
        for get, test, reason in self.checks:
            if not test(get(node)):
                return reason
        return None


class Constraints(_ConstraintSet):
    """The job's constraints, other than the platform ones; the reason names the one not met."""

    name = "constraints"

    def wanted(self, key):
        return key not in PLATFORM_KEYS

    def reason(self, constraint):
        return reasons.constraint_not_met(constraint.text)


class Platform(_ConstraintSet):
    """Constraints on ``node.platform.os`` and ``node.platform.arch`` (SwarmKit's platform filter).

    A job states its platform through these constraints; a node failing one is reported as a
    platform mismatch rather than as a constraint, as SwarmKit does.
    """

    name = "platform"

    def wanted(self, key):
        return key in PLATFORM_KEYS

    def reason(self, constraint):
        return reasons.PLATFORM_MISMATCH


class HostPorts(Filter):
    """None of the job's host ports is held by a task on the node."""

    name = "ports"

    def set_task(self, job):
        self.ports = job.ports
        self.priority, self.job = job.priority, job.id
        return bool(self.ports)

    def check(self, node, job_on_node):
        return misfit(node, _NOTHING, self.ports, 0, 0, self.priority, self.job, slots=False)


class MaxPerNode(Filter):
    """Fewer than ``max_per_node`` tasks of this job on the node already."""

    name = "max_per_node"

    def set_task(self, job):
        self.limit = job.max_per_node
        return self.limit > 0

    def check(self, node, job_on_node):
        return misfit(node, _NOTHING, (), self.limit, job_on_node, slots=False)


def filter_pipeline(job: JobSpec, taints: bool = True) -> Pipeline:
    """The chain of filters, in SwarmKit's order (the order failures are reported in).
    ``taints``: whether some node may have taints (the placer leaves the taint filter out
    while none has, so that jobs without rules keep their fast path)."""
    chain: list[Filter] = [
        NodeReady(),    # status ready; availability active, not pause or drain
        Resources(),    # cpu, memory, gpu... free beyond what is allocated
        Plugins(),      # every plugin the job names is installed
        Constraints(),  # the job's constraints (other than platform)
        Platform(),     # node.platform.os / node.platform.arch constraints
    ]
    if taints:
        chain.append(Taints())  # no NoSchedule or NoExecute taint the job does not tolerate
    chain += [
        TaskSlots(),    # a free task slot, on a node whose agent has slots
        HostPorts(),    # the job's host ports are free on the node
        MaxPerNode(),   # the node holds fewer than max_per_node tasks of the job
    ]
    return Pipeline(job, chain)

"""The leaf step of a fill (:mod:`scheduler.engine.placement`, step 4): keep a heap of
candidate nodes settled, place the current task on its top node, and record the placement
on the worker's copy of the node. Runs once per task and per node that reaches a top: the
per-task part of placing, compiled with the rest of the hot path (:mod:`scheduler.native`).
"""

from __future__ import annotations

from heapq import heappop, heapreplace

from scheduler.engine.fit import misfit
from scheduler.engine.scoring import KeyFn
from scheduler.model import JobSpec, Node


class Fill:
    """The leaf step of the fill: keep heaps settled, place the current task on a top node."""

    __slots__ = ("job", "job_counts", "key", "task_id", "counted")

    def __init__(self, job: JobSpec, job_counts: dict[str, int], key: KeyFn, counted: bool = True) -> None:
        self.job, self.job_counts, self.key = job, job_counts, key
        self.counted = counted  # whether a placement counts toward the next task's job counts
        self.task_id = ""

    def settle(self, heap: list) -> None:
        """Pop top nodes until the top can take the task (now)."""
        job, counts = self.job, self.job_counts
        while heap:
            node = heap[0][3]
            if misfit(node, job.resources, job.ports, job.max_per_node, counts.get(node.name, 0),
                      job.priority, job.id) is None:
                return
            heappop(heap)

    def pick(self, heap: list) -> Node | None:
        """Place the task on the top node. The heap is settled (at build and after each
        pick) and its nodes are in no other heap, so the top still fits."""
        if not heap:
            return None
        _, rank, index, node = heap[0]
        apply(node, self.job, self.task_id, self.job_counts if self.counted else None)
        heapreplace(heap, (self.key(node, self.job_counts.get(node.name, 0)), rank, index, node))
        self.settle(heap)
        return node


def apply(node: Node, job: JobSpec, task_id: str, job_counts: dict[str, int] | None) -> None:
    """Record the placement on the worker's own copy (SwarmKit's local state), and in the
    job's counts when given."""
    allocated = node.allocated
    for resource, amount in job.resources.items():
        allocated[resource] = allocated.get(resource, 0) + amount
    for port in job.ports:
        node.ports[port] = task_id
    node.tasks += 1
    if job_counts is not None:
        job_counts[node.name] = job_counts.get(node.name, 0) + 1

"""The cluster as it is now, read into a copy to plan on (:class:`scheduler.engine.cluster.Cluster`):
what ``sched rebalance`` moves tasks around in, and what a scale-down simulation empties
nodes in, with the placement engine the workers use.

:func:`read` returns the copy with what it read (:class:`Copy`): the tasks and job fields
behind each resident, the specs, and the :class:`~scheduler.state.cluster.Reading` taken
before the nodes, which a plan carries so that applying it can refuse a cluster that has
changed since.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import orjson

from scheduler.engine.cluster import Cluster, Resident
from scheduler.engine.rules import RuleIndex
from scheduler.model import JobSpec, SchedError, Task
from scheduler.state.cluster import ClusterState, Reading
from scheduler.state.jobs import parse_stored
from scheduler.state.store import Store

# Whether a live task may be moved: (the task, its job's current spec, the job's fields, the state read).
Movable = Callable[[Task, JobSpec, dict, ClusterState], bool]


@dataclass
class Copy:
    cluster: Cluster
    reading: Reading
    tasks: dict[str, Task]  # the live tasks read, by id
    jobs: dict[str, dict[str, str]]  # version, status, spec, deployment of each job with a live task
    state: ClusterState


def read(store: Store, movable: Movable | None = None, seed: int = 0) -> Copy:
    """The cluster now. ``movable`` says which residents may move (default: none)."""
    state = store.read_cluster()
    gen, labels, anti = store.rule_index()
    specs: dict[str, JobSpec] = {}
    parsed: dict[bytes, JobSpec] = {}  # spec but its id -> spec: jobs of one template parse once
    for job_id, fields in state.jobs.items():
        text = fields.get("spec")
        if text is None:
            continue
        raw = orjson.loads(text)
        raw.pop("id", None)
        shape = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
        try:
            spec = parsed.get(shape)
            if spec is None:
                spec = parsed[shape] = parse_stored(text)
        except SchedError:
            continue  # a stored spec this version cannot read: its tasks stay where they are
        specs[job_id] = spec.with_id(job_id)
    residents = []
    for task in state.tasks:
        spec = specs.get(task.job)
        may = (movable is not None and spec is not None
               and movable(task, spec, state.jobs.get(task.job, {}), state))
        residents.append(Resident(task.id, task.job, task.node, dict(task.allocated) or
                                  (dict(spec.resources) if spec else {}), task.ports, task.priority, task.state,
                                  movable=may, domains=task.domains, started_ms=task.started_ms))
    cluster = Cluster(state.nodes, residents, specs, RuleIndex(gen, labels, anti), state.reading.epoch, seed)
    return Copy(cluster, state.reading, {t.id: t for t in state.tasks}, state.jobs, state)

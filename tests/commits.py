"""Committing hand-made placements through ``lua/commit.lua`` (via scheduler/commit.py), for
tests that need a task live on a given node without running a worker."""

from __future__ import annotations

from dataclasses import replace

from scheduler.state.commit import Planned, commit
from scheduler.model import JobSpec, parse_job


def job_spec(job: str, request: dict[str, int], ports=(), max_per_node: int = 0, priority: int = 50) -> JobSpec:
    """A spec of ``job`` asking for ``request`` (cpu in millicores, memory in bytes)."""
    return replace(parse_job({"id": job}), resources=dict(request), ports=tuple(ports),
                   max_per_node=max_per_node, priority=priority)


def commit_one(app, token: str, task_id: str, node: str, job: str, request: dict[str, int], ports=(),
               max_per_node: int = 0, priority: int = 50):
    """Commit one placement; returns 1 when assigned, else the reason it was refused."""
    outcome = commit(app.scripts, app.keys, token,
                     [Planned(task_id, node, job_spec(job, request, ports, max_per_node, priority))])
    return 1 if outcome.accepted else outcome.refused[0][1]

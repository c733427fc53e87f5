"""The Python API: everything the ``sched`` command does, as methods of a :class:`Client`.

A client speaks to one namespace of one Redis (the embedded server when no URL is
given). The CLI is built on it, so the two cannot drift::

    from scheduler import Client

    sched = Client()                      # or Client("redis://host:6379/0", namespace="prod")
    sched.add_node("n1", cpu=4, memory="8GiB", labels={"zone": "eu-1"})
    sched.submit({"id": "web", "replicas": 3, "resources": {"cpu": 0.5, "memory": "256MiB"}})
    sched.run_workers(until_idle=True)
    for task in sched.tasks(job="web"):
        print(task.id, task.state, task.node)

Its calls live one module per noun, as the CLI's commands (``scheduler/tools/cli/``) and
the HTTP API's routes (``scheduler/tools/api/``) do: ``submit`` is in ``jobs.py`` in all
three. Each module's class builds on :class:`~scheduler.client.base.ClientBase` (the
connection, and the history each change is recorded in). See ``docs/python-api.md``.
"""

from __future__ import annotations

from scheduler.client.budgets import BudgetClient
from scheduler.client.capacity import CapacityClient
from scheduler.client.config import ConfigClient
from scheduler.client.deployments import DeploymentClient
from scheduler.client.drains import DrainClient
from scheduler.client.events import EventClient
from scheduler.client.gc import GcClient
from scheduler.client.jobs import JobClient, WaitTimeout
from scheduler.client.launches import LaunchClient
from scheduler.client.layout import LayoutClient
from scheduler.client.logs import LogClient
from scheduler.client.nodes import NodeClient
from scheduler.client.pools import PoolClient
from scheduler.client.queues import QueueClient
from scheduler.client.quotas import QuotaClient
from scheduler.client.rebalance import RebalanceClient
from scheduler.client.snapshots import SnapshotClient
from scheduler.client.tasks import TaskClient
from scheduler.client.tenants import TenantClient
from scheduler.client.users import UserClient
from scheduler.client.workers import WorkerClient

__all__ = ["Client", "WaitTimeout"]


class Client(NodeClient, DrainClient, JobClient, DeploymentClient, BudgetClient, LaunchClient, TaskClient, LogClient,
             QueueClient, EventClient, ConfigClient, LayoutClient, GcClient, SnapshotClient, QuotaClient, TenantClient,
             UserClient, WorkerClient, RebalanceClient, PoolClient, CapacityClient):
    """One namespace of a scheduler. Methods raise :class:`scheduler.SchedError`
    subclasses (``SpecError``, ``NotFound``, ``RedisUnavailable``) with one sentence.

    What it changes is recorded in the history of the job, node or namespace with who did
    it (:attr:`by`): ``actor`` when given (the dashboard gives ``ui:<user>``), else the
    Redis user of the connection."""

"""The state layer's door: one :class:`Store` per namespace, with every read and write
of its nodes, jobs, tasks, nominations, tallies, quotas and tenants.

Each noun's part lives in its own module, over the keys it owns: ``nodes.py`` (nodes and
their agents), ``jobs.py`` (jobs and the scripts that create tasks), ``tasks.py``,
``nominations.py`` (preemption), ``tallies.py``, ``quotas.py`` (quotas and tenants),
``deployments.py`` (rolling updates and task health), ``budgets.py`` (disruption budgets), ``drains.py``, ``history.py`` (who did what),
``retention.py`` (what ended, and removing it when its time comes), ``layout.py`` (the
version of the namespace's key layout), ``memory.py`` (Redis memory as the namespace sees it),
``snapshots.py`` (the namespace read whole and written back), ``series.py`` (samples
over time for the dashboard), ``rules.py`` (job labels and the counts placement rules
read), ``cluster.py`` (the whole cluster read at once, for a copy to plan on),
``moves.py`` (sched rebalance's moves), ``upkeep.py`` (what the workers' upkeep has to look
at), all
built on ``namespace.py`` (the client, keys and scripts, and what is namespace-wide).
:class:`Store` brings them together, so callers hold one object. Every change that must
be atomic with the queue or the tallies goes through a Lua script, whose one Python
wrapper is in the module of the noun it changes; simple writes are plain commands.
"""

from __future__ import annotations

from scheduler.state.budgets import BudgetStore
from scheduler.state.capacity import CapacityStore
from scheduler.state.cluster import ClusterStore
from scheduler.state.deployments import DeploymentStore
from scheduler.state.drains import DrainStore
from scheduler.state.history import HistoryStore
from scheduler.state.holds import HoldStore
from scheduler.state.launches import LaunchStore
from scheduler.state.jobs import JobStore
from scheduler.state.layout import LayoutStore
from scheduler.state.memory import MemoryStore
from scheduler.state.moves import MoveStore
from scheduler.state.nodes import NodeStore
from scheduler.state.nominations import NominationStore
from scheduler.state.pools import PoolStore
from scheduler.state.quotas import QuotaStore
from scheduler.state.retention import RetentionStore
from scheduler.state.rules import RuleStore
from scheduler.state.series import SeriesStore
from scheduler.state.snapshots import SnapshotStore
from scheduler.state.tallies import TallyStore
from scheduler.state.tasks import TaskStore
from scheduler.state.upkeep import UpkeepStore


class Store(NodeStore, JobStore, TaskStore, NominationStore, TallyStore, QuotaStore, DeploymentStore,
            HistoryStore, HoldStore, LaunchStore, SnapshotStore, SeriesStore, RetentionStore, LayoutStore,
            MemoryStore, RuleStore, BudgetStore, DrainStore, ClusterStore, MoveStore, PoolStore, CapacityStore,
            UpkeepStore):
    """``Store(client, keys, scripts)``: every noun's reads and writes of one namespace."""

"""Searching, filtering and sorting the dashboard's lists: nodes, jobs and tasks.

A list's choices travel in the query string (``?q=gpu&state=pending&sort=created&order=desc``),
so a page and its JSON route show the same rows (the live updates compare the two) and a
link keeps them. Each :class:`Kind` names what its rows may be searched in, filtered on
and sorted by; :func:`choose` checks a request's choices against it (bad ones get one
sentence, as every input does) and :func:`apply` applies them, before any row limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlencode

from scheduler.model import AVAILABILITIES, JOB_TYPES, TASK_STATES, Node, Task
from scheduler.model.update import HEALTHY, STARTING, UNHEALTHY
from scheduler.tools.ui.inputs import BadInput

MAX_QUERY = 100  # characters of a search
ORDERS = ("asc", "desc")


@dataclass(frozen=True)
class Kind:
    """What one kind of row offers: ``text`` is what a search looks in, ``filters`` field ->
    (the row's value, the values offered), ``sorts`` key -> the row's sort key."""

    name: str
    text: Callable[[object], str]
    filters: dict[str, tuple[Callable[[object], str], tuple[str, ...]]]
    sorts: dict[str, Callable[[object], object]]
    default_sort: str


@dataclass(frozen=True)
class Choice:
    """A request's choices for one list."""

    kind: Kind
    q: str = ""
    filters: dict[str, str] = field(default_factory=dict)  # only the fields given a value
    sort: str = ""
    order: str = "asc"

    @property
    def narrowed(self) -> bool:
        return bool(self.q or self.filters)

    def params(self, **changes) -> dict[str, str]:
        """The query parameters that keep these choices (with ``changes``), empty ones left out."""
        values = {"q": self.q, **self.filters, "sort": "" if self.sort == self.kind.default_sort else self.sort,
                  "order": "" if self.order == "asc" else self.order, **changes}
        return {name: value for name, value in values.items() if value}

    def sort_link(self, key: str) -> str:
        """The query string of a column header: sort by ``key``, or flip the order if it already is."""
        order = ("desc" if self.order == "asc" else "asc") if key == self.sort else "asc"
        return urlencode(self.params(sort="" if key == self.kind.default_sort and order == "asc" else key,
                                     order="" if order == "asc" else order))


def choose(kind: Kind, params) -> Choice:
    """The choices in ``params`` (a query-string mapping), checked against ``kind``."""
    q = params.get("q") or ""
    if len(q) > MAX_QUERY or not q.isprintable():
        raise BadInput(f"the search must be printable text of at most {MAX_QUERY} characters.")
    filters = {}
    for name, (_, offered) in kind.filters.items():
        value = params.get(name) or ""
        if value and value not in offered:
            raise BadInput(f"{name} must be one of {', '.join(offered)}.")
        if value:
            filters[name] = value
    sort = params.get("sort") or kind.default_sort
    if sort not in kind.sorts:
        raise BadInput(f"{kind.name} can be sorted by {', '.join(kind.sorts)}, not {sort!r}.")
    order = params.get("order") or "asc"
    if order not in ORDERS:
        raise BadInput("order must be asc or desc.")
    return Choice(kind, q.strip(), filters, sort, order)


def apply(choice: Choice, rows: list) -> list:
    """The rows the choice keeps, in its order (ties keep their order)."""
    kind = choice.kind
    wanted = choice.q.lower()
    kept = [row for row in rows
            if (not wanted or wanted in kind.text(row).lower())
            and all(kind.filters[name][0](row) == value for name, value in choice.filters.items())]
    kept.sort(key=kind.sorts[choice.sort], reverse=choice.order == "desc")
    return kept


def window(choice: Choice, rows: list, limit: int) -> list:
    """The tasks a page shows when there are more than ``limit``: in the default order (by
    index), the newest; in any other, the first."""
    if choice.sort == choice.kind.default_sort and choice.order == "asc":
        return rows[-limit:] if limit else []
    return rows[:limit]


# ----------------------------------------------------------------------------- the kinds
def _share(node: Node, resource: str) -> float:
    capacity = node.capacity.get(resource, 0)
    return node.allocated.get(resource, 0) / capacity if capacity > 0 else 0.0


def _node_of(row) -> Node:
    return row[0] if isinstance(row, tuple) else row  # the nodes page lists (node, its task ids)


NODES = Kind(
    name="nodes",
    text=lambda row: " ".join([_node_of(row).name, _node_of(row).role, f"{_node_of(row).os}/{_node_of(row).arch}",
                               *(f"{k}={v}" for k, v in _node_of(row).labels.items())]),
    filters={"status": (lambda row: _node_of(row).status, ("ready", "down")),
             "availability": (lambda row: _node_of(row).availability, AVAILABILITIES)},
    sorts={"name": lambda row: _node_of(row).name,
           "status": lambda row: (_node_of(row).status, _node_of(row).availability, _node_of(row).name),
           "tasks": lambda row: (_node_of(row).tasks, _node_of(row).name),
           "cpu": lambda row: (_share(_node_of(row), "cpu"), _node_of(row).name),
           "memory": lambda row: (_share(_node_of(row), "memory"), _node_of(row).name)},
    default_sort="name",
)

JOB_STATUSES = ("running", "complete", "stopped")

JOBS = Kind(
    name="jobs",
    text=lambda job: f"{job.id} {job.type}",
    filters={"type": (lambda job: job.type, JOB_TYPES), "status": (lambda job: job.status, JOB_STATUSES)},
    sorts={"id": lambda job: job.id,
           "priority": lambda job: (job.priority, job.id),
           "created": lambda job: (job.created_ms, job.id),
           "pending": lambda job: (job.counts.get("pending", 0), job.id),
           "tasks": lambda job: (job.total, job.id)},
    default_sort="id",
)


HEALTHS = (STARTING, HEALTHY, UNHEALTHY)


def _index(task: Task) -> tuple:
    return (task.job, task.index)


TASKS = Kind(
    name="tasks",
    text=lambda task: f"{task.id} {task.node} {task.message}",
    filters={"state": (lambda task: task.state, TASK_STATES),
             "health": (lambda task: task.health, HEALTHS)},
    sorts={"index": _index,
           "version": lambda task: (task.version, _index(task)),
           "state": lambda task: (TASK_STATES.index(task.state) if task.state in TASK_STATES else 99, _index(task)),
           "node": lambda task: (task.node, _index(task)),
           "attempts": lambda task: (task.attempts, _index(task)),
           "created": lambda task: (task.created_ms, _index(task))},
    default_sort="index",
)

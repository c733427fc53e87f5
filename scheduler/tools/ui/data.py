"""Every read and write of scheduler state the dashboard makes, in one place.

Each function takes an :class:`App` (one namespace of one Redis) and returns model
objects (:class:`Node`, :class:`Task`) or the small views below; task hashes become
:class:`Task` values as soon as they are read. The rest of the dashboard never touches
Redis, keys or the store, so this module is the one to adapt when the store changes.

Writes go through the Python API (``Client``), as the CLI's do, acting for the
signed-in user (``ui:<name>``), so that each is recorded with who did it: availability,
scale and stop, and the deployment actions and ``revert``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

import orjson

from scheduler.control.rule_view import rules_now
from scheduler.client import Client
from scheduler.client.jobs import job_status
from scheduler.client.tasks import explain_message
from scheduler.control import changes, reconcile, schedule, starting
from scheduler.control.outcomes import Outcomes
from scheduler.model import ASSIGNED, DRAIN, PAUSE, PENDING, RUNNING, TASK_STATES, Node, NotFound, SpecError, Task
from scheduler.model.quantities import parse_resources
from scheduler.state.app import App
from scheduler.state.keys import Keys
from scheduler.tools.ui import why

NAMESPACES_TTL_S = 10.0  # the namespace list costs a SCAN of the whole keyspace: reuse it this long
OUTPUT_LIMIT = 65_536  # characters of a task's stdout, stderr or result shown
VERSIONS_SHOWN = 20  # a job's newest versions in its history
OVERVIEW_DEPLOYMENTS = 8  # the newest deployments on the overview
DEPLOYMENT_ACTIONS = {"promote": "promote", "pause": "pause_deployment", "resume": "resume_deployment",
                      "fail": "fail_deployment"}  # what a person may do to a deployment -> the Client method
HISTORY_SHOWN = 20  # the newest entries of a job's or node's history on its page


@dataclass
class JobView:
    id: str
    type: str
    status: str
    priority: int
    replicas: int | None  # None for a global job (one task per eligible node)
    version: int
    created_ms: int
    spec: dict
    counts: dict[str, int] = field(default_factory=dict)  # task state -> tasks, every state present

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def phase(self) -> str:
        """What the job's tasks are doing, in one word for people: a job whose status is
        ``running`` (not stopped) is *running* only while one of its tasks runs;
        *assigned* when its tasks are placed but none has started (its nodes have no
        agent, as after ``sched node add``, or theirs has yet to start them); *pending*
        when none is placed yet; *idle* with no task placed or waiting (scaled to 0).
        ``complete`` and ``stopped`` as the status says."""
        if self.status != reconcile.RUNNING_JOB:
            return self.status
        for state in (RUNNING, ASSIGNED, PENDING):
            if self.counts.get(state):
                return state
        return "idle"

    @property
    def needs(self) -> dict[str, int]:
        """What one task asks for, in stored units (the spec keeps cpu as ``500m``)."""
        return {name: amount for name, amount in parse_resources(self.spec.get("resources")).items() if amount > 0}


@dataclass
class Overview:
    nodes: list[Node]
    queues: dict[str, int]
    placed: int  # the workers' `placed` counter (stats hash)
    now_ms: int  # Redis TIME when it was read, to turn two readings into a rate
    jobs: list[JobView]
    deployments: list[dict] = field(default_factory=list)  # the newest, newest first


@dataclass
class TaskView:
    task: Task
    message: str  # why it is where it is, in words
    nodes_evaluated: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> nodes, for a pending task
    preemption: str = ""
    output: dict[str, str] | None = None  # stdout, stderr, result; None when nothing was captured
    truncated: bool = False
    attempts: list[dict] = field(default_factory=list)  # its failed placement attempts (SchedulingQueue.attempts)
    places: why.TaskPlaces | None = None  # for a pending task: each node's verdict now


@dataclass
class Rollouts:
    """A job's deployments and versions, for its page."""

    deployment: dict | None  # its latest deployment, in any state (Store.get_deployment's record)
    versions: list[dict]  # its newest versions, newest first (changes.history's records, without the spec)
    older: int  # versions older than those
    diff: dict | None = None  # two versions compared: {"from", "to", "changes"}


# ----------------------------------------------------------------------------- namespaces
def namespace_app(app: App, namespace: str) -> App:
    """The App for another namespace of the same Redis, sharing the connection."""
    if namespace == app.keys.namespace:
        return app
    return _namespace_app(app, namespace)


@lru_cache(maxsize=64)
def _namespace_app(app: App, namespace: str) -> App:
    return App(redis_url=app.url, namespace=namespace, client=app.client)


_namespaces_seen: dict[int, tuple[float, list[str]]] = {}


def namespaces(app: App) -> list[str]:
    """Namespaces that hold jobs or nodes (from a SCAN of ``sched:{*}:jobs`` and
    ``sched:{*}:nodes``), or the registry set ``sched:namespaces`` when it exists; the
    App's own namespace always. Kept for a few seconds, as the SCAN walks every key."""
    now = time.monotonic()
    cached = _namespaces_seen.get(id(app))
    if cached and now - cached[0] < NAMESPACES_TTL_S:
        return cached[1]
    found = {app.keys.namespace, *app.store.namespaces()}
    names = sorted(name for name in found if _valid_namespace(name))
    _namespaces_seen[id(app)] = (now, names)
    return names


def _valid_namespace(name: str) -> bool:
    try:
        Keys(name)
    except (ValueError, SpecError):
        return False
    return name.isprintable()


# ----------------------------------------------------------------------------- reads
def overview(app: App) -> Overview:
    store = app.store
    placed, now = store.stats().get("placed", 0), store.now_ms()
    return Overview(nodes=store.nodes(), queues=app.queue.counts(), placed=placed, now_ms=now, jobs=jobs(app),
                    deployments=store.deployments(None, OVERVIEW_DEPLOYMENTS))


def nodes(app: App) -> list[tuple[Node, list[str]]]:
    """Every node with the ids of the tasks live on it."""
    found = app.store.nodes()
    task_sets = app.store.node_task_sets([node.name for node in found])
    return [(node, sorted(ids, key=_task_order)) for node, ids in zip(found, task_sets)]


def node(app: App, name: str) -> tuple[Node, list[Task]]:
    """One node and its live tasks; NotFound if there is no such node."""
    store = app.store
    found = store.get_node(name)
    return found, app.store.tasks(sorted(store.node_task_ids(name), key=_task_order))


def jobs(app: App) -> list[JobView]:
    """Every job with its tasks counted by state: two pipelined round trips in all."""
    views = []
    for summary in app.store.job_summaries():
        view = _job_view(summary.id, summary.version, summary.status, summary.created_ms, summary.spec)
        for state in summary.task_states:
            if state in view.counts:
                view.counts[state] += 1
        view.status = _status(view)
        views.append(view)
    return views


def job(app: App, job_id: str) -> tuple[JobView, list[Task]]:
    """One job and all its tasks, in index order; NotFound if there is no such job."""
    store = app.store
    found = store.get_job(job_id)
    tasks = app.store.tasks(store.job_task_ids(job_id))
    view = _job_view(job_id, found["version"], found["status"], found["created"], found["spec"])
    for task in tasks:
        if task.state in view.counts:
            view.counts[task.state] += 1
    view.status = _status(view)
    return view, tasks


def task(app: App, task_id: str) -> TaskView:
    """One task, why it is where it is, and its captured output; NotFound if none."""
    found = app.store.get_task(task_id)
    raw_output = app.store.task_output(task_id)
    view = TaskView(task=found, message="")
    if raw_output:
        view.output = {}
        for name in ("stdout", "stderr", "result"):
            text = raw_output.get(name, "")
            view.truncated |= len(text) > OUTPUT_LIMIT
            view.output[name] = text[:OUTPUT_LIMIT]
    # The last attempt's explanation matters only while the task is still pending (as in `sched task explain`).
    explanation = orjson.loads(found.explanation) if found.explanation and found.state == PENDING else None
    view.message = explain_message(found, explanation)
    waits = starting.not_started(app.store, found)  # placed, but kept from starting
    if waits is not None:
        view.message = waits[1]
    if explanation:
        view.nodes_evaluated = int(explanation.get("nodes_evaluated", 0))
        view.reasons = dict(sorted(explanation.get("reasons", {}).items(), key=lambda item: (-item[1], item[0])))
        view.preemption = explanation.get("preemption", "")
    view.attempts = app.queue.attempts(task_id)
    if found.state == PENDING:
        try:
            spec = app.store.job_spec(found.job, found.version)
        except NotFound:  # the job is being replaced: nothing to say about this version's places
            return view
        quota, used = app.store.quota_and_usage()
        nodes = app.store.nodes()
        view.places = why.task_places(spec, found, nodes, app.store.job_tally(found.job),
                                      app.keys.namespace, quota, used, *rules_now(app.store, spec, nodes))
    return view


@dataclass
class Timeline:
    """A job's place in time and order on its page: its schedule and last launches (a
    periodic or parameterized job), and its dependencies drawn as a graph: the jobs it
    waits for (``after``), itself, and the jobs that wait for it."""

    details: dict  # control/schedule.py: next_launch, suspended, missed, launches, parent, waiting_for, failure
    upstream: list[dict] = field(default_factory=list)  # {id, state, status}: what this job waits for
    downstream: list[dict] = field(default_factory=list)  # {id, state, status}: the jobs that wait for it

    @property
    def graph(self) -> bool:
        return bool(self.upstream or self.downstream)


def timeline(app: App, view: JobView) -> Timeline:
    store = app.store
    outcomes = Outcomes()
    details = schedule.details(store, view.id, store.job_fields(view.id), outcomes)
    upstream = [{"id": after["job"], "state": after.get("state", "complete"), "status": outcomes.of(store, after["job"])}
                for after in view.spec.get("after", [])]
    downstream = []
    for summary in store.job_summaries():
        for after in summary.spec.get("after", []):
            if after["job"] == view.id:
                downstream.append({"id": summary.id, "state": after.get("state", "complete"),
                                   "status": outcomes.of(store, summary.id)})
    return Timeline(details=details, upstream=upstream, downstream=downstream)


def job_waits(app: App, view: JobView, tasks: list[Task]) -> why.JobWaits | None:
    """Why the job's pending tasks wait (None when none is pending): their last attempts,
    and one more task against the nodes now."""
    if not view.counts.get(PENDING):
        return None
    try:
        spec = app.store.job_spec(view.id)
    except NotFound:
        return None
    quota, used = app.store.quota_and_usage()
    nodes = app.store.nodes()
    return why.job_waits(spec, tasks, nodes, app.store.job_tally(view.id), app.keys.namespace, quota,
                         used, *rules_now(app.store, spec, nodes))


def rollouts(app: App, job_id: str, compare: tuple[int, int] | None = None) -> Rollouts:
    """The job's latest deployment and its newest versions, each with the fields it changed
    from the one before (``changes.history``), and, given ``compare``, the fields that
    differ between two of its versions. NotFound if there is no such job or version."""
    fields = app.store.job_fields(job_id)
    if not fields:
        raise NotFound(f"job {job_id!r} does not exist.")
    numbers = sorted(int(name.split(":", 1)[1]) for name in fields if name.startswith("spec:"))
    kept = numbers[-(VERSIONS_SHOWN + 1):]  # one more than shown: the oldest shown is diffed against it
    recent = {name: value for name, value in fields.items()
              if not name.startswith("spec:") or int(name.split(":", 1)[1]) in kept}
    deployments = app.store.deployments(job_id, limit=VERSIONS_SHOWN + 1)
    versions = changes.history(recent, deployments)
    shown = [{name: value for name, value in v.items() if name != "spec"} for v in versions[-VERSIONS_SHOWN:]]
    view = Rollouts(deployment=deployments[0] if deployments else None, versions=shown[::-1],
                    older=len(numbers) - len(shown))
    if compare is not None:
        for version in compare:
            if f"spec:{version}" not in fields:
                raise NotFound(f"job {job_id} has no version {version}.")
        old, new = (orjson.loads(fields[f"spec:{version}"]) for version in compare)
        view.diff = {"from": compare[0], "to": compare[1], "changes": changes.field_changes(old, new)}
    return view


def deployments(app: App, limit: int, job_id: str | None = None) -> list[dict]:
    """The newest deployments, newest first: the namespace's, or one job's."""
    return app.store.deployments(job_id, limit)


def _job_view(job_id: str, version, status, created, spec: dict) -> JobView:
    return JobView(id=job_id, type=spec.get("type", ""), status=status or reconcile.RUNNING_JOB,
                   priority=int(spec.get("priority", 0)), replicas=spec.get("replicas"), version=int(version or 0),
                   created_ms=int(created or 0), spec=spec, counts=dict.fromkeys(TASK_STATES, 0))


def _status(view: JobView) -> str:
    """The status `sched job ls` shows (a batch job whose tasks have all ended is complete)."""
    return job_status({"status": view.status, "spec": view.spec}, {s: n for s, n in view.counts.items() if n})


def _task_order(task_id: str):
    job_id, _, index = task_id.rpartition(".")
    return (job_id, int(index) if index.isdigit() else 0)


# ----------------------------------------------------------------------------- writes
def set_availability(app: App, name: str, availability: str, actor: str | None = None) -> dict:
    """Pause, drain or activate a node (as `sched node pause/drain/activate`); a drain
    also moves its tasks elsewhere, as their budgets allow (``waiting``: what it waits
    for, while the workers move the rest). NotFound if there is no such node."""
    client = Client(app=app, actor=actor)
    waiting = ""
    if availability == DRAIN:
        report = client.drain_report(name)
        before, moved = report["before"], report["replacements"]
        waiting = report["message"] if report["state"] == "draining" else ""
    else:
        before, moved = (client.pause(name) if availability == PAUSE else client.activate(name)), []
    return {"node": name, "before": before, "availability": availability, "moved": moved, "waiting": waiting}


def scale(app: App, job_id: str, replicas: int, actor: str | None = None) -> dict:
    return Client(app=app, actor=actor).scale(job_id, replicas)


def stop(app: App, job_id: str, actor: str | None = None) -> dict:
    return Client(app=app, actor=actor).stop(job_id)


def history(app: App, *, job: str | None = None, node: str | None = None) -> list[dict]:
    """The newest entries of the job's or node's history (who did what), newest first."""
    return Client(app=app).audit_trail(job=job, node=node)[-HISTORY_SHOWN:][::-1]


def act_on_deployment(app: App, deployment_id: str, action: str, actor: str | None = None) -> dict:
    """Promote, pause, resume or fail a deployment (as `sched deployment ACTION`); returns
    its record after. NotFound if there is none; SpecError if its state does not allow it."""
    return getattr(Client(app=app, actor=actor), DEPLOYMENT_ACTIONS[action])(deployment_id)


def revert(app: App, job_id: str, version: int, actor: str | None = None) -> dict:
    """Submit an earlier version's spec again, as a new version (`sched job revert`)."""
    fields = app.store.job_fields(job_id)
    if not fields:
        raise NotFound(f"job {job_id!r} does not exist.")
    if f"spec:{version}" not in fields:
        raise NotFound(f"job {job_id} has no version {version}.")
    return Client(app=app, actor=actor).revert(job_id, version)

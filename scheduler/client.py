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

See ``docs/python-api.md``.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator

import orjson

from scheduler.control import changes, dependencies, deployer, feed, periodic, reconcile, retention, schedule, starting
from scheduler.control.dispatch import dispatch as dispatch_job
from scheduler.control.outcomes import Outcomes
from scheduler.control.feed import EventFilter, TaskState
from scheduler.control.plan import plan as plan_job
from scheduler.control.processes import process
from scheduler.control.worker_config import WorkerConfig
from scheduler.model import (BATCH, COMPLETED, LIVE_STATES, PENDING, RUN_TO_COMPLETION, TASK_STATES, TERMINAL_STATES,
                             JobSpec, Node, SchedError, SpecError, Task, make_node)
from scheduler.model.quantities import CPU, MEMORY, decimal_memory, format_quantity
from scheduler.model.spec_text import as_spec, from_template, read_specs
from scheduler.model.taints import EFFECTS, Taint, parse_taint
from scheduler.model.errors import NotFound, PermissionDenied
from scheduler.state import acl, layout
from scheduler.state.app import App, default_namespace
from scheduler.state.dashboard_users import DashboardUsers
from scheduler.state.history import Record, Submitted
from scheduler.state.jobs import parse_stored
from scheduler.state.keys import Keys


class WaitTimeout(SchedError, TimeoutError):
    """:meth:`Client.wait` gave up."""

    exit_code = 1


_pauses = 0  # bulk submissions under way in this process (_collector_paused)
_pauses_lock = threading.Lock()
_was_enabled = True


@contextmanager
def _collector_paused():
    """Bulk submission makes a few small dicts, lists and tuples per job, none of them in a
    cycle, and keeps them: Python's cyclic collector, run every 700 new ones, would walk
    them again and again as they pile up (about half a second of CPU per 100,000 jobs).
    It is paused meanwhile, and set back as it was when the last such submission ends."""
    global _pauses, _was_enabled
    with _pauses_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


class Client:
    """One namespace of a scheduler. Methods raise :class:`scheduler.SchedError`
    subclasses (``SpecError``, ``NotFound``, ``RedisUnavailable``) with one sentence.

    What it changes is recorded in the history of the job, node or namespace with who did
    it (:attr:`by`): ``actor`` when given (the dashboard gives ``ui:<user>``), else the
    Redis user of the connection."""

    def __init__(self, url: str | None = None, namespace: str | None = None, *, app: App | None = None,
                 actor: str | None = None):
        self.app = app or App(redis_url=url, namespace=default_namespace() if namespace is None else namespace)
        self.actor = actor

    @property
    def by(self) -> str:
        """Who this client's actions are recorded as done by."""
        return self.actor or self.store.redis_user()

    def _record(self, action: str, *, job: str = "", node: str = "", **details) -> None:
        self.store.record_history([Record(action, self.actor, job=job, node=node, details=details)])

    def audit_trail(self, job: str | None = None, node: str | None = None) -> list[dict]:
        """Who did what, oldest first: to the job, to the node, or (neither given) to the
        namespace's quota and tenants. Each entry is ``{ts, action, by, details}``."""
        return self.store.read_history(job=job, node=node)

    @property
    def namespace(self) -> str:
        return self.app.keys.namespace

    @property
    def store(self):
        return self.app.store

    def close(self) -> None:
        self.app.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Nodes.
    def add_node(self, name: str, *, cpu, memory, gpu=None, resources: dict | None = None,
                 labels: dict | list | None = None, engine_labels: dict | list | None = None, os: str = "linux",
                 arch: str = "amd64", role: str = "worker", plugins: Iterable[str] = (),
                 taints: Iterable[str] = ()) -> bool:
        """Register a node (no agent: it stays ready), or update it. Returns True when new.
        ``taints``: ``KEY[=VALUE]:EFFECT`` texts; given, they replace the node's."""
        extra = dict(resources or {})
        if gpu is not None:
            extra["gpu"] = gpu
        node = make_node(name, cpu=cpu, memory=memory, resources=extra, labels=labels, engine_labels=engine_labels,
                         os=os, arch=arch, role=role, plugins=list(plugins), taints=list(taints))
        return self.put_node(node)

    def put_node(self, node: Node) -> bool:
        return self.store.put_node(node)

    def nodes(self) -> list[Node]:
        return self.store.nodes()

    def node(self, name: str) -> Node:
        return self.store.get_node(name)

    def pause(self, name: str) -> str:
        """No new tasks on the node; what runs there stays. Returns the availability before."""
        before = self.store.set_availability(name, "pause")
        self._record("pause", node=name, before=before)
        return before

    def activate(self, name: str) -> str:
        before = self.store.set_availability(name, "active")
        self._record("activate", node=name, before=before)
        return before

    def drain(self, name: str) -> list[str]:
        """Move every task off the node; returns the ids of their replacements."""
        return self.drain_report(name)["replacements"]

    def drain_report(self, name: str) -> dict:
        """Drain the node and say what happened: ``{node, before, stopped, replacements}``
        (``before``: its availability before; ``stopped``: the ids of the tasks that were
        stopped there; ``replacements``: the ids of their replacements, queued as pending)."""
        before = self.store.set_availability(name, "drain")
        report = {"node": name, "before": before, **reconcile.drain_tasks(self.store, name)}
        self._record("drain", node=name, before=before, stopped=len(report["stopped"]),
                     replacements=len(report["replacements"]))
        return report

    def remove_node(self, name: str) -> None:
        self.store.remove_node(name)

    def taint(self, name: str, taint: str | Taint) -> dict:
        """Taint a node (``KEY[=VALUE]:EFFECT``, kube's ``kubectl taint``), replacing a taint
        of the same key and effect; returns ``{node, before, after}`` (the taints as text).
        A NoExecute taint evicts running tasks that do not tolerate it."""
        parsed = parse_taint(taint) if isinstance(taint, str) else taint
        before, after = self.store.taint(name, parsed)
        self._record("taint", node=name, taint=str(parsed))
        return {"node": name, "before": before, "after": after}

    def untaint(self, name: str, key: str, effect: str = "") -> dict:
        """Remove the node's taints of ``key`` (of ``effect`` only, if given); returns
        ``{node, before, after}``."""
        if effect and effect not in EFFECTS:
            raise SpecError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}.")
        before, after = self.store.untaint(name, key, effect)
        self._record("untaint", node=name, taint=f"{key}:{effect}" if effect else key)
        return {"node": name, "before": before, "after": after}

    # Jobs.
    def submit(self, spec: dict | str | JobSpec) -> dict:
        """Create or update a job from a mapping, YAML/JSON text or a parsed spec. Returns
        ``{id, version, tasks, created}`` (the ``sched job submit --json`` shape), with
        ``unoffered`` when the job asks for resources no node of the namespace has offered."""
        parsed = as_spec(spec)  # before connecting: bad input is reported without a Redis
        results = [reconcile.submit(self.store, parsed, Submitted(by=self.actor))]
        return self._notes(results, [parsed])[0]

    def submit_many(self, specs: Iterable[dict | str | JobSpec]) -> list[dict]:
        """Submit several jobs; returns :meth:`submit`'s result for each, in order. Every
        spec is validated first: if any is not valid, the error names it (by position) and
        nothing is submitted. New jobs are written in bulk, many per round trip
        (``enqueue_many.lua``); jobs that exist already are updated one by one as
        :meth:`submit` does."""
        with _collector_paused():
            jobs = []
            templates: dict[bytes, JobSpec] = {}
            for i, spec in enumerate(specs, 1):
                template = from_template(spec, templates)
                if template is not None:
                    jobs.append((spec["id"], template))
                    continue
                try:
                    parsed = as_spec(spec)
                except SpecError as exc:
                    raise SpecError(f"document {i}: {exc}") from None
                jobs.append((parsed.id, parsed))
            results = reconcile.submit_many(self.store, jobs, Submitted(by=self.actor))
            return self._notes(results, [spec for _, spec in jobs])

    def submit_text(self, text: str) -> list[dict]:
        """Submit every job spec in a YAML or JSON text (one, several YAML documents or JSON
        lines), as ``sched job submit FILE`` does: one spec as :meth:`submit`, several as
        :meth:`submit_many`. Returns the result of each."""
        with _collector_paused():
            jobs = read_specs(text)  # before connecting: bad input is reported without a Redis
            recorded = Submitted(by=self.actor)
            if len(jobs) == 1:
                results = [reconcile.submit(self.store, jobs[0][1].with_id(jobs[0][0]), recorded)]
            else:
                results = reconcile.submit_many(self.store, jobs, recorded)
            return self._notes(results, [spec for _, spec in jobs])

    def _notes(self, results: list[dict], specs: list[JobSpec]) -> list[dict]:
        """Give each result whose job asks for a resource that no node of the namespace
        has offered an ``unoffered`` list naming those (a job may rightly wait for nodes
        yet to come, so this is said, not refused), and each whose memory is a whole
        number of decimal megabytes but not of mebibytes (``10GB``) a ``decimal_memory``
        (``"10G"``), which ``sched job submit`` notes. Every node has a cpu and a memory, so
        only other resources are looked up: one read of the namespace's resource names."""
        asked: dict[int, set[str]] = {}  # per spec: jobs made from one template share theirs
        decimal: dict[int, str | None] = {}
        for spec in specs:
            if id(spec) not in asked:
                asked[id(spec)] = {name for name, amount in spec.resources.items()
                                   if amount > 0 and name not in (CPU, MEMORY)}
                decimal[id(spec)] = decimal_memory(spec.resources.get(MEMORY, 0))
        for result, spec in zip(results, specs):
            if decimal[id(spec)] is not None:
                result["decimal_memory"] = decimal[id(spec)]
        wanted = [asked[id(spec)] for spec in specs]
        if any(asked.values()):
            offered = set(self.store.resource_names())
            for result, names in zip(results, wanted):
                if names - offered:
                    result["unoffered"] = sorted(names - offered)
        return results

    def plan(self, spec: dict | str | JobSpec) -> dict:
        """Dry run: where the tasks would go now, what they would preempt, why any would wait."""
        parsed = as_spec(spec)
        return plan_job(self.app, parsed)

    def history(self, job_id: str) -> list[dict]:
        """The job's versions, oldest first: each with its spec, the fields changed from the
        version before, whether it is current or the last healthy one, and its deployment."""
        fields = self.store.job_fields(job_id)
        if not fields:
            raise NotFound(f"job {job_id!r} does not exist.")
        return changes.history(fields, self.store.deployments(job_id, limit=10_000))

    job_history = history

    def revert(self, job_id: str, version: int) -> dict:
        """Submit the spec of an earlier ``version`` again, as a new version (rolled out as
        that spec's ``update`` block says). Returns :meth:`submit`'s result."""
        fields = self.store.job_fields(job_id)
        if not fields:
            raise NotFound(f"job {job_id!r} does not exist.")
        if f"spec:{version}" not in fields:
            raise SpecError(f"job {job_id} has no version {version}; `sched job history {job_id}` lists them.")
        return reconcile.submit(self.store, parse_stored(fields[f"spec:{version}"]),
                                Submitted("revert", self.actor, {"to": version}))

    def deployments(self, job: str | None = None, limit: int = 100) -> list[dict]:
        """Deployments, newest first (the job's, or every job's), each with its ``state``."""
        return self.store.deployments(job, limit)

    def deployment(self, deployment_id: str) -> dict:
        """One deployment: versions from and to, state, message, counts per version."""
        return self.store.get_deployment(deployment_id)

    def promote(self, deployment_id: str) -> dict:
        """Let a deployment waiting with its canary tasks roll the rest."""
        return self._record_deployment("promote", deployer.promote(self.store, deployment_id))

    def pause_deployment(self, deployment_id: str) -> dict:
        return self._record_deployment("deployment-pause", deployer.pause(self.store, deployment_id))

    def resume_deployment(self, deployment_id: str) -> dict:
        return self._record_deployment("deployment-resume", deployer.resume(self.store, deployment_id))

    def fail_deployment(self, deployment_id: str) -> dict:
        """End a deployment as failed now (with ``auto_revert``, the job goes back)."""
        return self._record_deployment("deployment-fail", deployer.fail_now(self.store, deployment_id))

    def _record_deployment(self, action: str, deployment: dict) -> dict:
        self._record(action, job=deployment["job"], deployment=deployment["id"], state=deployment["state"])
        return deployment

    def scale(self, job_id: str, replicas: int) -> dict:
        result = reconcile.scale(self.store, job_id, replicas)
        self._record("scale", job=job_id, replicas=replicas, added=len(result["added"]),
                     stopped=len(result["stopped"]))
        return result

    def stop(self, job_id: str) -> dict:
        result = reconcile.stop(self.store, job_id)
        self._record("stop", job=job_id, stopped=len(result["stopped"]))
        return result

    def job(self, job_id: str) -> dict:
        """``{id, version, status, created, spec}``. ``status`` is ``running``, ``stopped``,
        ``complete`` for a batch job none of whose tasks is pending or live any more (and
        enough of them completed), or ``failed`` (some failed for good, its deadline passed
        or a dependency could not hold: ``failure`` says why). A job held by its ``after``
        dependencies has ``waiting_for``; a periodic job ``next_launch`` (ISO 8601, UTC;
        None while suspended), ``suspended`` and its last ``launches``; a launch names its
        ``parent``. A finished job has ``finished_at`` and ``remove_at`` (ms): when it
        finished, and when retention removes it."""
        job = self.store.get_job(job_id)
        fields = self.store.job_fields(job_id)
        tasks = self.store.tasks(self.store.job_task_ids(job_id))
        states = Counter(task.state for task in tasks)
        record = {**job, "status": job_status({**job, "failure": fields.get("failure", "")}, states, tasks)}
        record.update(schedule.details(self.store, job_id, fields))
        return record

    def jobs(self) -> list[dict]:
        """Every job with its task counts by state (the ``sched job ls --json`` records);
        a periodic job's record has ``next_launch`` (ISO 8601, UTC; None while suspended)."""
        records = []
        summaries = self.store.job_summaries()  # two round trips for every job together
        launches = self.store.next_launches([job.id for job in summaries if "periodic" in job.spec])
        for job in summaries:
            counts = Counter(job.task_states)
            spec = job.spec
            record = {"id": job.id, "type": spec["type"], "priority": spec["priority"],
                      "replicas": spec.get("replicas"), "version": job.version,
                      "status": job_status({"status": job.status, "spec": spec, "failure": job.failure}, counts),
                      "tasks": dict(counts)}
            if job.id in launches:
                record["next_launch"] = schedule.iso(launches[job.id])
            records.append(record)
        return records

    # Launches: periodic and parameterized jobs.
    def launch(self, job_id: str) -> dict:
        """Launch a periodic job now, outside its schedule (``sched job launch``; Nomad's
        ``periodic force``): ``{id, launched}`` (the child job's id)."""
        result = periodic.force(self.store, Outcomes(), job_id, self.by)
        return result

    def suspend(self, job_id: str) -> dict:
        """Launch no tick of a periodic job until :meth:`resume`: ``{id, suspended, next_launch}``."""
        result = periodic.suspend(self.store, job_id, True)
        self._record("suspend", job=job_id)
        return {**result, "next_launch": schedule.iso(result["next_launch"])}

    def resume(self, job_id: str) -> dict:
        """Launch a suspended periodic job's ticks again, from the next one on."""
        result = periodic.suspend(self.store, job_id, False)
        self._record("resume", job=job_id)
        return {**result, "next_launch": schedule.iso(result["next_launch"])}

    def dispatch(self, job_id: str, meta: dict | None = None, payload: bytes | str | None = None,
                 idempotency_token: str | None = None) -> dict:
        """Launch a parameterized job with its input (``sched job dispatch``): ``{id,
        dispatched, created}``, ``dispatched`` the child job's id; with a token the job has
        seen, the child that dispatch made (``created`` False)."""
        data = payload.encode() if isinstance(payload, str) else payload
        return dispatch_job(self.store, job_id, meta or {}, data, idempotency_token, self.by)

    # Tasks.
    def task(self, task_id: str) -> Task:
        return self.store.get_task(task_id)

    def tasks(self, job: str | None = None, state: str | None = None, node: str | None = None) -> list[Task]:
        """Tasks, optionally only one job's, in one state, or on one node."""
        if state is not None and state not in TASK_STATES:
            raise SpecError(f"state {state!r} is not one of {', '.join(TASK_STATES)}.")
        if job is not None:
            self.store.get_job(job)
            ids = self.store.job_task_ids(job)
        else:
            if node is not None:
                self.store.get_node(node)
            ids = self.store.all_task_ids()
        return [t for t in self.store.tasks(ids)
                if (state is None or t.state == state) and (node is None or t.node == node)]

    def explain(self, task_id: str) -> dict:
        """Why the task is where it is (the ``sched task explain --json`` record): for a
        pending task, how many nodes were evaluated and what each lacked."""
        task = self.store.get_task(task_id)
        # The last attempt's explanation matters only while the task is still pending.
        explanation = orjson.loads(task.explanation) if task.explanation and task.state == PENDING else None
        record = {"id": task.id, "state": task.state, "version": task.version,
                  "nodes_evaluated": explanation["nodes_evaluated"] if explanation else 0,
                  "reasons": explanation["reasons"] if explanation else {},
                  "message": explain_message(task, explanation)}
        waits = starting.not_started(self.store, task)  # placed, but kept from starting
        if waits is not None:
            record.update(reasons={waits[0]: 1}, message=waits[1])
        if task.state == PENDING and self.store.is_waiting(task.id):  # held by its job's dependencies
            spec = self._job_spec_or_none(task.job)
            waits = dependencies.waiting_for(self.store, spec) if spec is not None else []
            record.update(queue="waiting", waiting_for=waits, reasons={"waiting for dependencies": 1},
                          message=(" and ".join(waits) or "waiting for its dependencies to be checked") + ".")
        if task.nominated_node:
            record["nominated_node"] = task.nominated_node
        if task.health:  # a running task its agent has looked at
            record["health"] = task.health
            if task.health_check:
                record["health_check"] = task.health_check
        spec = self._job_spec_or_none(task.job)
        if spec is not None and spec.gang:
            record["gang"] = {"job": spec.id, "size": spec.replicas, "min_available": spec.gang,
                              "waits": bool(explanation and explanation.get("gang"))}  # waits whole, with its gang
        if spec is not None and spec.tenant != "default":
            record["tenant"] = spec.tenant
        return record

    def _job_spec_or_none(self, job_id: str):
        try:
            return self.store.job_spec(job_id)
        except Exception:
            return None

    # Quotas and tenants.
    def set_quota(self, *, cpu=None, memory=None, tasks: int | None = None, resources: dict | None = None) -> dict:
        """Set this namespace's quota (limits not given are left as they are); returns it."""
        from scheduler.model.quantities import parse_resources
        raw = dict(resources or {})
        if cpu is not None:
            raw["cpu"] = cpu
        if memory is not None:
            raw["memory"] = memory
        limits = parse_resources(raw, "quota") if raw else {}
        if tasks is not None:
            if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0:
                raise SpecError("quota tasks must be a whole number of 0 or more.")
            limits["tasks"] = tasks
        self.store.set_quota(limits)
        record = self.quota()
        self._record("quota-set", quota=_quantities(record["quota"]))
        return record

    def remove_quota(self) -> bool:
        removed = self.store.remove_quota()
        self._record("quota-rm", removed=removed)
        return removed

    def quota(self) -> dict:
        """This namespace's quota and usage: {namespace, quota: {resource: limit}, used: {...}}."""
        quota, usage = self.store.quota(), self.store.usage()
        used = {k: v for k, v in usage.items() if not k.startswith("tenant:")}
        return {"namespace": self.namespace, "quota": quota, "used": used}

    def quotas(self) -> list[dict]:
        """Every namespace with a quota in this Redis, with its usage."""
        out = []
        for ns in self.store.quota_namespaces():
            other = self if ns == self.namespace else Client(app=App(client=self.app.client, namespace=ns))
            out.append(other.quota())
        return out

    def set_tenant(self, name: str, weight: float) -> dict:
        from scheduler.model.names import check_tenant
        check_tenant(name)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise SpecError(f"tenant {name}: weight must be a number above 0.")
        self.store.set_tenant_weight(name, weight)
        self._record("tenant-set", tenant=name, weight=f"{weight:g}")
        return next(t for t in self.tenants() if t["name"] == name)

    def remove_tenant(self, name: str) -> bool:
        removed = self.store.remove_tenant(name)
        self._record("tenant-rm", tenant=name, removed=removed)
        return removed

    def tenants(self) -> list[dict]:
        """Each tenant (with a weight, or holding resources): weight, usage, and dominant
        share (the largest of usage / cluster capacity over resources, divided by weight)."""
        weights, usage = self.store.tenant_weights(), self.store.usage()
        capacity: dict[str, int] = {}
        for node in self.store.nodes():
            if node.status == "ready":
                for r, amount in node.capacity.items():
                    capacity[r] = capacity.get(r, 0) + amount
        names = set(weights)
        per: dict[str, dict[str, int]] = {}
        for key, value in usage.items():
            if key.startswith("tenant:"):
                _, tenant, resource = key.split(":", 2)
                names.add(tenant)
                per.setdefault(tenant, {})[resource] = value
        out = []
        for name in sorted(names):
            used = per.get(name, {})
            weight = weights.get(name, 1.0)
            top = max([used.get(r, 0) / c for r, c in capacity.items() if c > 0] or [0.0])
            out.append({"name": name, "weight": weight, "used": used, "dominant_share": round(top / weight, 4)})
        return out

    # Redis ACL users (the admin's: see docs/security.md).
    def create_user(self, name: str, namespace: str, role: str) -> dict:
        """A Redis user confined to ``namespace`` with ``role``'s commands, on every server:
        ``{name, namespace, role, url, servers, missed, persisted}``; ``url`` (this
        client's URL with the user's credentials) holds the password, which is kept
        nowhere else."""
        record = acl.AclUsers(self.app.client).create(name, namespace, role)
        record["url"] = acl.user_url(self.app.url, name, record.pop("password"))
        return record

    def users(self) -> list[dict]:
        """The Redis users ``create_user`` made: ``{name, namespace, role, created, active}``."""
        return acl.AclUsers(self.app.client).records()

    def remove_user(self, name: str) -> dict:
        return acl.AclUsers(self.app.client).remove(name)

    def sync_users(self) -> list[dict]:
        """Set every user ``create_user`` made again on every server (after a restart of a
        server that keeps no ACL file, or a new replica)."""
        return acl.AclUsers(self.app.client).sync()

    def dashboard_users(self) -> DashboardUsers:
        """Who may sign in to ``sched ui`` (``sched:ui:users``, shared by every namespace)."""
        return DashboardUsers(self.app.client)

    def refusal(self, exc: BaseException, doing: str) -> PermissionDenied:
        """The one sentence for Redis refusing this client's user something (``NOPERM``)
        while ``doing`` (``sched job submit``...)."""
        return PermissionDenied(acl.refusal_sentence(self.app.client, exc, self.namespace, doing))

    def logs(self, task_id: str) -> dict:
        """What the task printed: ``{id, state, stdout, stderr, stdout_bytes, stderr_bytes}``
        plus ``result``/``traceback`` (a function) or ``exit_code`` (a command) once known.
        Each stream keeps its last 64 KiB; the byte counts say how much was written."""
        task = self.store.get_task(task_id)
        fields = self.store.task_output(task_id)
        record = {"id": task.id, "state": task.state, "stdout": fields.get("stdout", ""),
                  "stderr": fields.get("stderr", ""), "stdout_bytes": int(fields.get("stdout_bytes", 0)),
                  "stderr_bytes": int(fields.get("stderr_bytes", 0))}
        for name in ("result", "traceback"):
            if name in fields:
                record[name] = fields[name]
        if "exit_code" in fields:
            record["exit_code"] = int(fields["exit_code"])
        return record

    def follow_logs(self, task_id: str, poll_s: float = 0.5) -> Iterator[tuple[str, str]]:
        """(stream, text) as the task prints it, until it has ended and all is read. Text
        that scrolled out of the kept 64 KiB before it was read is skipped."""
        seen = {"stdout": 0, "stderr": 0}
        while True:
            record = self.logs(task_id)
            for stream in ("stdout", "stderr"):
                total, kept = record[f"{stream}_bytes"], record[stream].encode()
                if total > seen[stream]:
                    fresh = kept[-min(len(kept), total - seen[stream]):]
                    seen[stream] = total
                    yield stream, fresh.decode("utf-8", errors="replace")
            if record["state"] not in (PENDING, *LIVE_STATES):
                return
            time.sleep(poll_s)

    def wait(self, job_id: str, state: str = "running", count: int | None = None,
             timeout: float = 60.0) -> list[Task]:
        """Wait until ``count`` tasks of the job (default: its replicas) are in ``state``,
        and return them. Woken by the job's events, with a look every second besides.
        Raises :class:`WaitTimeout` after ``timeout`` seconds."""
        if state not in TASK_STATES:
            raise SpecError(f"state {state!r} is not one of {', '.join(TASK_STATES)}.")
        wanted = count if count is not None else self.store.get_job(job_id)["spec"].get("replicas", 1)
        deadline = time.monotonic() + timeout
        with self.store.subscribe() as events:
            while True:
                done = [t for t in self.store.tasks(self.store.job_task_ids(job_id)) if t.state == state]
                if len(done) >= wanted:
                    return done
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"job {job_id}: {len(done)} of {wanted} task(s) {state} after {timeout:g} s.")
                for event in events.iter(timeout=min(1.0, left)):
                    if event.get("job") == job_id:
                        break

    # Queue and events.
    def queue_counts(self) -> dict[str, int]:
        """Tasks in each queue: active, backoff, unschedulable, inflight."""
        return self.app.queue.counts()

    def events(self, timeout: float | None = None, *, since: str | None = None, group: str | None = None,
               consumer: str | None = None, types: Iterable[str] | str = (), job: Iterable[str] | str = (),
               node: Iterable[str] | str = (), claim_idle: float = 60.0, batch: int = 500):
        """Follow the namespace's events (see ``docs/events.md``), until ``timeout`` seconds
        pass without one (forever with None).

        Called with neither ``since`` nor ``group`` (nor a filter), it yields each event as a
        dict, from the moment of the call, as it always has. Otherwise it reads the
        namespace's stream and yields ``(stream id, event)`` pairs, so that a program can
        store the id and carry on exactly after it (``since=id``) after a restart or a
        failover:

        - ``since``: ``"start"`` (everything the stream keeps), ``"now"`` (the default), an
          id, a time (ISO 8601) or an age (``"10m"``).
        - ``group`` and ``consumer``: read as one consumer of a consumer group (created to
          start after ``since`` if it does not exist): each event goes to one consumer of
          the group and is acknowledged once handled (when the next one is asked for; use
          ``with`` around the loop so that the last one is, too); a consumer's events left
          pending for ``claim_idle`` seconds (it died) are claimed by another. A read
          takes up to ``batch`` events for this consumer.
        - ``types`` (``task``, ``node``, ``job``), ``job`` and ``node`` keep only the events
          of those types, about those jobs, naming those nodes.

        The stream form returns an :class:`scheduler.control.feed.EventFeed`."""
        wanted = EventFilter.of(types, job, node)
        if since is None and group is None and wanted == EventFilter():
            subscription = self.store.subscribe()

            def follow() -> Iterator[dict]:
                with subscription:
                    yield from subscription.iter(timeout=timeout)

            return follow()
        return feed.follow(self.store, since=since, group=group, consumer=consumer, wanted=wanted, timeout=timeout,
                           claim_idle_s=claim_idle, batch=batch)

    def watch(self, job: str, timeout: float | None = None) -> Iterator[TaskState]:
        """The job's tasks as :class:`TaskState` (id, state, node, stream id): each as it is
        now, from one consistent snapshot, then each change of a task's state or node as it
        comes (new tasks too), none missed or repeated; until ``timeout`` seconds pass
        without a change (forever with None)."""
        return feed.watch(self.store, job, timeout)

    def stream_info(self) -> dict:
        """The event stream: entries kept now, the bound, bytes in memory, the ids of its
        oldest and newest entries ("" when empty), and its consumer groups."""
        stream = self.store.stream
        oldest, newest = stream.oldest_id(), stream.last_id()
        return {"namespace": self.namespace, "key": self.app.keys.stream, "entries": stream.length(),
                "maxlen": stream.maxlen(), "memory_bytes": stream.memory(),
                "oldest": oldest, "newest": "" if newest == "0-0" else newest, "groups": stream.groups()}

    def keep_events(self, entries: int) -> None:
        """Keep about ``entries`` events in the stream from now on (0: no stream)."""
        self.store.stream.set_maxlen(entries)

    # Settings and retention.
    def config(self) -> dict:
        """The namespace's settings: the retention settings (seconds, and a count) and
        ``stream_maxlen``, each with whether it is set or the default."""
        settings = self.store.retention()
        stored = self.store.config_fields()
        out = {name: {"value": value, "default": name not in stored}
               for name, value in vars(settings).items()}
        out["stream_maxlen"] = {"value": self.store.stream.maxlen(), "default": "stream_maxlen" not in stored}
        return out

    def set_config(self, **values) -> dict:
        """Set settings: ``task_retention``, ``job_retention`` (seconds, or a text such as
        ``90s``, ``1h``, ``7d``), ``ended_tasks_per_job`` and ``stream_maxlen`` (counts).
        Each is checked before any is written. Returns :meth:`config`."""
        for name in values:
            _check_setting(name)
        entries = values.pop("stream_maxlen", None)
        if entries is not None:
            if isinstance(entries, str) and entries.strip().isdigit():
                entries = int(entries)
            if isinstance(entries, bool) or not isinstance(entries, int) or entries < 0:
                raise SpecError(f"stream_maxlen must be a whole number of entries, 0 or more, not {entries!r}.")
        self.store.set_retention(values)
        if entries is not None:
            self.store.stream.set_maxlen(entries)
        self._record("config-set", **{k: str(v) for k, v in {**values, **({} if entries is None else
                                                                         {"stream_maxlen": entries})}.items()})
        return self.config()

    def unset_config(self, *names: str) -> dict:
        """Set these settings back to their defaults. Returns :meth:`config`."""
        for name in names:
            _check_setting(name)
        self.store.unset_settings(list(names))
        self._record("config-unset", settings=",".join(names))
        return self.config()

    def memory(self) -> dict:
        """Redis's memory as this namespace sees it: ``used_memory``, ``maxmemory`` (0: no
        limit), ``maxmemory_policy``, the namespace's ``live_tasks``, ``jobs`` and
        ``nodes``, and ``bytes_per_live_task``, ``bytes_per_job`` (its tasks apart) and
        ``bytes_per_node``, averaged over a sample of each (``MEMORY USAGE``)."""
        return self.store.memory_report()

    def layout(self) -> int:
        """The version of the namespace's key layout (0: empty; scheduler/state/layout.py)."""
        return self.store.layout_version()

    def upgrade(self) -> dict:
        """Move the namespace's key layout forward to the one this sched writes, in place
        (``sched upgrade``). Returns ``{namespace, from, to, steps}``."""
        return self.store.upgrade_layout()

    def gc(self, dry_run: bool = False) -> dict:
        """Remove now the ended work that retention would remove (``sched gc``): ended
        tasks of running jobs past ``task_retention`` or beyond ``ended_tasks_per_job``,
        and finished jobs past their retention. Returns what it removed (``dry_run``:
        what it would remove of the work counted so far, removing nothing)."""
        done = retention.collect(self.store, dry_run=dry_run)
        record = {"namespace": self.namespace, **done.as_dict()}
        if not dry_run and done.anything:
            self._record("gc", jobs=len(done.jobs_removed), tasks=done.tasks_removed + done.job_tasks_removed)
        return record

    # Snapshots (docs/reliability.md, Snapshots).
    def snapshot_save(self, target, tries: int = 3, max_pause: float = 5.0) -> dict:
        """Write the namespace's whole state, as of one moment, to ``target`` (a path,
        gzip-compressed when it ends in ``.gz``, or a binary file open for writing): up to
        ``tries`` reads while it works on, then, if each met a change, one with the
        server's writes paused for at most ``max_pause`` seconds (0: never). Returns
        ``{namespace, keys, saved_at, layout, source_namespace, tries, paused_ms}``.
        Raises ``SpecError`` (``NamespaceBusy``) when no read was whole."""
        from scheduler.control import snapshot  # gzip and tempfile: only for this

        return snapshot.save(self.store, target, tries, int(max_pause * 1000)).as_dict()

    def snapshot_restore(self, source, namespace: str | None = None) -> dict:
        """Load a snapshot file into ``namespace`` (by default the one it was saved from),
        which must be empty: a ``SpecError`` in one sentence otherwise, before anything is
        written; a restore cut short is finished by running it again. Returns
        ``{namespace, keys, saved_at, layout, source_namespace, tries, paused_ms}``."""
        from pathlib import Path

        from scheduler.control import snapshot

        path = Path(source)
        header, count = snapshot.read_header(path)
        target = namespace or header.namespace
        app = self.app if target == self.namespace else App(client=self.app.client, namespace=target)
        return snapshot.restore(app.store, path, header, count).as_dict()

    # Running workers here.
    def run_workers(self, concurrency: int = 1, until_idle: bool = False, config: WorkerConfig | None = None,
                    namespaces: list[str] | None = None) -> dict:
        """Run scheduler workers against this namespace (in this process, or
        ``concurrency`` child processes) until they are stopped, or with ``until_idle``,
        until nothing is left that could be scheduled. Returns their summed counts.
        ``namespaces`` serves those cells instead, in turn (``[]``: every registered one,
        followed as new ones appear)."""
        config = config or WorkerConfig(until_idle=until_idle)
        self.app.url  # start the embedded server if there is no URL; a real one is waited for by each worker
        target = self.namespace if namespaces is None else list(namespaces)
        for namespace in [target] if isinstance(target, str) else target:
            self._check_access(namespace)
            layout.check_before_serving(self.app.url, Keys(namespace))  # another key layout: one sentence now
        return process("run-workers")(self.app.url, target, concurrency, config)

    def _check_access(self, namespace: str) -> None:
        """A user whose role does not allow a worker in ``namespace`` hears so before the
        workers start (a NOPERM is not waited out like a Redis that is away)."""
        acl.check_access(self.app.url, Keys(namespace))


def _quantities(values: dict) -> str:
    """Limits in words, as history details: ``cpu=4,memory=8Gi,tasks=10``."""
    return ",".join(f"{k}={v if k == 'tasks' else format_quantity(k, v)}" for k, v in sorted(values.items()))


def _check_setting(name: str) -> None:
    """A setting's name, or one sentence (with a did-you-mean) for one that is not."""
    import difflib

    from scheduler.model.retention import SETTINGS

    known = (*SETTINGS, "stream_maxlen")
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"{name!r} is not a setting{hint}; the settings are {', '.join(known)}.")


def job_status(job: dict, states: Counter, tasks: list[Task] | None = None) -> str:
    """The stored status, except that a job failed with a reason (its deadline passed, a
    dependency could not hold) is ``failed``, and a running batch or sysbatch job whose
    tasks have all ended (none pending or live) is ``complete`` when at least
    ``replicas`` of them completed (a sysbatch job: the last on each node), else
    ``failed``. Computed when read, so scaling it up again simply makes it running again."""
    if job.get("failure"):
        return "failed"
    spec = job["spec"]
    if (job["status"] == "running" and spec["type"] in RUN_TO_COMPLETION and "periodic" not in spec
            and "parameterized" not in spec and states and all(state in TERMINAL_STATES for state in states)):
        if spec["type"] == BATCH:
            return "complete" if states.get(COMPLETED, 0) >= spec.get("replicas", 1) else "failed"
        if tasks is not None:
            last: dict[str, Task] = {}
            for task in tasks:
                if task.index >= last.get(task.pin, task).index:
                    last[task.pin] = task
            return "complete" if all(task.state == COMPLETED for task in last.values()) else "failed"
        return "complete"
    return job["status"]


def explain_message(task: Task, explanation: dict | None) -> str:
    """Why ``task`` is where it is, in words: its last attempt's ``explanation`` (a pending
    task's), else what its state says."""
    if explanation:
        return explanation["message"]
    if task.state in LIVE_STATES:
        return f"placed on node {task.node}."
    if task.state == PENDING:
        return "waiting for a scheduler worker; no attempt has been made yet."
    return task.message or f"{task.state}."

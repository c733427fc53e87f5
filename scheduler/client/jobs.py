"""Jobs: submitting them (one, many, or a file's text), planning, scaling, stopping,
their versions, and waiting for their tasks."""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterable

from scheduler.client.base import ClientBase
from scheduler.control import changes, reconcile, schedule
from scheduler.control.plan import plan as plan_job
from scheduler.model import (BATCH, COMPLETED, RUN_TO_COMPLETION, TASK_STATES, TERMINAL_STATES, JobSpec, SchedError,
                             SpecError, Task)
from scheduler.model.errors import NotFound
from scheduler.model.quantities import CPU, MEMORY, decimal_memory
from scheduler.model.spec_text import as_spec, from_template, read_specs
from scheduler.state.history import Submitted
from scheduler.state.job_pages import job_page_steps
from scheduler.state.job_reads import read_job_steps
from scheduler.state.read_steps import BLOCKING_CALLS, Batch, Steps, run
from scheduler.state.jobs import parse_stored


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


class JobClient(ClientBase):
    """Submit, plan, scale, stop and revert jobs; read them; wait for their tasks."""

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

    def scale(self, job_id: str, replicas: int) -> dict:
        result = reconcile.scale(self.store, job_id, replicas)
        self._record("scale", job=job_id, replicas=replicas, added=len(result["added"]),
                     stopped=len(result["stopped"]))
        return result

    def stop(self, job_id: str) -> dict:
        result = reconcile.stop(self.store, job_id)
        self._record("stop", job=job_id, stopped=len(result["stopped"]))
        return result

    def job(self, job_id: str, history: bool = False) -> dict:
        """``{id, version, status, created, spec}``. ``status`` is ``running``, ``stopped``,
        ``complete`` for a batch job none of whose tasks is pending or live any more (and
        enough of them completed), or ``failed`` (some failed for good, its deadline passed
        or a dependency could not hold: ``failure`` says why). A job held by its ``after``
        dependencies has ``waiting_for``; a periodic job ``next_launch`` (ISO 8601, UTC;
        None while suspended), ``suspended`` and its last ``launches``; a launch names its
        ``parent``. A finished job has ``finished_at`` and ``remove_at`` (ms): when it
        finished, and when retention removes it. With ``history``, also who did what to
        it (``history``, :meth:`audit_trail`), read with the rest. Two round trips
        (state/job_reads.py), and a few more for a launcher's launches and a held job's
        dependencies."""
        return self.job_with_index(job_id, history)[0]

    def job_with_index(self, job_id: str, history: bool = False) -> tuple[dict, str]:
        """:meth:`job`, and the id of the namespace's newest event as of it (read in the
        same step): the events after it are the changes since."""
        return run(self.store, self.job_steps(job_id, history))

    def job_steps(self, job_id: str, history: bool = False) -> Steps:
        """:meth:`job_with_index` as steps (state/read_steps.py), for a caller that runs them
        on an event loop."""
        view = yield from read_job_steps(self.store, job_id, history)
        fields = view.fields
        job = {"id": job_id, "version": int(fields["version"]), "status": fields.get("status", "running"),
               "created": int(fields.get("created", 0)), "spec": view.spec}
        states = Counter(view.task_states)
        record = {**job, "status": job_status({**job, "failure": fields.get("failure", "")}, states, view.tasks)}
        if schedule.details_read(fields):
            yield BLOCKING_CALLS  # a launcher's launches, a held job's dependencies
        record.update(schedule.details(self.store, job_id, fields, remove_at=lambda: view.remove_at))
        if history:
            record["history"] = view.history
        return record, view.newest_event

    def jobs(self) -> list[dict]:
        """Every job with its task counts by state (the ``sched job ls --json`` records);
        a periodic job's record has ``next_launch`` (ISO 8601, UTC; None while suspended or
        when its schedule has ended) and ``suspended``."""
        return run(self.store, self._job_records(self.store.job_summaries_steps(self.store.job_ids())))

    def jobs_page(self, per_page: int = 100, next_token: str | None = None, prefix: str = "", keep=None,
                  budget: int = 10) -> tuple[list[dict], str | None]:
        """A page of :meth:`jobs`' records, in id order: up to ``per_page`` from the job
        ``next_token`` on (None: the first), of ids starting with ``prefix``, and those
        ``keep`` (a function of a record) takes; and the next page's token (None after the
        last). A page reads its own jobs only (state/job_pages.py); with ``keep``, at most
        ``budget`` pages' worth are looked at, so a page may hold fewer records and still
        have a next one, as Nomad's filtered pages do."""
        return self.jobs_page_with_index(per_page, next_token, prefix, keep, budget)[:2]

    def jobs_page_with_index(self, per_page: int = 100, next_token: str | None = None, prefix: str = "", keep=None,
                             budget: int = 10) -> tuple[list[dict], str | None, str]:
        """:meth:`jobs_page`, and the id of the namespace's newest event, read before the
        page (in its first round trip)."""
        return run(self.store, self.jobs_page_steps(per_page, next_token, prefix, keep, budget))

    def jobs_page_steps(self, per_page: int = 100, next_token: str | None = None, prefix: str = "", keep=None,
                        budget: int = 10) -> Steps:
        """:meth:`jobs_page_with_index` as steps (state/read_steps.py)."""
        records: list[dict] = []
        token, newest = next_token, None
        for _ in range(budget if keep is not None else 1):
            page = yield from job_page_steps(self.store, per_page, token, prefix)
            newest = newest or page.newest_event
            for record in (yield from self._job_records(page.jobs)):
                if keep is None or keep(record):
                    if len(records) == per_page:
                        return records, record["id"], newest
                    records.append(record)
            token = page.next_token
            if token is None:
                break
        return records, token, newest or "0-0"

    def _job_records(self, summaries) -> Steps:
        """The records of ``summaries`` (steps: periodic jobs' next launches are read)."""
        if not isinstance(summaries, list):
            summaries = yield from summaries
        records = []
        briefs = [job.brief for job in summaries]
        periodic = [job.id for job, brief in zip(summaries, briefs) if "periodic" in brief]
        launches = {}
        if periodic:
            batch = Batch()
            batch.execute_command("ZMSCORE", self.store.keys.launchers, *periodic)
            [scores] = yield batch
            launches = {job_id: float(score) for job_id, score in zip(periodic, scores) if score is not None}
        for job, brief in zip(summaries, briefs):
            counts: dict[str, int] = {}
            for state in job.task_states:
                counts[state] = counts.get(state, 0) + 1
            # job_status answers the stored status but for these (most jobs run, or wait, as stored)
            ends = job.status == "running" and brief["type"] in RUN_TO_COMPLETION and TERMINAL_STATES.issuperset(counts)
            status = job_status({"status": job.status, "spec": brief, "failure": job.failure}, counts) \
                if job.failure or (ends and counts) else job.status
            record = {"id": job.id, "type": brief["type"], "priority": brief["priority"],
                      "replicas": brief["replicas"], "version": job.version, "status": status, "tasks": counts}
            if job.id in launches:
                record["next_launch"] = schedule.iso(launches[job.id])
                record["suspended"] = job.suspended
            records.append(record)
        return records

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


def job_status(job: dict, states: dict[str, int], tasks: list[Task] | None = None) -> str:
    """The stored status, except that a job failed with a reason (its deadline passed, a
    dependency could not hold) is ``failed``, and a running batch or sysbatch job whose
    tasks have all ended (none pending or live) is ``complete`` when at least
    ``replicas`` of them completed (a sysbatch job: the last on each node), else
    ``failed``. Computed when read, so scaling it up again simply makes it running again."""
    if job.get("failure"):
        return "failed"
    spec = job["spec"]
    if (job["status"] == "running" and spec["type"] in RUN_TO_COMPLETION and "periodic" not in spec
            and "parameterized" not in spec and states and TERMINAL_STATES.issuperset(states)):
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

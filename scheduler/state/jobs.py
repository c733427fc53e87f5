"""Jobs in Redis: their hashes and specs, the tasks they were given, and the scripts
that create tasks (``enqueue.lua``, ``enqueue_many.lua``).

A job's hash holds its current spec and the spec of every version (normalised JSON,
``id`` first); :func:`parse_stored` parses one, sharing what jobs made from one template
have in common.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import queue
import threading
import time
from functools import lru_cache

import orjson
import redis
from redis.exceptions import NoScriptError

from scheduler.model import JobSpec, check_job_id, parse_job
from scheduler.model.errors import NotFound, RedisUnavailable
from scheduler.model.names import is_job_id
from scheduler.state.hashes import hgetall_many
from scheduler.state.history import HISTORY_KEEP, Record, record_args
from scheduler.state.namespace import NamespaceStore
from scheduler.state.read_steps import Batch, Steps, run

ENQUEUE_CHUNK = 500  # tasks per enqueue.lua call: each call takes a few ms (docs/reliability.md)
# Jobs per enqueue_many.lua call. Redis keeps every write of a script call for the AOF
# until the call ends; at 500 one-task jobs (about 5,000 writes) that outgrows the CPU's
# caches, and the same jobs cost Redis about a quarter more CPU than in calls of 100
# (the same instructions: benchmarks-history.md).
BULK_JOBS = 100
_PIPELINED = 4  # enqueue_many.lua calls per round trip
SUMMARY_CHUNK = 500  # jobs per job_page.lua call (and tasks per task_states.lua call, twice that)
_READS_PER_ROUND_TRIP = 8  # such calls sent at once (a page of 1000 jobs: two; every job: a few MB a reply)


def shares_value(spec: JobSpec) -> str:
    """A job's ``jobs:shares`` entry (what claim.lua needs): ``tenant|gang size|cpu=500,...``."""
    needs = ",".join(f"{r}={a}" for r, a in spec.resources.items() if a > 0)
    return f"{spec.tenant}|{spec.gang}|{needs}"


def job_state(fields: dict) -> str:
    """What ``enqueue.lua`` compares to see whether a job changed since it was read."""
    if not fields:
        return ""
    return f"{fields.get('version', '')}|{fields.get('next_index', '')}|{fields.get('status', '')}"


def _chunks(jobs: list[tuple[str, JobSpec]], limit: int, most_jobs: int):
    """(job id, spec) pairs in runs of at most ``limit`` tasks and ``most_jobs`` jobs (a job
    of more than ``limit`` tasks alone)."""
    chunk: list[tuple[str, JobSpec]] = []
    tasks = 0
    for job in jobs:
        replicas = job[1].replicas
        if chunk and (tasks + replicas > limit or len(chunk) >= most_jobs):
            yield chunk
            chunk, tasks = [], 0
        chunk.append(job)
        tasks += replicas
    if chunk:
        yield chunk


def _text_after_id(spec: JobSpec) -> str:
    """The stored spec text (normalised JSON, ``id`` first) after ``{"id":"<id>``: what
    jobs that differ only in their id share (enqueue_many.lua puts each id in front)."""
    text = orjson.dumps(spec.raw).decode()
    head = '{"id":"' + spec.id
    if not text.startswith(head + '"'):
        raise ValueError(f"job {spec.id}: its stored spec does not start with its id.")
    return text[len(head):]


@dataclasses.dataclass(slots=True)
class JobSummary:
    id: str
    version: int
    status: str
    created_ms: int
    spec_text: str  # as stored (normalised JSON)
    task_states: list[str]
    failure: str = ""  # why it ended as failed (its deadline passed, a dependency could not hold)
    suspended: bool = False  # a periodic job that launches no tick until resumed

    @property
    def spec(self) -> dict:
        """The spec, parsed (a new dict each time)."""
        return orjson.loads(self.spec_text)

    @property
    def brief(self) -> dict:
        """What a list of jobs reads of the spec (:func:`spec_brief`)."""
        return spec_brief(self.spec_text)


def spec_brief(text: str) -> dict:
    """The fields of a stored spec that a job's list record and its status read: ``type``,
    ``priority``, ``replicas``, and ``periodic`` and ``parameterized`` when the spec has
    them. Jobs made from one template differ only in their id, so this is worked out once
    per template (the text after the id) and shared: the dict must not be changed."""
    head, comma, rest = text.partition('",')
    # Shared only when the id's JSON text is the id itself (no escape, no quote: what
    # follows it is then the rest of the spec, whatever the id).
    shared = comma and head.startswith('{"id":"') and "\\" not in head and '"' not in head[7:]
    brief = _briefs.get(rest) if shared else None
    if brief is None:
        spec = orjson.loads(text)
        brief = {"type": spec["type"], "priority": spec["priority"], "replicas": spec.get("replicas"),
                 **{kind: True for kind in ("periodic", "parameterized") if kind in spec}}
        if shared:
            if len(_briefs) >= _TEMPLATES_KEPT:
                _briefs.clear()
            _briefs[rest] = brief
    return brief


class JobStore(NamespaceStore):
    def get_job(self, job_id: str) -> dict:
        check_job_id(job_id)
        fields = self.client.hgetall(self.keys.job(job_id))
        if not fields:
            raise NotFound(f"job {job_id!r} does not exist.")
        return {"id": job_id, "version": int(fields["version"]), "status": fields.get("status", "running"),
                "created": int(fields.get("created", 0)), "spec": orjson.loads(fields["spec"])}

    def require_job(self, job_id: str) -> None:
        """Raise NotFound unless the job exists (one EXISTS)."""
        check_job_id(job_id)
        if not self.client.exists(self.keys.job(job_id)):
            raise NotFound(f"job {job_id!r} does not exist.")

    def job_fields(self, job_id: str) -> dict[str, str]:
        """The job's hash as stored (empty when there is no such job)."""
        return self.client.hgetall(self.keys.job(job_id))

    def job_hashes(self, job_ids: list[str]) -> list[dict[str, str]]:
        """:meth:`job_fields` of each job, in one round trip."""
        return hgetall_many(self.client, [self.keys.job(job_id) for job_id in job_ids])

    def set_failure(self, job_id: str, reason: str) -> None:
        """Record why the job ended as failed (its deadline passed, a dependency could not
        hold): its status then reads ``failed``. A new version clears it."""
        self.client.hset(self.keys.job(job_id), "failure", reason)

    def set_deadline(self, job_id: str, at_ms: int) -> None:
        """The job fails if it still runs at ``at_ms`` (``jobs:deadlines``)."""
        self.client.zadd(self.keys.deadlines, {job_id: at_ms})

    def due_deadlines(self, now_ms: int, limit: int = 100) -> list[str]:
        return self.client.zrangebyscore(self.keys.deadlines, "-inf", now_ms, start=0, num=limit)

    def clear_deadline(self, job_id: str) -> None:
        self.client.zrem(self.keys.deadlines, job_id)

    def job_payload(self, job_id: str) -> bytes | None:
        """The payload a dispatch gave the job (its hash's ``payload``, base64), or None."""
        text = self.client.hget(self.keys.job(job_id), "payload")
        return None if text is None else base64.b64decode(text)

    def stop_job(self, job_id: str) -> bool:
        """``job_stop.lua``: mark the job stopped and announce it (a ``job`` event). Returns
        False when it was stopped already."""
        check_job_id(job_id)  # before any write (a first write records the namespace's key layout)
        k = self.keys
        result = self.scripts.job_stop(keys=[k.job(job_id), k.stream, k.config, k.jobs_ended],
                                       args=[self.events_arg, job_id])
        if result == -1:
            raise NotFound(f"job {job_id!r} does not exist.")
        return result == 1

    def job_ids(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.jobs))

    def global_job_ids(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.global_jobs))

    def job_spec(self, job_id: str, version: int | None = None) -> JobSpec:
        """The parsed spec of a job at a version (specs of old versions are kept per version)."""
        key = self.keys.job(job_id)
        field = "spec" if version is None else f"spec:{version}"
        raw = self.client.hget(key, field)
        if raw is None:
            raise NotFound(f"job {job_id!r} (version {version}) does not exist.")
        return parse_stored(raw)

    def job_task_ids(self, job_id: str) -> list[str]:
        return self.client.zrange(self.keys.job_tasks(job_id), 0, -1)

    def job_task_ids_after(self, job_id: str, index: int) -> list[tuple[str, int]]:
        """(task id, index) of the job's tasks with an index above ``index``."""
        return [(task_id, int(i)) for task_id, i in
                self.client.zrangebyscore(self.keys.job_tasks(job_id), f"({index}", "+inf", withscores=True)]

    def job_snapshot(self, job_id: str) -> tuple[str, dict[str, tuple[str, str]]]:
        """``snapshot.lua``: (the stream's last entry id, task id -> (state, node)) of the
        job's tasks, read in one step: the events after that id are exactly the changes
        since. (Tasks created between reading the ids and the call make it read again.)"""
        k = self.keys
        while True:
            ids = self.job_task_ids(job_id)
            reply = self.scripts.snapshot(keys=[k.job_tasks(job_id), k.stream, *(k.task(t) for t in ids)])
            if reply[0]:
                return reply[1], {task_id: (reply[2 + 2 * i], reply[3 + 2 * i]) for i, task_id in enumerate(ids)}

    def all_task_ids(self) -> list[str]:
        ids: list[str] = []
        for job_id in self.job_ids():
            ids += self.job_task_ids(job_id)
        return ids

    def job_summaries(self, ids: list[str] | None = None) -> list[JobSummary]:
        """Every job (or those of ``ids`` that exist, in that order) with the state of each
        of its tasks: ``job_page.lua`` calls of a chunk of jobs each, then
        :meth:`task_states` (a page of jobs: two round trips)."""
        return run(self, self.job_summaries_steps(self.job_ids() if ids is None else ids))

    def job_summaries_steps(self, ids: list[str]) -> Steps:
        """:meth:`job_summaries` of ``ids`` as steps (state/read_steps.py)."""
        k = self.keys
        chunks = [ids[start:start + SUMMARY_CHUNK] for start in range(0, len(ids), SUMMARY_CHUNK)]
        replies = []
        for start in range(0, len(chunks), _READS_PER_ROUND_TRIP):
            batch = Batch()
            for chunk in chunks[start:start + _READS_PER_ROUND_TRIP]:
                self.scripts.queue(batch, "job_page", [key for job_id in chunk for key in (k.job(job_id),
                                                                                            k.job_tasks(job_id))],
                                   [], read_only=True)
            replies += yield batch
        found, counts, task_ids = [], [], []
        for chunk, reply in zip(chunks, replies):
            at = 0
            for job_id in chunk:
                version, status, created, spec, failure, suspended, n = reply[at:at + 7]
                at += 7 + n
                if spec is None:
                    continue  # removed between the two reads
                found.append(JobSummary(job_id, int(version or 0), status or "running", int(created or 0), spec, [],
                                        failure or "", suspended == "1"))
                counts.append(n)
                task_ids += reply[at - n:at]
        states = yield from self.task_states_steps(task_ids)
        at = 0
        for summary, n in zip(found, counts):
            if n == 1:  # most jobs: one task
                summary.task_states = [] if states[at] is None else [states[at]]
            else:
                summary.task_states = [state for state in states[at:at + n] if state is not None]
            at += n
        return found

    def task_states(self, task_ids: list[str]) -> list[str | None]:
        """The state of each task (None: no such task), in order: ``task_states.lua`` calls
        of ``2 * SUMMARY_CHUNK`` tasks each (a page's in one round trip)."""
        return run(self, self.task_states_steps(task_ids))

    def task_states_steps(self, task_ids: list[str]) -> Steps:
        """:meth:`task_states` as steps (state/read_steps.py)."""
        task, size = self.keys.task, 2 * SUMMARY_CHUNK
        calls = [[task(task_id) for task_id in task_ids[start:start + size]] for start in range(0, len(task_ids), size)]
        states: list[str | None] = []
        for start in range(0, len(calls), _READS_PER_ROUND_TRIP):
            batch = Batch()
            for keys in calls[start:start + _READS_PER_ROUND_TRIP]:
                self.scripts.queue(batch, "task_states", keys, [], read_only=True)
            states += [state for reply in (yield batch) for state in reply]
        return states

    # Writing jobs and creating their tasks.
    def mark_job(self, spec: JobSpec) -> None:
        """Record what claim.lua needs of a job: its tenant, gang size and one task's needs."""
        self.client.hset(self.keys.job_shares, spec.id, shares_value(spec))

    def enqueue(self, job_id: str, read: str, job_fields: dict, version: int, priority: int, first_index: int,
                count: int, *, pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0,
                is_global: bool = False, shares: str = "", event: str = "", replicas: int | None = None,
                record: Record | None = None) -> int | None:
        """``enqueue.lua``: write ``job_fields`` to the job's hash and queue ``count`` new
        pending tasks (``<job>.<first_index + i>``), created now (Redis TIME), if the job is
        still as ``read`` (:func:`job_state`; "" = it must not exist). ``pins`` fixes each
        task to one node (global jobs); ``delay_ms`` starts them in backoff (restart delay);
        ``retries`` counts how many tasks ran before them in the same slot; ``shares``, if
        given, is written as the job's ``jobs:shares`` entry (:meth:`mark_job`) with its
        hash. ``event``, if given, is the job event the call announces before its tasks'
        (``submitted``, ``updated``, ``scaled``; with ``replicas``, unless the job is global).
        ``record`` (its ``by`` given), if given, is written to the job's history and
        announced in the same step (history.py). Returns the creation time (ms), or None
        when the job changed since it was read (nothing written, nothing recorded).

        No call blocks Redis for long: the first call (job hash and the first
        ``ENQUEUE_CHUNK`` tasks) is the compare-and-set; the other tasks follow in fill
        calls of a chunk each (:meth:`enqueue_fill`), which stop early if the job is
        stopped or replaced meanwhile. The first call is never resent after a timeout
        or a lost connection (it may have been applied): that is one sentence,
        :class:`RedisUnavailable`. Fill calls are idempotent, so they are resent."""
        self.register_namespace()
        k = self.keys
        head = min(count, ENQUEUE_CHUNK)
        mark = None
        if count > head and not pins:
            # The fill calls may never come (the submitter dies): the mark lets any worker
            # create the rest (:meth:`complete_fills`). Global jobs' tasks are reconciled anyway.
            mark = f"filling:{version}:{first_index}"
            job_fields = {**job_fields, mark: f"{count}|{priority}|{delay_ms}|{retries}"}
            self.client.zadd(k.filling, {job_id: self.now_ms()})
        try:
            reply = self._enqueue_script(read, job_id, version, priority, first_index, head, (pins or [])[:head],
                                         delay_ms=delay_ms, retries=retries, job_fields=job_fields,
                                         is_global=is_global, shares=shares, event=event, replicas=replicas,
                                         record=record)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(
                f"Redis did not answer while job {job_id!r} was being written ({str(exc).rstrip('.')}); it may or "
                f"may not have been applied: look with `sched job show {job_id}`.") from None
        if not reply[0]:
            return None
        self._fill(job_id, version, priority, first_index + head, count - head, pins=pins[head:] if pins else None,
                   delay_ms=delay_ms, retries=retries)
        if mark is not None:
            self.filled(job_id, mark)
        return int(reply[1])

    def filled(self, job_id: str, mark: str | None) -> None:
        """The tasks that ``mark`` (a ``filling:<version>:<first index>`` field; None: the
        submit's first call never landed) stood for exist, or no longer need to: drop it,
        and the job from ``jobs:filling`` if it was its last."""
        k = self.keys
        if mark is not None:
            self.client.hdel(k.job(job_id), mark)
        if not any(field.startswith("filling:") for field in self.client.hkeys(k.job(job_id))):
            self.client.zrem(k.filling, job_id)

    def unfinished_fills(self, before_ms: int) -> dict[str, dict[str, str]]:
        """Jobs whose submit began queueing before ``before_ms`` and has not finished:
        job id -> its ``filling:*`` fields (none if the first call never landed)."""
        k = self.keys
        ids = self.client.zrangebyscore(k.filling, "-inf", before_ms)
        if not ids:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(k.job(job_id))
            rows = pipe.execute()
        return {job_id: {f: v for f, v in row.items() if f.startswith("filling:") or f in ("status", "version")}
                for job_id, row in zip(ids, rows)}

    def check_enqueue(self, job_id: str) -> None:
        """Raise Redis's refusal (``NoPermissionError``) now if this connection's user may
        not run ``enqueue.lua`` on the job (an agent's may not): a fill call for a version
        no job has, which writes nothing. A change made of steps (a scale down stops
        tasks, then writes the job's count) is so refused before its first step."""
        self._enqueue_script("=", job_id, 0, 0, 0, 0, [], delay_ms=0, retries=0)

    def enqueue_fill(self, job_id: str, version: int, priority: int, first_index: int, count: int, *,
                     pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0,
                     attempts: int = 5) -> int | None:
        """One fill call of ``enqueue.lua``: create the tasks ``<job>.<first_index + i>``
        (``count`` <= a chunk) that do not exist yet, if the job is still running at
        ``version``. Idempotent, so resent (``attempts`` times) after a timeout or a lost
        connection. Returns how many tasks it created, or None if the job changed."""

        def call() -> list:
            return self._enqueue_script(f"={version}", job_id, version, priority, first_index, count, pins or [],
                                        delay_ms=delay_ms, retries=retries)

        reply = _resending(call, attempts, lambda exc: RedisUnavailable(
            f"Redis did not answer while the tasks of job {job_id!r} from index {first_index} were being "
            f"queued ({str(exc).rstrip('.')}); the job has fewer tasks than it asks for."))
        return int(reply[2]) if reply[0] else None

    def _fill(self, job_id: str, version: int, priority: int, first_index: int, count: int, *,
              pins: list[str] | None = None, delay_ms: int = 0, retries: int = 0) -> None:
        """Create the tasks ``<job>.<first_index + i>`` (``i < count``) by fill calls of a
        chunk each, until the job is stopped or replaced (its newer state decides)."""
        for offset in range(0, count, ENQUEUE_CHUNK):
            size = min(ENQUEUE_CHUNK, count - offset)
            chunk_pins = pins[offset:offset + size] if pins else None
            if self.enqueue_fill(job_id, version, priority, first_index + offset, size, pins=chunk_pins,
                                 delay_ms=delay_ms, retries=retries) is None:
                break

    def fill_launched(self, job_id: str, priority: int, count: int) -> None:
        """Create the ``count`` tasks of a job that ``launch.lua`` created with its hash only
        (marked ``filling:1:0``), then drop the mark."""
        self._fill(job_id, 1, priority, 0, count)
        self.filled(job_id, "filling:1:0")

    def complete_fills(self, before_ms: int) -> list[str]:
        """Create the missing tasks of submits that began before ``before_ms`` and stopped
        part way: a job of more tasks than one call takes is marked until its last fill call
        (:meth:`enqueue`), so if its submitter died or lost Redis in between, this finishes
        the job (only while it runs at that version). Returns the jobs it completed."""
        completed = []
        for job_id, fields in self.unfinished_fills(before_ms).items():
            marks = [field for field in fields if field.startswith("filling:")]
            for mark in marks:
                _, version, first = mark.split(":")
                count, priority, delay_ms, retries = (int(part) for part in fields[mark].split("|"))
                if fields.get("status") == "running" and fields.get("version") == version:
                    if job_id not in completed:
                        completed.append(job_id)
                    self._fill(job_id, int(version), priority, int(first), count, delay_ms=delay_ms, retries=retries)
                self.filled(job_id, mark)
            if not marks:
                self.filled(job_id, None)
        return completed

    def enqueue_many(self, jobs: list[tuple[str, JobSpec]], attempts: int = 5, by: str | None = None) -> list[bool]:
        """``enqueue_many.lua``: create new jobs (version 1) with their pending tasks, many
        per call, up to ``ENQUEUE_CHUNK`` tasks and ``BULK_JOBS`` jobs per call; each
        job only if it does not exist yet, recorded as submitted ``by`` that user (None:
        not recorded) in the same step. ``jobs`` are (job id, spec) pairs: the spec may
        be one shared by jobs that differ only in their id (its own id is then ignored), and
        runs of jobs sharing a spec send its text once. Returns, per job in order, True when
        this created it, False when it existed (nothing written: submit it the ordinary
        way). Every job must have ``replicas`` <= ``ENQUEUE_CHUNK`` and not be global.

        The calls go from a sender thread, ``_PIPELINED`` per round trip (so that Redis has
        the next call at hand when one ends), while the next ones are laid out here; jobs
        that fit in one round trip are sent from here, with no thread. Each
        call is idempotent, so a round trip is resent (``attempts`` times) after a timeout
        or a lost connection (a resent call reports the jobs it had created as existing);
        if one fails for good, none after it is sent."""
        self.register_namespace()
        replies: list = []
        failure: list[BaseException] = []
        work: queue.Queue = queue.Queue(maxsize=2)

        def run(calls) -> list:
            for reloaded in (False, True):
                pipe = self.client.pipeline(transaction=False)
                for _first, _last, keys, args in calls:
                    self.scripts.queue(pipe, "enqueue_many", keys, args)
                try:
                    return pipe.execute()
                except NoScriptError:  # Redis lost its scripts (a restart): load them, send again
                    if reloaded:
                        raise
                    self.scripts.load_all()

        def send() -> None:
            while (calls := work.get()) is not None:
                if failure:
                    continue
                first, last = calls[0][0], calls[-1][1]
                try:
                    replies.extend(_resending(lambda: run(calls), attempts, lambda exc: RedisUnavailable(
                        f"Redis did not answer while jobs {first!r} to {last!r} were being written "
                        f"({str(exc).rstrip('.')}); the jobs before them were written, these may or may "
                        f"not have been, none after them was.")))
                except BaseException as exc:  # noqa: BLE001 (handed to the caller below)
                    failure.append(exc)

        laid_out = self._enqueue_many_calls(jobs, by)
        first = list(itertools.islice(laid_out, _PIPELINED + 1))
        if len(first) <= _PIPELINED:  # one round trip: no sender to hand it to
            if first:
                work.put(first)
            work.put(None)
            send()
        else:
            sender = threading.Thread(target=send, name="enqueue_many", daemon=True)
            sender.start()
            try:
                calls = first[:_PIPELINED]
                for call in itertools.chain(first[_PIPELINED:], laid_out):
                    if len(calls) == _PIPELINED:
                        if failure:
                            break
                        work.put(calls)
                        calls = []
                    calls.append(call)
                if calls and not failure:
                    work.put(calls)
            finally:
                work.put(None)
                sender.join()
        if failure:
            raise failure[0]
        return [flag == 1 for reply in replies for flag in reply[1]]

    def _enqueue_many_calls(self, jobs: list[tuple[str, JobSpec]], by: str | None):
        """(first job id, last job id, keys, args) of each ``enqueue_many.lua`` call."""
        k = self.keys
        fixed = [k.jobs, k.active, k.enqueue_seq, k.job_shares, k.wake, k.stream, k.config, k.jobs_by_id]
        task_key = k.task
        rests: dict[int, str] = {}
        who = "" if by is None else orjson.dumps(by).decode()
        for chunk in _chunks(jobs, ENQUEUE_CHUNK, BULK_JOBS):
            keys, args = list(fixed), [self.events_arg, who, HISTORY_KEEP, 0]
            groups_at = len(args) - 1
            shared, count_at = None, 0
            for job_id, spec in chunk:
                if spec is not shared:  # a new group: its spec text after the id, once
                    shared = spec
                    rest = rests.get(id(spec))
                    if rest is None:
                        rest = rests[id(spec)] = _text_after_id(spec)
                    args += [spec.priority, rest, shares_value(spec), spec.replicas, 0]
                    count_at = len(args) - 1
                    args[groups_at] += 1
                args[count_at] += 1
                args.append(job_id)
                keys += [k.job(job_id), k.job_tasks(job_id), k.job_history(job_id)]
                keys += [task_key(f"{job_id}.{i}") for i in range(spec.replicas)]
            yield chunk[0][0], chunk[-1][0], keys, [*args, self.scripts.now_arg()]

    def _enqueue_script(self, read: str, job_id: str, version: int, priority: int, first_index: int, count: int,
                        pins: list[str], *, delay_ms: int, retries: int, job_fields: dict | None = None,
                        is_global: bool = False, shares: str = "", event: str = "",
                        replicas: int | None = None, record: Record | None = None) -> list:
        """The one call of ``enqueue.lua`` (its header lays out KEYS and ARGV): a first call
        (``read`` as :func:`job_state` says, with ``job_fields`` and maybe a ``record``) or a
        fill call (``read`` ``=<version>``, no fields), creating the tasks
        ``<job>.<first_index + i>``."""
        k = self.keys
        fields = job_fields or {}
        args = [read, self.events_arg, job_id, version, priority, first_index, delay_ms, retries, int(is_global),
                shares, event, "" if replicas is None else replicas, len(fields)]
        for field, value in fields.items():
            args += [field, value]
        args += record_args(record, record.by) if record is not None else [""]
        args += [*pins, self.scripts.now_arg()]
        keys = [k.job(job_id), k.jobs, k.global_jobs, k.active, k.backoff, k.job_tasks(job_id), k.enqueue_seq,
                k.job_shares, k.wake, k.stream, k.config, k.job_history(job_id), k.waiting, k.jobs_by_id,
                *(k.task(f"{job_id}.{first_index + i}") for i in range(count))]
        return self.scripts.enqueue(keys=keys, args=args)


def _resending(call, attempts: int, gave_up):
    """``call()``, which must be idempotent, sent again after a timeout or a lost connection
    with a growing pause, ``attempts`` times in all; then ``gave_up(error)`` is raised."""
    for attempt in range(attempts):
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if attempt == attempts - 1:
                raise gave_up(exc) from None
            time.sleep(min(2.0, 0.1 * 2 ** attempt))


@lru_cache(maxsize=4096)
def parse_stored(raw: str) -> JobSpec:
    """A spec as stored (normalised JSON, ``id`` first). Jobs made from one template differ
    only in their id, so the rest of the text is parsed and validated once and shared."""
    head, comma, rest = raw.partition('",')
    # Shared only for an id whose JSON text is the id itself (a valid id has no escapes);
    # anything else (say "web\\n" or an escaped quote) is decoded and checked in full.
    shared = comma and head.startswith('{"id":"') and is_job_id(head[7:])
    if shared:
        template = _templates.get(rest)
        if template is not None:
            return template.with_id(head[7:])
    spec = parse_job(orjson.loads(raw))  # an error names this job
    if shared:
        if len(_templates) >= _TEMPLATES_KEPT:
            _templates.clear()
        _templates[rest] = spec
    return spec


_TEMPLATES_KEPT = 1024
_templates: dict[str, JobSpec] = {}  # stored text after the id -> a spec parsed from it
_briefs: dict[str, dict] = {}  # stored text after the id -> its spec_brief

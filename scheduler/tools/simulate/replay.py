"""One replay of a trace: the production scheduler, stepped on a virtual clock.

A private ``redis-server`` holds a namespace of its own; the scheduler worker is the one
``sched worker`` runs (``workers/scheduler_worker.py``, found through the
``sched.processes`` entry points), called step by step instead of looping; jobs, nodes,
quotas and tenants change through the same calls the CLI makes (``reconcile``, the
``Store``), and tasks end through ``reconcile.task_ended``, as an agent reports them. So the
queue order, the claim's fair share, backoff, the commit's rules and quotas, preemption and
replacements are the production code, in Python and in Lua. The only difference is time:
the App's clock is virtual (``VirtualClock``); every script that stamps a time takes it as
its last argument, and the worker's own waits follow it. Leases stay on Redis TIME, which
barely moves during a replay.

Each instant the replay visits (a trace event, a task's end, a backoff or flush falling due),
in order: node, quota and tenant events; tasks whose run ends; arrivals; then the worker's
upkeep (``maintain``) and as many ``step`` calls as find work. What the scheduler did is read
back from the namespace's event stream (assigned, preempted, lost, replacements queued)
into the :class:`Recorder`. Instants are rounded up to ``tick_ms``, so that everything
within one tick is scheduled in one go, as a worker's batch would be.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import deque
from dataclasses import dataclass

import orjson

from scheduler.client import Client
from scheduler.control import reconcile
from scheduler.control.processes import process
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.model import BATCH, COMPLETED, DOWN, READY, STOPPED, JobSpec, Node
from scheduler.state.app import App
from scheduler.tools.simulate.measure import Recorder
from scheduler.tools.simulate.trace import DRAIN, NODE, NODE_DOWN, NODE_UP, QUOTA, TASK, TENANT, Event, Trace

EPOCH_MS = 1_700_000_000_000  # virtual time 0: a plausible Redis time, so stamps read like real ones
STREAM_KEEP = 2_000_000  # the replay reads the stream after every step; this bounds it in between
STREAM_READ = 10_000  # entries per read of it
REASON_SAMPLE = 50  # waiting tasks whose explanation is read at a sample
LEASE_MS = 3_600_000  # a claim's lease in a replay: an hour of real time


class VirtualClock:
    """Milliseconds of virtual time, as Redis TIME would give them (``EPOCH_MS`` + trace time)."""

    def __init__(self):
        self.now = EPOCH_MS

    def __call__(self) -> int:
        return self.now


@dataclass(frozen=True)
class Settings:
    """What a replay may change from the trace: every job's ``strategy``, the workers'
    ``percentage_of_nodes`` scored, and the cluster's size in ``nodes`` of the inventory's
    shape (the trace's node events at time 0, cycled; its later node events are then
    ignored)."""

    strategy: str | None = None
    percentage_of_nodes: int | None = None
    nodes: int | None = None
    tick_s: float = 1.0
    batch_size: int = 512
    until_s: float | None = None
    give_up_wait_s: float | None = None  # stop as soon as a task has waited longer (compaction's probes)
    stop_when_settled: bool = False  # stop once every task has arrived and none waits (compaction's probes)
    seed: int = 0  # the placement's random tie-breaks: the same seed, the same replay

    def label(self) -> str:
        parts = [f"strategy={self.strategy}" if self.strategy else "",
                 f"percentage-of-nodes={self.percentage_of_nodes}" if self.percentage_of_nodes is not None else "",
                 f"nodes={self.nodes}" if self.nodes is not None else "",
                 f"seed={self.seed}" if self.seed != 0 else ""]
        return ",".join(p for p in parts if p) or "as traced"


def shaped_nodes(inventory: list[Node], count: int) -> list[Node]:
    """``count`` nodes of the inventory's shape: its nodes in turn, named ``sim-<i>``."""
    return [dataclasses.replace(inventory[i % len(inventory)], name=f"sim-{i}", hostname=f"sim-{i}")
            for i in range(count)]


class Replay:
    def __init__(self, trace: Trace, settings: Settings, url: str, namespace: str):
        self.trace, self.settings = trace, settings
        self.clock = VirtualClock()
        self.app = App(redis_url=url, namespace=namespace, clock=self.clock)
        self.api = Client(app=self.app)  # the Python API, as the CLI uses it
        self.store = self.app.store
        placement = PlacementOptions(percentage_of_nodes_to_score=settings.percentage_of_nodes, seed=settings.seed)
        # One worker: nothing to share a short queue with, so it claims whole batches; each
        # call in turn (no commit in a thread while the next is placed, no claim ahead), so
        # that what reaches Redis comes in the same order in every replay; and leases (on
        # Redis TIME) that no slow step outlives.
        config = WorkerConfig(batch_size=settings.batch_size, placement=placement, share_from=None, overlap=False,
                              lease_ms=LEASE_MS)
        self.worker = process("scheduler-worker")(self.app, config, name="simulator")
        self.tick_ms = max(1, int(settings.tick_s * 1000))
        nodes, events = self._nodes_and_events()
        self.events = events
        self.recorder = Recorder(*_resources(nodes, events))
        self.initial = nodes
        self.duration: dict[str, int | None] = {}  # task -> how long it runs once placed (ms; None: forever)
        self.owed: dict[str, deque] = {}  # job -> runs owed to replacements of its ended tasks
        self.job_duration: dict[str, int | None] = {}  # job -> its first task's duration
        self.job_spec: dict[str, JobSpec] = {}
        self.submitted: set[str] = set()
        self.mine: set[str] = set()  # tasks this replay created (the others are replacements)
        self.numbered: dict[str, int] = {}  # job -> how many task numbers it has used (a.0, a.1, ...)
        self.ends: list[tuple[int, str]] = []  # heap of (end ms, task)
        self.ending: set[str] = set()  # tasks whose end this replay reports
        self.after = "0-0"  # the stream is read after this id
        self._specs: dict[tuple, JobSpec] = {}
        self.nodes: dict[str, Node] = {}
        self.drained: set[str] = set()
        self.gave_up = False
        self.settled = False  # stopped once nothing could wait again (stop_when_settled)
        self.arrivals_ms: tuple[int, int] | None = None  # the first and last instants tasks arrived at

    def _nodes_and_events(self) -> tuple[list[Node], list[Event]]:
        events = self.trace.events
        if self.settings.nodes is None:
            return [e.node for e in events if e.kind == NODE and e.node is not None], events
        nodes = shaped_nodes(self.trace.nodes, self.settings.nodes)
        # Another cluster than the traced one: its node events do not apply.
        return nodes, [e for e in events if e.kind not in (NODE, NODE_DOWN, NODE_UP, DRAIN)]

    # The loop.
    def run(self, progress=None) -> Recorder:
        """Replay the whole trace; ``progress(now_ms, end_ms, recorder)`` is called about
        once a second of wall time."""
        started = last_shown = time.perf_counter()
        horizon = self.trace.end_ms
        self.store.stream.set_maxlen(STREAM_KEEP)
        # A finished job goes at the next upkeep (its tasks arriving later submit it anew):
        # the Recorder keeps what the report needs, and a day's trace would otherwise keep
        # every job of its day in the redis-server.
        self.store.set_retention({"job_retention": "0"})
        if self.settings.nodes is not None:
            self._add_nodes(self.initial, 0)
        events, i, now = self.events, 0, 0
        until = None if self.settings.until_s is None else int(self.settings.until_s * 1000)
        self.app.scripts.load("tallies")  # the worker's refresh queues it by its SHA
        while True:
            self.clock.now = EPOCH_MS + now
            arrivals: list[Event] = []
            adds: list[Node] = []
            while i < len(events) and self._round(events[i].time_ms) <= now:
                event = events[i]
                i += 1
                if event.kind == TASK:
                    arrivals.append(event)
                elif event.kind == NODE and event.node is not None and event.node.name not in self.nodes:
                    adds.append(event.node)
                else:
                    if adds:
                        self._add_nodes(adds, now)
                        adds = []
                    self._apply(event, now)
            if adds:
                self._add_nodes(adds, now)
            self._end_due(now)
            if arrivals:
                self._arrive(arrivals, now)
            self.worker.maintain(force=True)
            while True:  # as many steps as find work: until one claims nothing, or nothing waits to be claimed
                claimed = self.worker.step()
                counts, due = self._look()
                if not claimed or not counts["active"]:
                    break
            self._sample(now)
            if self._waited_too_long(now):
                self.gave_up = True
                break
            if self.settings.stop_when_settled and i == len(events) and not self.recorder.pending \
                    and not any(counts.values()):
                # No event of the trace is left, no task waits, none is queued or held: no
                # task can wait from here on (only runs end), so whether the trace placed, and
                # its longest wait, are known.
                self.settled = True
                break
            if progress is not None and time.perf_counter() - last_shown >= 1.0:
                last_shown = time.perf_counter()
                progress(now, horizon, self.recorder)
            upcoming = [self._round(events[i].time_ms)] if i < len(events) else []
            if self.ends:
                upcoming.append(self._round(self.ends[0][0]))
            if (upcoming or counts["active"] or counts["backoff"] or counts["inflight"]) and due is not None:
                upcoming.append(self._round(due - EPOCH_MS))
            if not upcoming or (until is not None and now >= until):
                break
            now = max(min(upcoming), now + self.tick_ms)
            if until is not None:
                now = min(now, until)
        self.end_ms = now
        self.wall_s = time.perf_counter() - started
        return self.recorder

    def _waited_too_long(self, now: int) -> bool:
        """Whether the oldest waiting task has waited longer than ``give_up_wait_s``: a
        probe of compaction has then failed, and replaying on would only cost time."""
        bound = self.settings.give_up_wait_s
        recorder = self.recorder
        if bound is None or not recorder.pending:
            return False
        oldest = recorder.created_ms[next(iter(recorder.pending))]
        return EPOCH_MS + now - oldest > bound * 1000

    def _round(self, ms: int) -> int:
        """Up to the next tick (an instant on a tick stays)."""
        return -(-ms // self.tick_ms) * self.tick_ms

    # What the trace does.
    def _add_nodes(self, nodes: list[Node], now: int) -> None:
        self.store.put_new_nodes(nodes)
        for node in nodes:
            self.nodes[node.name] = node
            self.recorder.node(node)

    def _apply(self, event: Event, now: int) -> None:
        store, kind = self.store, event.kind
        if kind == NODE and event.node is not None:  # a node that is there already: updated
            self.store.put_node(event.node)
            self.nodes[event.name] = event.node
            self.recorder.node(event.node, self.recorder.usable.get(event.name, True))
        elif kind == NODE_DOWN:
            if store.set_status(event.name, DOWN) == READY:  # as a lapsed heartbeat does
                reconcile.node_lost(store, event.name)
            self.recorder.node_usable(event.name, False)
        elif kind == NODE_UP:
            store.set_status(event.name, READY)
            self.recorder.node_usable(event.name, event.name not in self.drained)
        elif kind == DRAIN:
            self.drained.add(event.name)
            self.api.drain(event.name)
            self.recorder.node_usable(event.name, False)
        elif kind == QUOTA:
            if event.quota:
                self.api.set_quota(resources=event.quota)
            else:
                self.api.remove_quota()
        elif kind == TENANT:
            self.api.set_tenant(event.name, event.weight)
            self.recorder.weights[event.name] = event.weight

    def _spec(self, event: Event, count: int) -> JobSpec:
        """The event's job spec with ``count`` replicas and the settings' strategy."""
        spec = event.spec
        key = (id(spec), count)
        made = self._specs.get(key)
        if made is None:
            strategy = self.settings.strategy or spec.strategy
            made = dataclasses.replace(spec, replicas=count, strategy=strategy,
                                       raw={**spec.raw, "replicas": count, "strategy": strategy})
            self._specs[key] = made
        return made

    def _arrive(self, arrivals: list[Event], now: int) -> None:
        """Submit new jobs together (``reconcile.submit_many``: many per round trip), then
        add the tasks of jobs already submitted (``reconcile.add_tasks``, as a scale up)."""
        first = now if self.arrivals_ms is None else self.arrivals_ms[0]
        self.arrivals_ms = (first, now)
        new: dict[str, Event] = {}  # job -> its first task event
        more: list[Event] = []
        for event in arrivals:
            if event.job in self.submitted or event.job in new:
                more.append(event)
            else:
                new[event.job] = event
        jobs = [(job, self._spec(event, event.count)) for job, event in new.items()]
        if jobs:
            results = reconcile.submit_many(self.store, jobs)
            for (job, spec), result in zip(jobs, results):
                self.submitted.add(job)
                self.job_spec[job] = spec
                self.job_duration[job] = new[job].duration_ms
                self._created(result["tasks"], spec, new[job].duration_ms, now)
        for event in more:
            ids = reconcile.add_tasks(self.store, event.job, event.count)
            self._created(ids, self.job_spec[event.job], event.duration_ms, now)

    def _created(self, task_ids: list[str], spec: JobSpec, duration: int | None, now: int) -> None:
        for task_id in task_ids:
            self._mine(task_id)
            self.duration[task_id] = duration
            self.recorder.created(task_id, spec, EPOCH_MS + now)

    def _end_due(self, now: int) -> None:
        """End the tasks whose run is over, as their agents would report them: a batch task
        completes (``reconcile.tasks_ended``, the instant's together); a service task is
        stopped, with no replacement (the trace ended it)."""
        due: list[str] = []
        while self.ends and self.ends[0][0] <= now:
            _, task_id = heapq.heappop(self.ends)
            if task_id in self.ending:
                due.append(task_id)
        if not due:
            return
        for task_id in due:
            self.ending.discard(task_id)
            self.recorder.ended(task_id, COMPLETED)
        completed, stop = [], []
        for task in self.store.tasks(due):
            if task.live:
                (completed if self.recorder.spec_of[task.id].type == BATCH else stop).append(task)
        if completed:
            reconcile.tasks_ended(self.store, completed, True, "its run in the trace ended")
        if stop:
            self.store.finish(stop, STOPPED, "its run in the trace ended")

    # What the scheduler did.
    def _look(self) -> tuple[dict[str, int], int | None]:
        """Read what the scheduler did since the last look (the namespace's event stream)
        and, in the same round trip, what waits in the queue: its counts and when the next
        waiting task is due back (``SchedulingQueue.outlook``)."""
        stream = self.store.stream
        counts, due, (reply,) = self.app.queue.outlook(lambda pipe: stream.queue_read(pipe, self.after, STREAM_READ))
        entries, self.after = stream.read_reply(reply, self.after)
        while True:
            for _, event in entries:
                if event.get("type") == "task":
                    self._task_event(event)
                elif event.get("type") == "job" and event.get("event") == "removed":
                    self._removed(event.get("id", ""))
            if len(entries) < STREAM_READ:
                return counts, due
            entries, self.after = stream.read(self.after, count=STREAM_READ)

    def _task_event(self, event: dict) -> None:
        task_id, state = event.get("id", ""), event.get("state")
        if state == "assigned":
            at = int(event["ts"])
            self.recorder.assigned(task_id, event["node"], at)
            duration = self.duration.get(task_id)
            if duration is not None:
                heapq.heappush(self.ends, (at - EPOCH_MS + duration, task_id))
                self.ending.add(task_id)
        elif state == "pending":
            if "job" in event and "queue" not in event and "nominated_node" not in event and "reason" not in event \
                    and task_id not in self.mine:
                self._replacement(task_id, event["job"], int(event["ts"]))
        elif state in ("preempted", "lost", "stopped", "failed", "completed"):
            # Ended by the scheduler (the ends this replay reports left the Recorder already).
            if task_id in self.recorder.node_of or task_id in self.recorder.pending:
                self.ending.discard(task_id)
                self.recorder.ended(task_id, state)
                if state in ("preempted", "lost", "stopped") and task_id in self.duration:
                    # Its replacement (queued in the same step) runs it again from the start.
                    self.owed.setdefault(event.get("job") or task_id.rpartition(".")[0], deque()).append(
                        self.duration[task_id])

    def _mine(self, task_id: str) -> None:
        self.mine.add(task_id)
        job, _, number = task_id.rpartition(".")
        self.numbered[job] = max(self.numbered.get(job, 0), int(number) + 1)

    def _removed(self, job: str) -> None:
        """Retention removed the job (finished, past its retention on the replay's clock):
        a later arrival of it submits it anew, and its tasks are numbered from 0 again."""
        self.submitted.discard(job)
        for number in range(self.numbered.pop(job, 0)):
            self.mine.discard(f"{job}.{number}")

    def _replacement(self, task_id: str, job: str, at_ms: int) -> None:
        """A task the scheduler queued to replace one that ended (preempted, lost, drained)."""
        self._mine(task_id)
        owed = self.owed.get(job)
        self.duration[task_id] = owed.popleft() if owed else self.job_duration.get(job)
        spec = self.job_spec.get(job) or self.store.job_spec(job)
        self.recorder.created(task_id, spec, at_ms)

    def _sample(self, now: int) -> None:
        recorder = self.recorder
        if recorder.pending:
            waiting = [t for t in list(recorder.pending)[:REASON_SAMPLE]]
            for task in self.store.tasks(waiting):
                if task.explanation:
                    try:
                        found = orjson.loads(task.explanation).get("reasons") or {}
                    except orjson.JSONDecodeError:
                        continue
                    if found:
                        recorder.note_reasons({max(found, key=found.get): 1})
        recorder.sample(now)


def _resources(nodes: list[Node], events: list[Event]) -> tuple[list[str], dict[str, int]]:
    """The resources the report follows (every node capacity and task request), and the
    smallest request for each (what exhausts a node: see measure.py)."""
    names: dict[str, None] = {"cpu": None, "memory": None}
    smallest: dict[str, int] = {}
    for node in nodes:
        names.update(dict.fromkeys(node.capacity))
    for event in events:
        if event.kind == NODE and event.node is not None:
            names.update(dict.fromkeys(event.node.capacity))
        if event.kind == TASK and event.spec is not None:
            for r, amount in event.spec.resources.items():
                names[r] = None
                if amount > 0:
                    smallest[r] = min(smallest.get(r, amount), amount)
    return list(names), smallest

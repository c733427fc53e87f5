"""The node agent: makes a machine a node, and runs what the scheduler places on it.

``sched agent NAME --cpu 4 --memory 8GiB --label zone=a`` registers (or updates) the
node, heartbeats with a TTL, and runs its tasks through a pool of RQ workers on the
node's own RQ queue (``rq_workers.py``, supervised: one that quits is started again),
one per task slot. It registers its slots as the node's ``slots``: the scheduler places
no more live tasks there than the agent runs at once (kube's ``pods`` allocatable).
What it runs, and how each run ended, it keeps in the node's journal
(``scheduler/control/journal.py``, SQLite in its state folder, ``--state-dir``, by
default ``agents/<namespace>/<name>`` in sched's state folder), so an agent that restarts
under the same name adopts what still should run and stops the rest, and an end Redis did
not take is delivered when it answers.

A loop thread heartbeats once an interval and syncs several times an interval
(``agent_sync.py``): it compares what Redis says this node should run with what runs, and
acts until they agree. Before anything else, each turn of the loop (and the agent's
start) is the *fence*: once the heartbeat has gone a TTL without being renewed, each run
does what its job's ``disconnect`` says (``scheduler/model/disconnect.py``): by default it
is frozen (SIGSTOP), and a job may have it stopped, or run on. An agent that was paused,
or cut off from Redis, thus has its tasks do nothing before the scheduler may declare its
node down and start their replacements elsewhere; once it reaches Redis again, its sync
resumes the frozen runs of tasks that are still its node's and kills the others. (Each
run's work horse watches the same limits on its own, for when the agent itself is paused
or dead.)
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import signal
import threading
import time
from pathlib import Path

import redis
from rq import Queue

from scheduler.control import heartbeat, process_groups
from scheduler.control.journal import Journal
from scheduler.model import Node
from scheduler.model.node import default_slots
from scheduler.model.disconnect import RUN, STOP
from scheduler.model.errors import SchedError
from scheduler.state.app import App
from scheduler.state.connection import wait_for_redis
from scheduler.state.embedded import state_dir as sched_home
from workers import metrics
from workers.health import HealthChecks
from workers.agent_sync import NodeSync
from workers.rq_workers import RQWorkers

log = logging.getLogger("sched.agent")

SUPERVISE_EVERY_S = 0.5


def default_state_dir(namespace: str, name: str) -> Path:
    return sched_home() / "agents" / namespace / name


class NodeAgent:
    def __init__(self, app: App, node: Node, interval_s: float = heartbeat.DEFAULT_INTERVAL_S,
                 slots: int | None = None, state_dir: str | Path | None = None):
        self.app = app
        slots = slots or default_slots(node)
        self.node = dataclasses.replace(node, slots=slots)  # registered as the node's capacity for live tasks
        self.interval_s = interval_s
        self.ttl_s = interval_s * heartbeat.DEFAULT_MISSED
        self.slots = slots
        self.state_dir = Path(state_dir) if state_dir else default_state_dir(app.keys.namespace, node.name)
        self._lock_file = _lock(self.state_dir, node.name)
        path = self.state_dir / "journal.sqlite3"
        self.journal = Journal(path)  # the loop thread's connection
        queue_name = app.keys.rq_queue_name(node.name)
        self.rq_queue = Queue(queue_name, connection=app.rq_client)
        self.workers = RQWorkers(app.rq_url, queue_name, slots, Journal(path),  # the main thread's connection
                                 labels=("--namespace", app.keys.namespace, "agent", node.name))
        self.sync = NodeSync(app, node.name, self.journal, self.rq_queue, self.workers.names,
                             fresh_s=self.ttl_s - interval_s)
        self._stop = threading.Event()
        self._stop_requests = 0
        self._wake = threading.Event()
        self.last_beat = time.monotonic()
        metrics.heartbeat_age(lambda: self.last_beat)

    def register(self) -> None:
        """Put the node and beat, waiting for Redis as long as it takes."""
        pause = 0.1
        while True:
            try:
                self.app.store.put_node(self.node)
                self.beat()
                return
            except (redis.RedisError, SchedError) as exc:
                log.warning("agent %s: cannot register yet: %s", self.node.name, exc)
                time.sleep(pause)
                pause = min(5.0, pause * 2)

    def beat(self) -> None:
        sent = time.monotonic()
        heartbeat.beat(self.app.store, self.node.name, self.interval_s)
        self.journal.beat(sent, self.ttl_s)  # the send time: a reply that came late is as old as its request
        self.last_beat = sent

    def fence(self) -> list[str]:
        """Freeze or stop the runs whose job does not let them go on as they were when the
        heartbeat has gone this long without being renewed (a stop is recorded in the
        journal, delivered once Redis answers, as lost); returns the tasks it stopped.
        Cheap when the last beat is recent."""
        since, ttl = self.journal.since_beat()
        if since is None or since <= self.interval_s:
            return []
        stopped, frozen = [], []
        for execution in self.journal.executions().values():
            action = execution.disconnect.action(since, ttl)
            if not execution.started or execution.ended or action == RUN:
                continue
            # The work itself: the command once it has one (a command that exited is over,
            # its horse about to record how), else the horse (a function runs in it).
            work = execution.command or execution.horse
            if not process_groups.group_running(work):
                continue
            if action == STOP:
                limit = execution.disconnect.stop_limit(ttl)
                self.journal.ended(execution.task, False, f"stopped by its agent after {since:.1f} s without a "
                                                          f"renewed heartbeat (limit {limit:g} s)", lost=True)
                for group in (execution.horse, execution.command):
                    if group is not None:
                        process_groups.stop_group(group)
                stopped.append(execution.task)
                continue
            if self.journal.frozen(execution.task):
                frozen.append(execution.task)
            process_groups.freeze_group(work)  # again each turn: something may have resumed it
        for done, tasks in (("stopped", stopped), ("froze", frozen)):
            if tasks:
                log.warning("agent %s: no heartbeat renewed for %.1f s: %s %s", self.node.name, since, done,
                            ", ".join(sorted(tasks)), extra={"fields": {"node": self.node.name}})
        return stopped

    def loop(self) -> None:
        """Each turn: stop what may not outlive the heartbeat, beat when due, sync."""
        next_beat = 0.0
        while not self._stop.is_set():
            try:
                self.fence()
                if time.monotonic() >= next_beat:
                    self.beat()
                    # A beat that waited long for its reply counts from when it was sent:
                    # send another at once, so frozen runs resume as soon as Redis answers.
                    late = time.monotonic() - self.last_beat > self.interval_s
                    next_beat = time.monotonic() + (0 if late else self.interval_s)
                self.sync()
            except (redis.RedisError, SchedError) as exc:
                log.warning("agent %s: %s", self.node.name, exc, extra={"fields": {"node": self.node.name}})
            self._stop.wait(min(0.2, self.interval_s / 4))

    def run(self) -> None:
        """Register, then supervise the RQ workers in this thread until a signal stops it:
        the first SIGTERM or SIGINT lets running tasks finish, a second one stops them."""
        self.fence()  # what ran too long without a heartbeat while no agent was here
        # Before the first beat: a function's frozen work horse whose RQ worker this kills
        # is resumed by the kernel (see run_task), and its watchdog freezes it again only
        # while the heartbeat is overdue; the sync decides its fate once the agent beats.
        left = self.workers.stop_left_behind()
        if left:
            log.info("agent %s: stopped %d RQ worker(s) an earlier agent left behind", self.node.name, len(left))
        self.register()
        thread = threading.Thread(target=self.loop, name="agent-loop", daemon=True)
        thread.start()
        HealthChecks(self.app, self.node.name, self._stop, Journal(self.journal.path)).start()
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                if self.workers.stopping < self._stop_requests:
                    self.workers.stop()
                self.workers.supervise()
                if self.workers.stopping and not self.workers.running:
                    break
                self._wake.wait(SUPERVISE_EVERY_S)
                self._wake.clear()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._stop.set()
            thread.join(timeout=5)

    def _request_stop(self, signum, frame) -> None:
        self._stop_requests += 1
        self._wake.set()


def _lock(directory: Path, name: str):
    """Hold the state folder for this agent's lifetime (a POSIX lock: released when the
    process ends, however it ends, and not inherited by the processes it forks)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = open(directory / "agent.lock", "a+")
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise SchedError(f"another agent of node {name} is running with the state folder {directory}.") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def run_agent(app: App, node: Node, interval_s: float = heartbeat.DEFAULT_INTERVAL_S, slots: int | None = None,
              metrics_port: int | None = None, state_dir: str | None = None) -> None:
    """Run a node agent for ``node`` until a signal stops it (``sched agent``). A Redis
    that does not answer yet is waited for (logged on stderr), not a reason to exit.
    ``slots``: tasks it runs at once; by default :func:`scheduler.model.node.default_slots`."""
    wait_for_redis(app.url)
    try:
        app.store.check_layout()
    except SchedError as exc:  # a namespace of another key layout: say so once and run nothing
        log.error("agent %s: %s", node.name, exc)
        raise SystemExit(2) from None
    agent = NodeAgent(app, node, interval_s=interval_s, slots=slots, state_dir=state_dir)
    if metrics_port:
        metrics.serve(metrics_port)
    namespace = app.keys.namespace
    log.info("agent %s started: namespace %s, Redis %s, %d slots, heartbeat every %gs, state in %s, %s", node.name,
             namespace, app.display_url, agent.slots, interval_s, agent.state_dir,
             f"metrics on :{metrics_port}/metrics" if metrics_port else "no metrics port",
             extra={"fields": {"node": node.name, "namespace": namespace, "redis": app.display_url,
                               "metrics_port": metrics_port, "pid": os.getpid(), "state_dir": str(agent.state_dir)}})
    agent.run()

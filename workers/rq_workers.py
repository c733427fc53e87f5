"""A node agent's RQ workers, supervised: one that quits is started again.

The agent runs ``slots`` RQ workers on its node's queue, each a process of its own
(``python -P -m workers.rq_workers``, the URL in its environment, never on its command
line), started fresh rather than forked from the agent: the agent has threads and open
SQLite connections (the node's journal), which a forked child must not inherit. Each
worker leads a process group of its own, so a signal meant for the agent (a Ctrl+C) does
not reach it twice. Each waits out a Redis outage, one while its work horse runs
included: it watches the horse on and writes its heartbeat once Redis answers again
(``patient_worker.py``, over RQ's own worker, which quits then and leaves the horse
unwatched). One that quits all the same (an error RQ does not handle): the agent looks
every half second and starts another in its place (after a pause that grows, up to 10 s,
while workers keep quitting soon after they start: a Redis that is away is not hammered). Each
is recorded in the node's journal, so that the next agent of the node, after this one
died, stops the ones it left behind (their work horses lead groups of their own and live
on: the agent adopts or stops them through the journal like any execution). Meanwhile a
worker whose agent is gone stops itself, after its current job: nothing supervises it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

from scheduler.control import process_groups
from scheduler.control.journal import Journal

log = logging.getLogger("sched.agent")
URL_ENV = "SCHED_RQ_URL"
AGENT_PID_ENV = "SCHED_AGENT_PID"  # the agent that started the worker (it may be gone before the worker runs)
SHORT_LIFE_S = 10.0  # a worker that quits sooner than this makes the next start wait
MAX_PAUSE_S = 10.0
AGENT_CHECK_S = 0.5  # how often a worker looks whether its agent still runs
# How often a worker looks at its work horse and renews its heartbeat and its job's in RQ's
# Redis (RQ's default is 30 s): a Redis outage meets it this soon, and is waited out
# (patient_worker.py). One pipeline every 5 s per busy slot.
WATCH_S = 5


class RQWorkers:
    def __init__(self, rq_url: str, queue_name: str, slots: int, journal: Journal, labels: tuple[str, ...] = ()):
        self.rq_url, self.queue_name, self.slots = rq_url, queue_name, slots
        self.journal = journal  # this thread's connection
        self.labels = labels  # shown on each worker's command line (which agent it belongs to)
        self._processes: dict[str, subprocess.Popen] = {}
        self._started_at: dict[str, float] = {}
        self._short_lives = 0  # workers in a row that quit soon after starting
        self._next_start = 0.0
        self._lock = threading.Lock()
        self.stopping = 0  # stop requests sent so far (1: warm shutdown, 2: cold)

    def stop_left_behind(self) -> list[str]:
        """SIGKILL the RQ workers an earlier agent of this node started that still run (their
        work horses live on, adopted through the journal); returns their names."""
        stopped = []
        for name, process in self.journal.rq_workers().items():
            if name not in self._processes:
                if process_groups.running(process):
                    process_groups.kill(process)
                    stopped.append(name)
                self.journal.rq_worker_gone(name)
        return stopped

    def supervise(self) -> None:
        """Start workers in the place of those that quit (none once stopping)."""
        now = time.monotonic()
        for name, process in list(self._processes.items()):
            if process.poll() is not None:
                with self._lock:
                    del self._processes[name]
                lived = now - self._started_at.pop(name, now)
                self.journal.rq_worker_gone(name)
                if not self.stopping:
                    self._short_lives = self._short_lives + 1 if lived < SHORT_LIFE_S else 0
                    self._next_start = now + (min(MAX_PAUSE_S, 0.25 * 2 ** self._short_lives)
                                              if self._short_lives else 0.0)
                    log.warning("RQ worker %s quit (exit code %s) after %.1f s; starting another", name,
                                process.returncode, lived)
        while not self.stopping and len(self._processes) < self.slots and now >= self._next_start:
            name = f"{self.queue_name}-{uuid.uuid4().hex[:8]}"
            argv = [sys.executable, "-P", "-m", "workers.rq_workers", *self.labels, "rq-worker", name, self.queue_name]
            env = dict(os.environ, **{URL_ENV: self.rq_url, AGENT_PID_ENV: str(os.getpid())})
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, process_group=0)
            with self._lock:
                self._processes[name] = process
            self._started_at[name] = now
            self.journal.rq_worker_started(name, process_groups.identify(process.pid))

    def names(self) -> set[str]:
        """The workers running now (any thread may ask)."""
        with self._lock:
            return {name for name, process in self._processes.items() if process.poll() is None}

    def stop(self) -> None:
        """Ask every worker to stop: the first time after its current job (RQ's warm
        shutdown), the second time at once (cold: its work horse is killed)."""
        self.stopping += 1
        for process in list(self._processes.values()):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)

    @property
    def running(self) -> bool:
        return any(process.poll() is None for process in list(self._processes.values()))


def main(argv: list[str]) -> None:
    """``python -m workers.rq_workers [labels...] rq-worker NAME QUEUE``: one RQ worker."""
    from rq import Queue

    import scheduler.control.execution  # noqa: F401 (work horses fork with it imported)
    from scheduler.state.connection import client_for
    from workers.patient_worker import PatientWorker

    name, queue_name = argv[-2], argv[-1]
    agent_pid = int(os.environ.get(AGENT_PID_ENV) or os.getppid())
    if os.getppid() != agent_pid:
        return  # the agent died while this worker started: nobody would supervise it
    connection = client_for(os.environ[URL_ENV], decode_responses=False)
    worker = PatientWorker([Queue(queue_name, connection=connection)], connection=connection, name=name,
                           job_monitoring_interval=WATCH_S, agent_pid=agent_pid)
    threading.Thread(target=_stop_without_agent, args=(agent_pid,), name="agent-watch", daemon=True).start()
    worker.work(burst=False, logging_level="WARNING", with_scheduler=False)


def _stop_without_agent(agent_pid: int) -> None:
    """Stop this worker (RQ's warm shutdown: after its current job) once its agent is gone.
    An agent killed outright (SIGKILL, the OOM killer) cannot stop its workers, and one
    left running would take new work for a node nobody supervises, or retry a Redis that
    is gone for good. Its work horse lives on as before, for the node's next agent to adopt
    or stop through the journal."""
    while os.getppid() == agent_pid:
        time.sleep(AGENT_CHECK_S)
    os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    main(sys.argv[1:])

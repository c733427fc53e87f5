"""A node agent's RQ workers, supervised: one that quits is started again.

The agent runs ``slots`` RQ workers on its node's queue, forked from its main thread (so
they start with everything imported). RQ's worker loop quits on errors it does not handle
(a check-in that meets Redis down for longer than its client's retries, say): the agent
looks every half second and starts a new one in its place. Each is recorded in the node's
journal, so that the next agent of the node, after this one died, stops the ones it left
behind (their work horses lead process groups of their own and live on: the agent adopts
or stops them through the journal like any execution).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import uuid
from multiprocessing import get_context

from rq import Queue
from rq.worker import Worker

from scheduler.control import process_groups
from scheduler.control.journal import Journal
from scheduler.state.connection import client_for

log = logging.getLogger("sched.agent")
_fork = get_context("fork")


def _work(name: str, rq_url: str, queue_name: str) -> None:
    """One RQ worker process (the target of each fork)."""
    connection = client_for(rq_url, decode_responses=False)
    worker = Worker([Queue(queue_name, connection=connection)], connection=connection, name=name)
    worker.work(burst=False, logging_level="WARNING", with_scheduler=False)


class RQWorkers:
    def __init__(self, rq_url: str, queue_name: str, slots: int, journal: Journal):
        self.rq_url, self.queue_name, self.slots = rq_url, queue_name, slots
        self.journal = journal  # this thread's connection
        self._processes: dict[str, object] = {}  # worker name -> multiprocessing Process
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
        for name, process in list(self._processes.items()):
            if not process.is_alive():
                process.join(0)  # reap it
                with self._lock:
                    del self._processes[name]
                self.journal.rq_worker_gone(name)
                if not self.stopping:
                    log.warning("RQ worker %s quit (exit code %s); starting another", name, process.exitcode)
        while not self.stopping and len(self._processes) < self.slots:
            name = f"{self.queue_name}-{uuid.uuid4().hex[:8]}"
            process = _fork.Process(target=_work, args=(name, self.rq_url, self.queue_name), name=f"rq worker {name}",
                                    daemon=False)
            process.start()
            with self._lock:
                self._processes[name] = process
            self.journal.rq_worker_started(name, process_groups.identify(process.pid))

    def names(self) -> set[str]:
        """The workers running now (any thread may ask)."""
        with self._lock:
            return {name for name, process in self._processes.items() if process.is_alive()}

    def stop(self) -> None:
        """Ask every worker to stop: the first time after its current job (RQ's warm
        shutdown), the second time at once (cold: its work horse is killed)."""
        self.stopping += 1
        for process in list(self._processes.values()):
            try:
                os.kill(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    @property
    def running(self) -> bool:
        return any(process.is_alive() for process in self._processes.values())

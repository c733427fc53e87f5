"""The node agent: makes a machine a node, and runs what the scheduler places on it.

``sched agent NAME --cpu 4 --memory 8GiB --label zone=a`` registers (or updates) the node,
heartbeats with a TTL, and runs a pool of RQ workers on the node's own RQ queue. A
background loop watches the node's task set: each newly assigned task is enqueued once
(the task hash's ``enqueued`` flag is set with HSETNX, so a restarted agent does not
enqueue twice), a task without ``run`` is simply marked running (it holds its
reservation until stopped), and a task that is no longer this node's (stopped, scaled
down, lost while the node was away and replaced) is stopped in RQ.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import redis
from rq import Queue
from rq.command import send_shutdown_command, send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job
from rq.worker import Worker
from rq.worker_pool import WorkerPool

from scheduler.control import heartbeat
from scheduler.control import reconcile
from scheduler.state.app import App
from scheduler.state.connection import wait_for_redis
from scheduler.control.execution import rq_job_id, run_task
from scheduler.model import ASSIGNED, COMPLETED, FAILED, RUNNING, Node
from workers import metrics
from workers.health import HealthChecks

log = logging.getLogger("sched.agent")


def _process_alive(worker: Worker) -> bool:
    """Whether an RQ worker registered on this machine still runs (a SIGKILLed one stays
    registered until its TTL runs out). Workers on other machines are taken as alive."""
    if worker.hostname != socket.gethostname():
        return True
    if not os.path.isdir("/proc"):
        try:
            os.kill(worker.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        with open(f"/proc/{worker.pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is not running
    except FileNotFoundError:
        return False
    except OSError:
        return True


class NodeAgent:
    def __init__(self, app: App, node: Node, interval_s: float = heartbeat.DEFAULT_INTERVAL_S, slots: int = 2):
        self.app = app
        self.node = node
        self.interval_s = interval_s
        self.slots = slots
        self.rq_connection = app.rq_client
        self.rq_queue = Queue(app.keys.rq_queue_name(node.name), connection=self.rq_connection)
        self.started: dict[str, str] = {}  # task id -> RQ job id, for what this agent enqueued
        self._stop = threading.Event()
        self.mine: set[str] = set()  # tasks this agent started, until they leave the node (for metrics)
        self.last_beat = time.monotonic()
        metrics.heartbeat_age(lambda: self.last_beat)

    def register(self) -> None:
        self.app.store.put_node(self.node)
        self._adopt()
        heartbeat.beat(self.app.store, self.node.name, self.interval_s)
        self.last_beat = time.monotonic()

    def _adopt(self) -> None:
        """Take over from a previous agent of this node. Its RQ workers and work horses can
        outlive it: live ones are asked to finish their current job and leave (ours replace
        them), and their jobs are adopted so that sync stops the ones whose task is no longer
        this node's. A task that was running in a work horse that died with the old agent
        has ended: it is reported failed (and so restarted as its job says); an assigned
        task whose RQ job was lost is enqueued again."""
        store, keys = self.app.store, self.app.keys
        alive = set()
        for worker in Worker.all(queue=self.rq_queue):
            if _process_alive(worker):
                alive.add(worker.name)
                send_shutdown_command(self.rq_connection, worker.name)
        registry = self.rq_queue.started_job_registry
        for job_id in {*registry.get_job_ids(), *self.rq_queue.get_job_ids()}:
            try:
                job = Job.fetch(job_id, connection=self.rq_connection)
            except NoSuchJobError:
                continue
            if len(job.args) == 4:  # run_task(url, namespace, node, task_id)
                self.started[job.args[3]] = job_id
        for task in store.tasks(store.node_task_ids(self.node.name)):
            job_id = rq_job_id(keys.namespace, task.id)
            try:
                job = Job.fetch(job_id, connection=self.rq_connection)
                working = job.is_queued or (job.is_started and job.worker_name in alive)
            except NoSuchJobError:
                working = False
            if working:
                continue
            if task.state == RUNNING and task.enqueued:
                reconcile.task_ended(store, task, False, "its agent restarted while it ran")
            elif task.state == ASSIGNED and task.enqueued:
                store.mark_enqueued(task.id, False)

    def sync(self) -> None:
        """Enqueue newly assigned tasks; stop the ones that are no longer this node's."""
        store, keys = self.app.store, self.app.keys
        ids = store.node_task_ids(self.node.name)
        for task in store.tasks(ids):
            if task.state == RUNNING and task.node == self.node.name and task.id in self.started:
                self._settle(task)
                continue
            if task.state != ASSIGNED or task.node != self.node.name:
                continue
            if not store.mark_enqueued(task.id):
                continue
            spec = store.job_spec(task.job, task.version)
            self.mine.add(task.id)
            metrics.AGENT_STARTED.inc()
            if spec.run is None:
                store.start_task(task.id, self.node.name)
                continue
            job_id = rq_job_id(keys.namespace, task.id)
            timeout = int(spec.run["timeout"]) + 30 if spec.run.get("timeout") else -1
            # Both URLs: the scheduling state's (any topology) and RQ's own execution Redis.
            self.rq_queue.enqueue_call(run_task, args=(self.app.url, keys.namespace, self.node.name, task.id),
                                       kwargs={"rq_url": self.app.rq_url},
                                       job_id=job_id, timeout=timeout, result_ttl=3600, failure_ttl=86400,
                                       description=f"task {task.id}")
            self.started[task.id] = job_id
        current = set(ids)
        for task_id in [t for t in self.started if t not in current]:
            self._stop_rq_job(self.started.pop(task_id))
        self._count_finished(current)

    def _settle(self, task) -> None:
        """A task the state still calls running whose RQ job has ended: the end its work
        horse wrote was lost (acknowledged by a master that then failed over) or never
        written (Redis was away). Write it again from RQ's own record of the run (the
        execution Redis is not the one that failed); a task that ended meanwhile is left
        as it is (finish.lua does not touch a terminal task)."""
        try:
            job = Job.fetch(self.started[task.id], connection=self.rq_connection)
        except NoSuchJobError:
            job = None
        if job is not None and not (job.is_finished or job.is_failed):
            return  # queued or still running
        result = job.return_value() if job is not None and job.is_finished else None
        if isinstance(result, dict) and result.get("ran"):
            ended = reconcile.task_ended(self.app.store, task, bool(result.get("succeeded")), result.get("message", ""))
        else:
            ended = reconcile.task_ended(self.app.store, task, False, "its run ended, but how was not recorded")
        if ended["state"] in (COMPLETED, FAILED):
            log.warning("agent %s: task %s had ended (%s) without the end being recorded; recorded now",
                        self.node.name, task.id, ended["state"], extra={"fields": {"node": self.node.name,
                                                                                 "task": task.id}})

    def _count_finished(self, current: set[str]) -> None:
        """Count (and log, if failed) the tasks this agent started that left the node."""
        gone = [task_id for task_id in self.mine if task_id not in current]
        metrics.AGENT_RUNNING.set(len(self.mine) - len(gone))
        if not gone:
            return
        self.mine.difference_update(gone)
        for task in self.app.store.tasks(gone):
            metrics.AGENT_FINISHED.labels(task.state).inc()
            if task.state == FAILED:
                log.warning("agent %s: task %s failed: %s", self.node.name, task.id, task.message or "-",
                            extra={"fields": {"node": self.node.name, "task": task.id}})

    def _stop_rq_job(self, job_id: str) -> None:
        try:
            job = Job.fetch(job_id, connection=self.rq_connection)
        except NoSuchJobError:
            return
        if job.is_queued or job.is_deferred or job.is_scheduled:
            job.cancel()
        elif job.is_started:
            try:
                send_stop_job_command(self.rq_connection, job_id)
            except InvalidJobOperation:
                pass

    def loop(self) -> None:
        """Heartbeat every interval; sync several times per interval."""
        last_beat = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now - last_beat >= self.interval_s:
                    heartbeat.beat(self.app.store, self.node.name, self.interval_s)
                    last_beat = self.last_beat = now
                self.sync()
            except redis.RedisError as exc:
                log.warning("agent %s: %s", self.node.name, exc)
            self._stop.wait(min(0.2, self.interval_s / 4))

    def run(self) -> None:
        """Register, then run the RQ worker pool in this thread until a signal stops it."""
        self.register()
        thread = threading.Thread(target=self.loop, name="agent-loop", daemon=True)
        thread.start()
        HealthChecks(self.app, self.node.name, self._stop).start()
        pool = WorkerPool([self.rq_queue], connection=self.rq_connection, num_workers=self.slots)
        try:
            pool.start(burst=False, logging_level="WARNING")
        finally:
            self._stop.set()
            thread.join(timeout=5)


def run_agent(app: App, node: Node, interval_s: float = heartbeat.DEFAULT_INTERVAL_S, slots: int = 2,
              metrics_port: int | None = None) -> None:
    """Run a node agent for ``node`` until a signal stops it (``sched agent``). A Redis
    that does not answer yet is waited for (logged on stderr), not a reason to exit."""
    wait_for_redis(app.url)
    agent = NodeAgent(app, node, interval_s=interval_s, slots=slots)
    if metrics_port:
        metrics.serve(metrics_port)
    namespace = app.keys.namespace
    log.info("agent %s started: namespace %s, Redis %s, %d slots, heartbeat every %gs, %s", node.name, namespace,
             app.display_url, slots, interval_s,
             f"metrics on :{metrics_port}/metrics" if metrics_port else "no metrics port",
             extra={"fields": {"node": node.name, "namespace": namespace, "redis": app.display_url,
                               "metrics_port": metrics_port, "pid": os.getpid()}})
    agent.run()

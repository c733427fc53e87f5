"""Helpers for the multi-process worker tests, and a script that runs one crippled worker.

As a script (``python tests/worker_harness.py --redis-url ... --namespace ... --marker F
--mode kill|pause``) it builds an App and a SchedulerWorker and runs ONE ``step()`` with
``workers.scheduler_worker.commit`` replaced: the replacement writes the marker file
(JSON: pid, fencing token, the planned placements) once the worker has claimed and
placed its batch, then

- ``--mode kill``: sleeps forever (the test SIGKILLs it: a worker dying between claim
  and commit);
- ``--mode pause``: waits for the ``--go`` file to appear (the test SIGSTOPs it meanwhile,
  lets its lease expire and another worker take the tasks, then SIGCONTs it), calls the
  REAL commit with its old token, and at the end prints every CommitResult as JSON on
  stdout.

As a module it gives the tests :func:`cluster_problems` (every invariant the scheduler
promises, checked from the outside, independently of ``scheduler.audit`` as well as
through it), :func:`redis_ms` and :func:`wait_until`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson

from scheduler.state.connection import time_ms

QUEUES = ("active", "backoff", "unschedulable", "inflight")


# ----------------------------------------------------------------------------- helpers for tests
def redis_ms(app) -> int:
    return time_ms(app.client.time())


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.02, detail=None):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s`` (a
    liveness bound, never a speed threshold), showing ``detail()`` if given."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            shown = f"\n{detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{shown}")
        time.sleep(interval_s)


def wait_for_redis_time(app, deadline_ms: int, timeout_s: float = 30.0) -> None:
    """Sleep until Redis TIME is past ``deadline_ms`` (leases follow Redis's clock, not ours)."""
    wait_until(lambda: redis_ms(app) > deadline_ms, timeout_s, f"Redis TIME to pass {deadline_ms}", 0.01)


def run_worker_until_idle(app, config=None, timeout_s: float = 30.0):
    """Run an in-process SchedulerWorker until it is idle; fail (instead of hanging) if it
    is still busy after ``timeout_s`` (a liveness bound)."""
    from workers.scheduler_worker import SchedulerWorker, WorkerConfig

    worker = SchedulerWorker(app, config or WorkerConfig(until_idle=True))
    assert worker.config.until_idle
    fired = []

    def watchdog():
        fired.append(True)
        worker.stop()

    timer = threading.Timer(timeout_s, watchdog)
    timer.start()
    try:
        stats = worker.run()
    finally:
        timer.cancel()
    if fired:
        raise AssertionError(f"the worker was still busy after {timeout_s} s: {app.queue.counts()}")
    return stats


def queue_members(app) -> dict[str, set[str]]:
    k = app.keys
    return {name: set(app.client.zrange(getattr(k, name), 0, -1)) for name in QUEUES}


def tasks_by_id(app) -> dict[str, dict]:
    store = app.store
    return {t.id: t for t in store.tasks(store.all_task_ids())}


def cluster_problems(app, *, settled: bool = True) -> tuple[list[str], dict]:
    """Check every promise about the state of a namespace. Returns (problems, summary).

    - ``scheduler.audit`` is ok and finds no overcommit;
    - every node: allocated <= capacity for every resource, allocated equals the sum of
      the job-spec requests of the tasks assigned to it (recomputed from the specs, not
      from what the commit wrote on the task), host ports held exactly by its tasks,
      task count / node task set / ``tally:job:<job>`` all equal to the tasks on it;
    - every task is assigned to exactly one node (in that node's task set and in no
      other, in no queue, holding no lease) or pending in exactly one queue;
    - with ``settled``: no task is in active, backoff or inflight, no lease is held, and
      every pending task sits in q:unschedulable with a stored explanation
      ({nodes_evaluated, reasons, message}).
    """
    from scheduler.control.audit import audit

    store, keys, client = app.store, app.keys, app.client
    problems: list[str] = []
    report = audit(store)
    problems += [f"audit: {p}" for p in report.problems]
    if report.overcommits:
        problems.append(f"audit counted {report.overcommits} overcommits")

    nodes = {n.name: n for n in store.nodes()}
    tasks = tasks_by_id(app)
    queues = queue_members(app)
    leases = client.hgetall(keys.leases)
    node_sets = {name: set(client.smembers(keys.node_tasks(name))) for name in nodes}
    specs: dict[tuple[str, int], object] = {}

    def spec_of(task):
        key = (task.job, int(task.version))
        if key not in specs:
            specs[key] = store.job_spec(*key)
        return specs[key]

    expected_alloc: dict[str, Counter] = defaultdict(Counter)
    expected_ports: dict[str, dict[int, str]] = defaultdict(dict)
    on_node: dict[str, set[str]] = defaultdict(set)
    per_job_node: dict[str, Counter] = defaultdict(Counter)
    assigned: dict[str, int] = Counter()
    pending: dict[str, int] = Counter()
    for task_id, task in sorted(tasks.items()):
        state = task.state
        where = [name for name in QUEUES if task_id in queues[name]]
        holders = sorted(name for name, members in node_sets.items() if task_id in members)
        if state == "assigned":
            node = task.node
            assigned[task.job] += 1
            if where:
                problems.append(f"assigned task {task_id} is still queued in {where}")
            if holders != [node]:
                problems.append(f"assigned task {task_id} (node {node!r}) is in the task sets of {holders}")
            if task_id in leases:
                problems.append(f"assigned task {task_id} still holds lease {leases[task_id]}")
            if node not in nodes:
                problems.append(f"assigned task {task_id} is on unknown node {node!r}")
                continue
            spec = spec_of(task)
            expected_alloc[node].update({r: a for r, a in spec.resources.items() if a > 0})
            for port in spec.ports:
                if port in expected_ports[node]:
                    problems.append(f"port {port} on {node} wanted by {expected_ports[node][port]} and {task_id}")
                expected_ports[node][port] = task_id
            on_node[node].add(task_id)
            per_job_node[task.job][node] += 1
        elif state == "pending":
            pending[task.job] += 1
            if len(where) != 1:
                problems.append(f"pending task {task_id} is in {len(where)} queues: {where}")
            if holders:
                problems.append(f"pending task {task_id} is in the task sets of {holders}")
            if settled:
                if where != ["unschedulable"]:
                    problems.append(f"pending task {task_id} is in {where}, expected only unschedulable")
                problems += _explanation_problems(task_id, task.explanation)
        else:
            problems.append(f"task {task_id} is in unexpected state {state!r}")
    if settled and leases:
        problems.append(f"leases still held after settling: {leases}")

    job_tallies = {job: {n: int(c) for n, c in client.zrange(keys.tally_job(job), 0, -1, withscores=True)
                         if int(c) != 0}
                   for job in store.job_ids()}
    for name, node in sorted(nodes.items()):
        for resource, capacity in node.capacity.items():
            used = node.allocated.get(resource, 0)
            if used > capacity:
                problems.append(f"node {name} overcommitted: {resource} {used} > {capacity}")
        for resource in set(node.allocated) | set(expected_alloc[name]) | set(node.capacity):
            if node.allocated.get(resource, 0) != expected_alloc[name].get(resource, 0):
                problems.append(f"node {name} {resource} allocated {node.allocated.get(resource, 0)}, "
                                f"its assigned tasks request {expected_alloc[name].get(resource, 0)}")
        if node.ports != expected_ports[name]:
            problems.append(f"node {name} ports {node.ports} != its tasks' ports {expected_ports[name]}")
        count = len(on_node[name])
        if node.tasks != count or node_sets[name] != on_node[name]:
            problems.append(f"node {name}: tasks field {node.tasks}, task set {sorted(node_sets[name])}, "
                            f"assigned tasks {sorted(on_node[name])}")
    for job, tally in job_tallies.items():
        if tally != dict(per_job_node[job]):
            problems.append(f"tally:job:{job} {tally} != tasks per node {dict(per_job_node[job])}")
    summary = {"assigned": dict(assigned), "pending": dict(pending), "nodes": nodes, "tasks": tasks,
               "per_job_node": {job: dict(c) for job, c in per_job_node.items()}}
    return problems, summary


def _explanation_problems(task_id: str, raw: str | None) -> list[str]:
    if not raw:
        return [f"pending task {task_id} has no stored explanation"]
    try:
        explanation = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return [f"pending task {task_id} explanation is not JSON: {raw!r}"]
    problems = []
    if not isinstance(explanation, dict) or set(explanation) < {"nodes_evaluated", "reasons", "message"}:
        return [f"pending task {task_id} explanation lacks nodes_evaluated/reasons/message: {raw!r}"]
    evaluated, why, message = explanation["nodes_evaluated"], explanation["reasons"], explanation["message"]
    if not isinstance(evaluated, int) or evaluated < 1:
        problems.append(f"pending task {task_id} explanation nodes_evaluated {evaluated!r}")
    if not isinstance(why, dict) or not why or not all(isinstance(v, int) and v > 0 for v in why.values()):
        problems.append(f"pending task {task_id} explanation reasons {why!r}")
    elif isinstance(evaluated, int) and sum(why.values()) > evaluated:
        problems.append(f"pending task {task_id} explanation counts {sum(why.values())} reasons "
                        f"over {evaluated} nodes")
    if not isinstance(message, str) or not message:
        problems.append(f"pending task {task_id} explanation message {message!r}")
    return problems


def format_problems(problems: list[str], limit: int = 40) -> str:
    shown = "\n  ".join(problems[:limit])
    more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"{len(problems)} problem(s):\n  {shown}{more}"


# ----------------------------------------------------------------------------- the crippled worker
def _write_atomically(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--marker", required=True, type=Path)
    parser.add_argument("--mode", choices=("kill", "pause"), required=True)
    parser.add_argument("--go", type=Path, default=None)
    parser.add_argument("--lease-ms", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    if args.mode == "pause" and args.go is None:
        parser.error("--mode pause needs --go")

    import workers.scheduler_worker as sw
    from scheduler.state.app import App

    real_commit = sw.commit
    results = []

    def crippled_commit(scripts, keys, token, plans):
        if not results:  # the first commit of the step: the worker has claimed and placed
            _write_atomically(args.marker, {"pid": os.getpid(), "token": token,
                                            "plans": [[p.task_id, p.node] for p in plans]})
        if args.mode == "kill":
            while True:
                time.sleep(3600)
        while not args.go.exists():
            time.sleep(0.01)
        result = real_commit(scripts, keys, token, plans)
        results.append(result)
        return result

    sw.commit = crippled_commit
    app = App(redis_url=args.redis_url, namespace=args.namespace)
    worker = sw.SchedulerWorker(app, sw.WorkerConfig(batch_size=args.batch_size, lease_ms=args.lease_ms))
    claimed = worker.step()
    print(json.dumps({
        "claimed": claimed,
        "stats": worker.stats.as_dict(),
        "commits": [{"now_ms": r.now_ms,
                     "accepted": [[p.task_id, p.node] for p in r.accepted],
                     "refused": [[p.task_id, p.node, reason] for p, reason in r.refused]}
                    for r in results],
    }))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

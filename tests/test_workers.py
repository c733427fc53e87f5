"""Scheduler workers as real OS processes against the real redis-server.

Several `sched worker` processes contend for a cluster too small for what is asked; only
invariants are asserted (never how the races went): no overcommit, allocations equal to
what the assigned tasks request, tallies that agree, every task placed exactly once or
pending with an explanation, and as many placements as capacity allows where that can
be computed. Then a background worker that must notice a new node, and stop on SIGTERM.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.control.worker_config import WorkerConfig
from scheduler.model import make_node, parse_job
from scheduler.engine.placement import filter_pipeline

from worker_harness import cluster_problems, format_problems, queue_members, wait_until

SCHED = str(Path(sys.executable).parent / "sched")
PROCESS_TIMEOUT_S = 90  # generous: only a hung worker should ever reach it


def sched(redis_url, namespace, *args) -> list[str]:
    return [SCHED, "--redis-url", redis_url, "--namespace", namespace, *args]


def start(command) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(processes: list[subprocess.Popen], timeout_s: float = PROCESS_TIMEOUT_S) -> list[tuple[int, str, str]]:
    """Wait for every process; kill them all (and fail) if any outlives the timeout."""
    outcomes = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=timeout_s)
            outcomes.append((process.returncode, out, err))
    except subprocess.TimeoutExpired:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for process in processes:
            process.communicate()
        raise AssertionError(f"a worker process did not finish within {timeout_s} s") from None
    return outcomes


# ----------------------------------------------------------------------------- a tight cluster
EDGE_NODES = 6

# name, cpu, memory, labels, extra resources
NODES = (
    [(f"e{i}", "1", "1GiB", ["zone=edge", f"rack=r{i % 2}"], {}) for i in range(EDGE_NODES)]
    + [(f"a{i}", cpu, mem, ["zone=a", f"rack=r{i % 3}"], gpu)
       for i, (cpu, mem, gpu) in enumerate([("1", "2GiB", {}), ("2", "4GiB", {}), ("2", "2GiB", {}),
                                            ("3", "4GiB", {}), ("1", "1GiB", {}), ("1500m", "2GiB", {}),
                                            ("4", "8GiB", {"gpu": "1"})])]
    + [(f"b{i}", cpu, mem, ["zone=b", f"rack=r{i % 2}"], gpu)
       for i, (cpu, mem, gpu) in enumerate([("2", "2GiB", {}), ("1", "2GiB", {}), ("3", "4GiB", {"gpu": "1"}),
                                            ("2", "3GiB", {}), ("2", "2GiB", {}), ("500m", "1GiB", {}),
                                            ("2", "4GiB", {})])]
)

NOT_EDGE = "node.labels.zone!=edge"

JOBS = [
    # host port 80, only on the edge nodes, which nothing else may use: exactly EDGE_NODES fit
    {"id": "edge", "replicas": 10, "priority": 60, "ports": [80], "constraints": ["node.labels.zone==edge"],
     "resources": {"cpu": "500m", "memory": "256MiB"}},
    {"id": "web", "replicas": 18, "ports": [8080], "strategy": "spread", "constraints": [NOT_EDGE],
     "preferences": [{"spread": "node.labels.zone"}], "resources": {"cpu": "500m", "memory": "512MiB"}},
    {"id": "cache", "replicas": 16, "max_per_node": 2, "strategy": "binpack", "constraints": [NOT_EDGE],
     "resources": {"cpu": "1", "memory": "1GiB"}},
    {"id": "zonal", "replicas": 14, "constraints": ["node.labels.zone==a"],
     "preferences": [{"spread": "node.labels.rack"}], "resources": {"cpu": "250m", "memory": "256MiB"}},
    # first in the queue, but it preempts nothing: whether its tasks would find room left by
    # the others depends on which worker commits first (preemption has tests of its own)
    {"id": "big", "replicas": 6, "priority": 70, "preempt": "never", "strategy": "binpack", "constraints": [NOT_EDGE],
     "resources": {"cpu": "2", "memory": "2GiB"}},
    {"id": "gpu", "replicas": 5, "constraints": [NOT_EDGE], "max_per_node": 3,
     "resources": {"cpu": "500m", "memory": "512MiB", "gpu": 1}},
]


def test_contending_worker_processes_keep_every_invariant(app, redis_url, namespace):
    store = app.store
    for name, cpu, memory, labels, extra in NODES:
        store.put_node(make_node(name, cpu=cpu, memory=memory, labels=labels, resources=extra))
    assert len(store.node_names()) == 20
    specs = {raw["id"]: parse_job(raw) for raw in JOBS}
    task_ids = []
    for spec in specs.values():
        task_ids += reconcile.submit(store, spec)["tasks"]
    total_cpu_asked = sum(s.resources["cpu"] * s.replicas for s in specs.values())
    total_cpu = sum(n.capacity["cpu"] for n in store.nodes())
    assert total_cpu_asked > total_cpu  # more is asked than fits

    # Four single-worker processes and one that runs two worker children (run_workers):
    # six worker loops in seven processes, small batches so that their commits collide.
    commands = [sched(redis_url, namespace, "worker", "--until-idle", "--batch-size", size, "--json")
                for size in ("8", "8", "5", "3")]
    commands.append(sched(redis_url, namespace, "worker", "--until-idle", "--batch-size", "4",
                          "--concurrency", "2", "--json"))
    outcomes = finish([start(command) for command in commands])
    for code, out, err in outcomes:
        assert code == 0, f"worker exited {code}\nstdout: {out}\nstderr: {err}"
    stats = [json.loads(out) for _, out, _ in outcomes]

    problems, summary = cluster_problems(app, settled=True)
    assert not problems, format_problems(problems)
    tasks = summary["tasks"]
    assert sorted(tasks) == sorted(task_ids)  # nothing lost, nothing invented
    assigned = [t for t in tasks.values() if t.state == "assigned"]
    # Every accepted commit is counted once by the worker that made it: equal to the
    # number of assigned tasks, so no task was committed twice.
    assert sum(s.get("placed", 0) for s in stats) == len(assigned)
    assert sum(s.get("claimed", 0) for s in stats) >= len(task_ids)

    nodes = summary["nodes"]
    per_job_node = summary["per_job_node"]
    # The edge sub-case: one port-80 task per edge node, and nothing else could take them.
    assert summary["assigned"].get("edge") == EDGE_NODES
    assert sorted(per_job_node["edge"]) == [f"e{i}" for i in range(EDGE_NODES)]
    for job, placed in per_job_node.items():
        spec = specs[job]
        for node_name, count in placed.items():
            node = nodes[node_name]
            assert all(c.matches(node) for c in spec.constraints), f"{job} placed on {node_name} against constraints"
            if spec.ports:
                assert count == 1, f"{count} tasks of {job} share host port {spec.ports} on {node_name}"
            if spec.max_per_node:
                assert count <= spec.max_per_node, f"{count} tasks of {job} on {node_name}"
    assert summary["assigned"].get("gpu", 0) <= 2  # only a6 and b2 have a gpu

    # As many placements as capacity allows: no pending task fits on any node now.
    for task in tasks.values():
        if task.state != "pending":
            continue
        spec = specs[task.job]
        verdict = filter_pipeline(spec).explain(list(nodes.values()), per_job_node.get(spec.id, {}))
        assert verdict.available == 0, (
            f"pending task {task.id} would fit on {verdict.available} node(s) now: a worker gave up "
            f"while there was room (explanation: {task.explanation})")
    assert queue_members(app)["unschedulable"] == {t.id for t in tasks.values() if t.state == "pending"}


# ----------------------------------------------------------------------------- a new node
def test_background_worker_places_unschedulable_tasks_when_a_node_is_added(app, redis_url, namespace):
    store = app.store
    for i in range(3):
        store.put_node(make_node(f"small{i}", cpu="2", memory="4GiB"))
    worker = start(sched(redis_url, namespace, "worker", "--batch-size", "16"))
    try:
        spec = parse_job({"id": "huge", "replicas": 3, "resources": {"cpu": "6", "memory": "1GiB"}})
        task_ids = reconcile.submit(store, spec)["tasks"]

        def all_unschedulable():
            if worker.poll() is not None:
                raise AssertionError(f"worker exited early with {worker.returncode}")
            return queue_members(app)["unschedulable"] == set(task_ids)

        wait_until(all_unschedulable, 20, "the tasks to be unschedulable")
        for task in store.tasks(task_ids):
            assert task.state == "pending"
            explanation = json.loads(task.explanation)
            assert explanation["nodes_evaluated"] == 3
            assert explanation["reasons"] == {"insufficient cpu": 3}
            assert "insufficient cpu" in explanation["message"]

        store.put_node(make_node("large", cpu="32", memory="64GiB"))

        def all_assigned():
            if worker.poll() is not None:
                raise AssertionError(f"worker exited early with {worker.returncode}")
            return all(t.state == "assigned" for t in store.tasks(task_ids))

        # Liveness bound, well under the 60 s leftover flush: the node's arrival is what
        # must bring the tasks back, not the periodic flush.
        wait_until(all_assigned, 20, "the tasks to be placed on the new node")
        assert {t.node for t in store.tasks(task_ids)} == {"large"}
        problems, _ = cluster_problems(app, settled=True)
        assert not problems, format_problems(problems)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            out, err = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, err = worker.communicate()
            raise AssertionError("the worker did not stop within 30 s of SIGTERM") from None
    assert worker.returncode == 0, f"worker exited {worker.returncode} after SIGTERM\nstdout: {out}\nstderr: {err}"
    assert "workers stopped" in out


# ----------------------------------------------------------------------------- idle
def test_an_idle_worker_waits_in_redis_and_wakes_for_a_submitted_job(app, redis_url, namespace):
    store = app.store
    store.put_node(make_node("n1", cpu="4", memory="8GiB"))
    worker = start(sched(redis_url, namespace, "worker"))
    try:
        def blocked_on_the_wake_list():
            if worker.poll() is not None:
                raise AssertionError(f"worker exited early with {worker.returncode}")
            return any(c.get("cmd") == "blpop" for c in app.client.client_list())

        # Idle, it waits on q:wake (BLPOP) between claims instead of polling the queue.
        wait_until(blocked_on_the_wake_list, 20, "the idle worker to wait on the wake list")
        task_ids = reconcile.submit(store, parse_job({"id": "web", "replicas": 2, "resources": {"cpu": "1"}}))["tasks"]
        wait_until(lambda: all(t.state == "assigned" for t in store.tasks(task_ids)), 20, "the tasks to be placed")
        assert app.client.llen(app.keys.wake) <= 8
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err


# ----------------------------------------------------------------------------- refused, then placed
def test_task_refused_at_commit_then_placed_is_not_counted_unplaced(app, monkeypatch):
    """Two workers in one process, interleaved on purpose: between A's placement and its
    commit, B fills the only node and a second node appears. A's commit is refused, its
    next round places the task on the new node, and the worker must not report (or hand
    back to the queue) a task it placed."""
    import workers.scheduler_worker as sw

    store = app.store
    store.put_node(make_node("n1", cpu="1", memory="4GiB"))
    reconcile.submit(store, parse_job({"id": "j", "replicas": 2, "resources": {"cpu": "1", "memory": "1GiB"}}))
    a = sw.SchedulerWorker(app, sw.WorkerConfig(batch_size=1))
    b = sw.SchedulerWorker(app, sw.WorkerConfig(batch_size=1))
    real_commit = sw.commit
    outcomes, interleaving = [], []

    def interleaved(scripts, keys, token, plans):
        if not interleaving:  # A's first commit (B's own commit goes straight through)
            interleaving.append(True)
            assert [p.node for p in plans] == ["n1"]
            assert b.step() == 1 and b.stats.placed == 1  # B takes n1's only core
            store.put_node(make_node("n2", cpu="1", memory="4GiB"))
            interleaving.append(True)
        outcome = real_commit(scripts, keys, token, plans)
        if len(interleaving) == 2:
            outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(sw, "commit", interleaved)
    assert a.step() == 1
    assert [reason for _, reason in outcomes[0].refused] == ["insufficient cpu"]
    assert [(p.task_id, p.node) for p in outcomes[1].accepted] == [("j.0", "n2")]
    assert (a.stats.placed, a.stats.refused, a.stats.unplaced) == (1, 1, 0)
    a.report(), b.report()  # workers add to the shared counts every report_every_s, and on exit
    shared = app.client.hgetall(app.keys.stats)
    assert int(shared.get("placed", 0)) == 2 and int(shared.get("unplaced", 0)) == 0
    problems, summary = cluster_problems(app, settled=True)
    assert not problems, format_problems(problems)
    assert summary["assigned"] == {"j": 2}


def test_worker_processes_fork_only_from_a_parent_without_other_threads():
    from workers.supervisor import WorkerProcesses

    def method():
        return WorkerProcesses("unix:///nowhere", "ns", [WorkerConfig()]).start_method

    # A process of its own has no other thread for certain (here, an earlier test's thread
    # may end between the choice and a count of threads taken after it).
    alone = subprocess.run([sys.executable, "-c", "import threading; from workers.supervisor import WorkerProcesses; "
                            "from scheduler.control.worker_config import WorkerConfig; "
                            "assert threading.active_count() == 1; "
                            "print(WorkerProcesses('unix:///nowhere', 'ns', [WorkerConfig()]).start_method)"],
                           capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    assert alone.stdout.strip() == "fork"
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert method() == "spawn"  # a lock held by the other thread could outlive a fork
    finally:
        stop.set()
        other.join()


def test_forked_workers_start_from_one_read_of_the_nodes(app, redis_url):
    """The parent reads the nodes once for all its children (they follow the change feed
    from that copy): Redis serves one HGETALL per node, not one per node per worker, and
    the work is placed as usual."""
    from workers.supervisor import WorkerProcesses

    for i in range(20):
        app.store.put_node(make_node(f"n{i}", cpu=4, memory="8GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": 30, "resources": {"cpu": 1, "memory": "1GiB"}}))
    app.client.config_resetstat()
    pool = WorkerProcesses(redis_url, app.keys.namespace, [WorkerConfig(until_idle=True)] * 2)
    pool.start()
    pool.join(timeout=60)
    assert pool.crashed == 0
    stats, cpu = pool.totals()
    assert stats["placed"] == 30
    reads = app.client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    if pool.start_method == "fork":  # the first read and a few re-reads: never a whole second load
        assert 20 <= reads < 2 * 20, reads
        assert cpu >= pool.read_cpu_s > 0
    else:  # spawned (another thread runs here): each child reads every node itself
        assert reads >= 2 * 20 and pool.read_cpu_s == 0
    assert audit(app.store).ok

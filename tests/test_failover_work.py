"""Work that starts during a failover, end to end, as an operator runs it: a Redis
Cluster (3 masters, a replica each) or a master, a replica and 3 sentinels; two `sched
worker` processes; one `sched agent` with the default heartbeat and its RQ queue on a
plain server of its own (`--rq-url`) running 40 short commands and 2 long ones; tasks
on static nodes. The master of the namespace's slot is SIGKILLed while the long commands
run and the agent is starting the short ones.

Judged on the outcome: every command ran exactly once and its task completed (the long
ones outlived the failover); the workers and the agent carried on without a restart (the
same processes placed a job submitted after the failover, and ran the rest of the
commands); the audit passes.
With `--wait-replicas 1` the promoted master has no replica left (the old master stays
dead): writes go on without the WAIT, said once. The test prints how long the commands
took to finish after the kill and the placements per second of the job submitted after
the failover (docs/reliability.md records them); no duration is asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import ASSIGNED, COMPLETED, TERMINAL_STATES, make_node, parse_job
from scheduler.state.app import App

from redis_topologies import HOST, PASSWORD, Server, free_ports, wait_until

SCHED = str(Path(sys.executable).parent / "sched")
WAIT_S = 180  # deadlines only: a healthy run takes a fraction of this
COMMANDS = 40
LONG = 2  # commands that run across the failover (about 6 s each)
STATIC_NODES = 20
BEFORE, AFTER = 1500, 10000  # tasks on static nodes submitted before and after the kill


@pytest.fixture
def rq_server(tmp_path):
    port = free_ports(1)[0]
    server = Server(tmp_path / "rq", port, ["--requirepass", PASSWORD], PASSWORD)
    server.wait_ping()
    yield f"redis://:{PASSWORD}@{HOST}:{port}/0"
    server.stop()


def start(url: str, *args: str, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([SCHED, "--redis-url", url, *args], stdout=subprocess.DEVNULL,
                            stderr=log.open("w"), env={**os.environ, **env}, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def job(job_id: str, replicas: int, kind: str, run: dict | None = None) -> dict:
    spec = {"id": job_id, "replicas": replicas, "constraints": [f"node.labels.kind=={kind}"],
            "resources": {"cpu": "100m", "memory": "64MiB"}}
    if run is not None:
        spec.update(type="batch", max_retries=0, run=run)
    return spec


def states(app: App, job_id: str) -> dict[str, str]:
    return {task.id: task.state for task in app.store.tasks(app.store.job_task_ids(job_id))}


def placed(app: App, job_id: str) -> int:
    """Tasks of the job placed so far, from its tally (one cheap read)."""
    return sum(app.store.tallies([], [job_id]).jobs[job_id].values())


def assigned(app: App, job_id: str) -> int:
    return sum(1 for state in states(app, job_id).values() if state == ASSIGNED)


def work_started_during_failover(url: str, namespace: str, kill, rq_url: str, tmp_path: Path,
                                 wait_replicas: int) -> dict:
    env = {"SCHED_WAIT_REPLICAS": str(wait_replicas)}
    app = App(redis_url=url, namespace=namespace)
    for i in range(STATIC_NODES):
        app.store.put_node(make_node(f"s{i}", cpu="64", memory="256GiB", labels=["kind=static"]))
    ledger = tmp_path / "ledger"
    logs = {name: tmp_path / f"{name}.log" for name in ("agent", "w1", "w2")}
    # The default heartbeat: the defaults are chosen to fit a failover (docs/reliability.md,
    # "Redis stalls"), and a longer one would freeze the runs, not stop them.
    agent = start(url, "-n", namespace, "agent", "a1", "--cpu", "4", "--memory", "8GiB", "--label", "kind=agent",
                  "--rq-url", rq_url, "--slots", "4", env=env, log=logs["agent"])
    workers = [start(url, "worker", "--namespace", namespace, env=env, log=logs[name]) for name in ("w1", "w2")]
    processes = [agent, *workers]
    try:
        wait_until(lambda: "a1" in app.store.node_names(), WAIT_S, "the agent to register")
        command = ["sh", "-c", f'echo "$SCHED_TASK_ID" >> {ledger}']
        slow = ["sh", "-c", f'echo "$SCHED_TASK_ID" >> {ledger}; i=0; while [ $i -lt 30 ]; do sleep 0.2; '
                            f'i=$((i+1)); done; echo "$SCHED_TASK_ID" >> {ledger}']
        reconcile.submit(app.store, parse_job(job("before", BEFORE, "static")))
        reconcile.submit(app.store, parse_job(job("long", LONG, "agent", {"command": slow})))
        wait_until(lambda: ledger.exists() and len(ledger.read_text().split()) >= LONG, WAIT_S,
                   "the agent to start the long commands")
        reconcile.submit(app.store, parse_job(job("cmds", COMMANDS, "agent", {"command": command})))
        wait_until(lambda: len(ledger.read_text().split()) >= LONG + 5, WAIT_S, "the agent to start commands")
        killed_at = time.monotonic()
        kill()  # returns once a replica has taken over
        fresh = App(redis_url=url, namespace=namespace)
        submitted_at = time.monotonic()
        reconcile.submit(fresh.store, parse_job(job("after", AFTER, "static")))
        wait_until(lambda: placed(fresh, "after") == AFTER, WAIT_S, "the workers to place the job submitted after "
                                                                    "the failover", interval_s=0.1)
        placed_at = time.monotonic()
        wait_until(lambda: set(states(fresh, "cmds").values()) | set(states(fresh, "long").values())
                   <= TERMINAL_STATES, WAIT_S, f"every command to end ({states(fresh, 'cmds')})")
        commands_s = time.monotonic() - killed_at
        assert all(process.poll() is None for process in processes), "a worker or the agent exited"
    finally:
        for process in processes:
            stop(process)
    measured = {"commands_done_after_kill_s": round(commands_s, 1),
                "after_submitted_to_placed_s": round(placed_at - submitted_at, 1)}
    print(f"\nwait_replicas={wait_replicas}: {measured}")
    found = {**states(fresh, "cmds"), **states(fresh, "long")}
    assert found == {**{f"cmds.{i}": COMPLETED for i in range(COMMANDS)},
                     **{f"long.{i}": COMPLETED for i in range(LONG)}}, {
        task.id: (task.state, task.message) for task in fresh.store.tasks(list(found)) if task.state != COMPLETED}
    lines = ledger.read_text().split()
    assert sorted(lines) == sorted([*found, *states(fresh, "long")]), \
        f"commands that did not run exactly once (a long one writes its id as it starts and as it ends): {lines}"
    assert assigned(fresh, "before") == BEFORE and assigned(fresh, "after") == AFTER
    report = audit(fresh.store)
    assert report.ok, report.problems
    said = logs["w1"].read_text() + logs["w2"].read_text()
    if wait_replicas:
        assert "replica(s) in sync, fewer than the 1 that --wait-replicas asks for" in said, said[-3000:]
    return measured


@pytest.mark.slow
@pytest.mark.parametrize("wait_replicas", [0, 1])
def test_work_started_during_a_cluster_failover_runs_once(cluster_factory, rq_server, tmp_path, wait_replicas):
    """The namespace lives on the master of slot 0, the one a fresh redis-py client asks for
    the command table."""
    cluster = cluster_factory()
    first = next(port for port, node in cluster.topology().items() if node["role"] == "master"
                 and any(low <= 0 <= high for low, high in node["slots"]))
    namespace = next(f"cl-work-{i}" for i in range(1000) if cluster.master_of(f"sched:{{cl-work-{i}}}:x") == first)
    work_started_during_failover(cluster.url, namespace, lambda: cluster.kill_master_of(f"sched:{{{namespace}}}:x"),
                                 rq_server, tmp_path, wait_replicas)


@pytest.mark.slow
@pytest.mark.parametrize("wait_replicas", [0, 1])
def test_work_started_during_a_sentinel_failover_runs_once(sentinel_factory, rq_server, tmp_path, wait_replicas):
    """Sentinel declares the master down after 3 s: a failover longer than a few retries."""
    setup = sentinel_factory(down_after_ms=3000)
    work_started_during_failover(setup.url, "se-work", setup.kill_master, rq_server, tmp_path, wait_replicas)

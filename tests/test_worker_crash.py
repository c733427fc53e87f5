"""Workers that die or stall between claim and commit, as real processes.

``tests/worker_harness.py`` runs one worker step with its commit replaced by a hook that
writes a marker once the batch is claimed and placed. A worker SIGKILLed there leaves its
tasks leased in q:inflight; once the lease runs out (by Redis TIME) another worker takes
them, and each ends on exactly one node. A worker SIGSTOPped there past its lease, whose
tasks another worker meanwhile placed, commits with its stale fencing token when it
resumes: every placement is refused and nothing is counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job

from worker_harness import (cluster_problems, format_problems, queue_members, redis_ms, run_worker_until_idle,
                            wait_for_redis_time, wait_until)

HARNESS = str(Path(__file__).with_name("worker_harness.py"))


def start_harness(redis_url, namespace, tmp_path, mode, lease_ms) -> tuple[subprocess.Popen, Path, Path]:
    marker, go = tmp_path / "claimed.json", tmp_path / "go"
    command = [sys.executable, HARNESS, "--redis-url", redis_url, "--namespace", namespace,
               "--marker", str(marker), "--mode", mode, "--lease-ms", str(lease_ms), "--go", str(go)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, marker, go


def wait_for_marker(process: subprocess.Popen, marker: Path) -> dict:
    def ready():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"harness exited {process.returncode} before committing\n{out}\n{err}")
        return marker.exists()

    try:
        wait_until(ready, 30, "the harness worker to claim and place its batch")
    except AssertionError:
        if process.poll() is None:
            process.kill()
            process.communicate()
        raise
    return json.loads(marker.read_text())


def process_state(pid: int) -> str:
    """The one-letter state in /proc/<pid>/stat (T = stopped)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def setup_cluster(app, replicas: int) -> list[str]:
    for i in range(3):
        app.store.put_node(make_node(f"n{i}", cpu="4", memory="8GiB"))
    spec = parse_job({"id": "svc", "replicas": replicas, "ports": [],
                      "resources": {"cpu": "1", "memory": "512MiB"}})
    return reconcile.submit(app.store, spec)["tasks"]


def assert_placed_exactly_once(app, task_ids: list[str]) -> dict:
    problems, summary = cluster_problems(app, settled=True)
    assert not problems, format_problems(problems)
    tasks = summary["tasks"]
    assert sorted(tasks) == sorted(task_ids)
    assert all(tasks[t].state == "assigned" for t in task_ids), {t: tasks[t].state for t in task_ids}
    placed = [t for members in (app.store.node_task_ids(n) for n in app.store.node_names()) for t in members]
    assert sorted(placed) == sorted(task_ids)  # each on one node, none twice, none lost
    total = {r: sum(n.allocated.get(r, 0) for n in summary["nodes"].values()) for r in ("cpu", "memory")}
    assert total == {"cpu": 1000 * len(task_ids), "memory": 512 * 2**20 * len(task_ids)}
    return summary


# ----------------------------------------------------------------------------- SIGKILL
def test_worker_killed_between_claim_and_commit_loses_nothing(app, redis_url, namespace, tmp_path):
    task_ids = setup_cluster(app, replicas=6)
    lease_ms = 1500
    process, marker, _ = start_harness(redis_url, namespace, tmp_path, "kill", lease_ms)
    claimed = wait_for_marker(process, marker)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL

    # The dead worker planned every task, committed none, and still holds their leases.
    assert sorted(t for t, _ in claimed["plans"]) == sorted(task_ids)
    inflight = app.client.zrange(app.keys.inflight, 0, -1, withscores=True)
    assert sorted(t for t, _ in inflight) == sorted(task_ids)
    assert app.client.hgetall(app.keys.leases) == {t: claimed["token"] for t in task_ids}
    assert all(t.state == "pending" for t in app.store.tasks(task_ids))
    assert all(not n.allocated.get("cpu") and n.tasks == 0 for n in app.store.nodes())
    deadline = int(max(score for _, score in inflight))

    # While the lease runs, nobody takes the tasks back (checked only if there is clearly
    # time left, so a slow machine cannot make this fail).
    if redis_ms(app) < deadline - 500:
        assert app.queue.reclaim_expired() == []
        assert queue_members(app)["inflight"] == set(task_ids)

    wait_for_redis_time(app, deadline)
    stats = run_worker_until_idle(app)
    assert stats.placed == len(task_ids)
    assert_placed_exactly_once(app, task_ids)
    assert app.client.zcard(app.keys.inflight) == 0 and app.client.hlen(app.keys.leases) == 0


# ----------------------------------------------------------------------------- SIGSTOP
def test_worker_paused_past_its_lease_has_its_commit_refused(app, redis_url, namespace, tmp_path):
    task_ids = setup_cluster(app, replicas=5)
    lease_ms = 1000
    process, marker, go = start_harness(redis_url, namespace, tmp_path, "pause", lease_ms)
    try:
        claimed = wait_for_marker(process, marker)
        os.kill(process.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(process.pid) == "T", 10, "the harness to be stopped")
        assert sorted(t for t, _ in claimed["plans"]) == sorted(task_ids)
        deadline = int(max(score for _, score in app.client.zrange(app.keys.inflight, 0, -1, withscores=True)))

        # Past the lease, another worker reclaims the tasks and places them.
        wait_for_redis_time(app, deadline)
        stats = run_worker_until_idle(app)
        assert stats.placed == len(task_ids)
        before = assert_placed_exactly_once(app, task_ids)
        placement = {t: before["tasks"][t].node for t in task_ids}
        allocated = {name: dict(node.allocated) for name, node in before["nodes"].items()}

        # The stalled worker resumes and commits its old plan with its old token.
        go.touch()
        os.kill(process.pid, signal.SIGCONT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.communicate()
    assert process.returncode == 0, f"harness exited {process.returncode}\n{out}\n{err}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["claimed"] == len(task_ids)
    assert len(result["commits"]) == 1, result  # refused for a stale lease: not retried
    commit = result["commits"][0]
    assert commit["accepted"] == []
    assert sorted(t for t, _, _ in commit["refused"]) == sorted(task_ids)
    assert {reason for _, _, reason in commit["refused"]} == {"lease expired"}
    assert result["stats"]["placed"] == 0

    after = assert_placed_exactly_once(app, task_ids)
    assert {t: after["tasks"][t].node for t in task_ids} == placement
    assert {name: dict(node.allocated) for name, node in after["nodes"].items()} == allocated

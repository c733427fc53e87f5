"""How long Redis leaves sched's clients without an answer: a Sentinel failover, a Redis
Cluster master failover, and a restart from the append-only file.

    .venv/bin/python scripts/measure_outages.py [--runs 3] [--tasks 100000,1000000]

Each failover is built with the test suite's own topologies (``tests/redis_topologies.py``:
real servers on free ports, the master SIGKILLed once its replica has every write). A
thread beats as a node agent does (``heartbeat.beat`` through an ``App`` on the topology's
URL, so with sched's own clients and their failover retries) every 50 ms; the outage is the
longest time between two beats that succeeded, from the kill on. For the restart, a server
with ``appendfsync always`` holds a namespace of pending tasks, is SIGKILLed and started
again from its AOF; the outage is from the kill until it answers a PING. The figures are in
docs/reliability.md ("Redis stalls"), which chooses the heartbeat defaults from them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from redis_topologies import ClusterSet, SentinelSet  # noqa: E402
from restartable_redis import RestartableRedis  # noqa: E402

from scheduler.control import heartbeat, reconcile  # noqa: E402
from scheduler.model import parse_job  # noqa: E402
from scheduler.state.app import App  # noqa: E402

BEAT_EVERY_S = 0.05


class Beats(threading.Thread):
    """Beat every 50 ms through sched's client; keep when each beat succeeded."""

    def __init__(self, url: str, namespace: str):
        super().__init__(daemon=True)
        self.app = App(redis_url=url, namespace=namespace)
        self.done = threading.Event()
        self.ok: list[float] = []

    def run(self) -> None:
        while not self.done.is_set():
            try:
                heartbeat.beat(self.app.store, "probe", 1.0)
                self.ok.append(time.monotonic())
            except Exception:  # noqa: BLE001 - any failure is a beat that did not land
                pass
            self.done.wait(BEAT_EVERY_S)

    def outage(self, since: float) -> float:
        """The longest gap between two successful beats from ``since`` on (the kill comes
        after the replica has caught up, a moment later)."""
        times = [t for t in self.ok if t >= since]
        before = max((t for t in self.ok if t < since), default=since)
        return max(b - a for a, b in zip([before, *times], times))


def failover(make, kill, namespace: str) -> float:
    with tempfile.TemporaryDirectory(prefix="outage-") as folder:
        topology = make(Path(folder))
        try:
            beats = Beats(topology.url, namespace)
            beats.start()
            while len(beats.ok) < 20:
                time.sleep(0.05)
            killed_at = time.monotonic()
            kill(topology)  # returns once a replica has taken over
            served = time.monotonic()
            deadline = served + 60
            while not any(t > served for t in beats.ok) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            beats.done.set()
            beats.join(timeout=30)
            return beats.outage(killed_at)
        finally:
            topology.stop()


def restart(tasks: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="outage-") as folder:
        server = RestartableRedis(Path(folder) / "redis")
        server.start()
        try:
            app = App(redis_url=server.url, namespace="outage")
            reconcile.submit(app.store, parse_job({"id": "big", "replicas": tasks, "resources": {"cpu": 0.1}}))
            app.close()
            size = sum(p.stat().st_size for p in (Path(folder) / "redis").rglob("*.aof"))
            killed_at = time.monotonic()
            server.kill()
            server.start()  # returns once it answers
            return time.monotonic() - killed_at, size
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", default="100000,1000000", help="namespace sizes for the restart, comma-separated")
    args = parser.parse_args()
    cases = [
        ("Sentinel, down-after-milliseconds 1000", lambda d: SentinelSet(d, down_after_ms=1000),
         lambda s: s.kill_master(), "se"),
        ("Sentinel, down-after-milliseconds 3000", lambda d: SentinelSet(d, down_after_ms=3000),
         lambda s: s.kill_master(), "se"),
        ("Cluster, cluster-node-timeout 2000", lambda d: ClusterSet(d, node_timeout_ms=2000),
         lambda c: c.kill_master_of("sched:{cl}:x"), "cl"),
        ("Cluster, cluster-node-timeout 5000", lambda d: ClusterSet(d, node_timeout_ms=5000),
         lambda c: c.kill_master_of("sched:{cl}:x"), "cl"),
    ]
    for label, make, kill, namespace in cases:
        seconds = [failover(make, kill, namespace) for _ in range(args.runs)]
        print(f"{label}: outage {statistics.mean(seconds):.1f} s mean, {min(seconds):.1f}-{max(seconds):.1f} s "
              f"over {len(seconds)} runs ({', '.join(f'{s:.1f}' for s in seconds)})", flush=True)
    for tasks in (int(n) for n in args.tasks.split(",")):
        seconds, size = restart(tasks)
        print(f"restart from the AOF, {tasks:,} tasks ({size / 2**20:.0f} MiB of AOF): outage {seconds:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()

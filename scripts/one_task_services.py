"""1,000 ready nodes (every third with the plugin ``network``) and 10,000 one-task jobs that
ask for no resources, placed by ``sched worker --concurrency 2 --until-idle``: the shape of
SwarmKit's scheduler benchmark (BenchmarkScheduler1kNodes10kTasks), through the Python API
and the worker command. Prints one JSON line: placements per second from the worker
command's start (Redis TIME just before it) to the last placement, and the command's own
wall time. Without a URL it starts a private redis-server, as ``sched bench`` does:

    .venv/bin/python scripts/one_task_services.py [URL] [NODES] [TASKS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from scheduler import native
from scheduler.client import Client
from scheduler.model import make_node
from scheduler.tools.bench.harness import redis_server

NAMESPACE = "shape"


def main(url: str, nodes: int, tasks: int) -> dict:
    client = Client(url, NAMESPACE)
    app = client.app
    app.store.clear_namespace()
    app.store.put_new_nodes([make_node(f"node{i}", cpu=4, memory="8GiB", plugins=["network"] if i % 3 == 0 else None)
                             for i in range(nodes)])
    client.submit_many({"id": f"task{i}", "replicas": 1} for i in range(tasks))
    sched = os.path.join(os.path.dirname(sys.executable), "sched")
    start_ms = app.store.now_ms()
    started = time.perf_counter()
    subprocess.run([sched, "--redis-url", url, "-n", NAMESPACE, "worker", "--concurrency", "2", "--until-idle"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    assigned = [t for t in client.tasks() if t.state == "assigned"]
    last_ms = max(t.assigned_ms for t in assigned)
    app.store.clear_namespace()
    return {"nodes": nodes, "tasks": tasks, "assigned": len(assigned),
            "placements_per_s": round(len(assigned) / ((last_ms - start_ms) / 1000), 1),
            "worker_command_s": round(wall, 3), "hot_path": native.STATE}


if __name__ == "__main__":
    args = sys.argv[1:]
    url = args.pop(0) if args and "://" in args[0] else None
    with redis_server(url) as server:
        print(json.dumps(main(server, int(args[0]) if args else 1000, int(args[1]) if len(args) > 1 else 10_000)))

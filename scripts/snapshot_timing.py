"""How long `sched snapshot save` and `restore` take, and how long a read of the whole
namespace takes (what writers wait when a save pauses them), for a namespace of N
placed one-task jobs on the embedded Redis (or SCHED_REDIS_URL). Prints one JSON line.

    .venv/bin/python scripts/snapshot_timing.py [JOBS]      # default 10000
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from scheduler import Client


def main(jobs: int) -> dict:
    source, copy = Client(namespace="snapshot-timing"), Client(namespace="snapshot-timing-copy")
    for client in (source, copy):
        client.store.clear_namespace()
    for i in range(20):
        source.add_node(f"n{i}", cpu=64, memory="256GiB")
    source.submit_many({"id": f"j{i}", "resources": {"cpu": "0.1", "memory": "64MiB"}} for i in range(jobs))
    source.run_workers(until_idle=True)
    out: dict = {"jobs": jobs, "keys": source.store.key_count()}
    with tempfile.TemporaryDirectory() as folder:
        for name in ("plain.snap", "gzip.snap.gz"):
            path = os.path.join(folder, name)
            started = time.perf_counter()
            source.snapshot_save(path)
            out[f"save_{name.split('.')[0]}_ms"] = round((time.perf_counter() - started) * 1000)
            out[f"file_{name.split('.')[0]}_mb"] = round(os.path.getsize(path) / 1e6, 1)
        started = time.perf_counter()
        source.store.dump_namespace(lambda entry: None)
        out["read_ms"] = round((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        copy.snapshot_restore(os.path.join(folder, "plain.snap"), namespace=copy.namespace)
        out["restore_ms"] = round((time.perf_counter() - started) * 1000)
    for client in (source, copy):
        client.store.clear_namespace()
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)))

"""Time one bulk submission of one-task jobs against a fresh redis-server (docs/benchmarks-history.md).

    python scripts/bulk_submit_bench.py FORM JOBS [--pythonpath DIR]

FORM is ``jsonl`` or ``yaml`` (``sched job submit FILE``), ``api`` (``Client.submit_many``
of the parsed lines), or ``unrecorded``: the JSON lines path without the submit's record
(``read_specs``, then ``reconcile.submit_many`` with no record), for what recording costs.
The jobs are ``{"id": "j<i>", "replicas": 1, "resources": {"cpu": 0.1, "memory": "64MiB"}}``,
written once next to this script's temporary folders. Each run starts its own
redis-server with the settings sched gives every server it starts (AOF on, unix socket),
submits in a process of its own, and prints one JSON line: which checkout's code ran,
wall seconds, that process's CPU seconds, Redis's CPU seconds (``INFO cpu`` before and
after), the AOF rewrites Redis started meanwhile (a fresh server rewrites its AOF once it
passes 64 MB, and again each time it doubles) and their CPU (a forked child's, read once
they are over), the script calls' mean duration and how many took over 10 ms (``SLOWLOG``),
and what was written.
``--pythonpath DIR`` runs another checkout's code (``scheduler`` and ``workers`` under
DIR, with its ``lua`` folder as ``DIR/scheduler/lua``), so old and new can be run in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from scheduler.state.embedded import start_server

SUBMIT = {
    "jsonl": "from scheduler.tools.cli import run; sys.argv = ['sched', '--redis-url', URL, '-n', 'bulk', 'job', "
             "'submit', FILE]; run()",
    "yaml": "from scheduler.tools.cli import run; sys.argv = ['sched', '--redis-url', URL, '-n', 'bulk', 'job', "
            "'submit', FILE]; run()",
    "api": "import orjson; from scheduler import Client; "
           "Client(URL, 'bulk').submit_many([orjson.loads(line) for line in open(FILE)])",
    "unrecorded": "from pathlib import Path; from scheduler.model.spec_text import read_specs; "
                  "from scheduler.control import reconcile; from scheduler.state.app import App; "
                  "reconcile.submit_many(App(redis_url=URL, namespace='bulk').store, read_specs(Path(FILE).read_text()))",
}


def jobs_file(folder: Path, form: str, count: int) -> Path:
    path = folder / f"jobs{count}.{'yaml' if form == 'yaml' else 'jsonl'}"
    if not path.exists():
        if form == "yaml":
            text = "".join(f"id: j{i}\nreplicas: 1\nresources: {{cpu: 0.1, memory: 64MiB}}\n---\n" for i in range(count))
        else:
            text = "".join(json.dumps({"id": f"j{i}", "replicas": 1, "resources": {"cpu": 0.1, "memory": "64MiB"}})
                           + "\n" for i in range(count))
        path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("form", choices=sorted(SUBMIT))
    parser.add_argument("jobs", type=int)
    parser.add_argument("--pythonpath", default="")
    options = parser.parse_args()
    base = Path(tempfile.gettempdir()) / "sched-bulk-bench"
    base.mkdir(exist_ok=True)
    data = jobs_file(base, options.form, options.jobs)
    with tempfile.TemporaryDirectory(dir=base) as folder:
        socket = Path(folder) / "redis.sock"
        server = start_server(Path(folder), socket, daemonize=False)
        client = redis.Redis(unix_socket_path=str(socket), decode_responses=True)
        try:
            client.config_set("slowlog-max-len", 100000)  # every call over 10 ms counted
            cpu = lambda: sum(client.info("cpu")[k] for k in ("used_cpu_sys", "used_cpu_user"))  # noqa: E731
            code = f"URL, FILE = {f'unix://{socket}'!r}, {str(data)!r}; " + SUBMIT[options.form]
            env = dict(os.environ, PYTHONPATH=options.pythonpath) if options.pythonpath else None
            redis_before, usage_before, started = cpu(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            # Run from the run's folder: "-c" puts the working folder first on the path.
            code = "import sys, scheduler; print(scheduler.__file__, file=sys.stderr); " + code  # which code ran
            done = subprocess.run([sys.executable, "-c", code], env=env, cwd=folder, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - started
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            redis_cpu = cpu() - redis_before
            for _ in range(600):  # a rewrite's CPU is counted once its child has ended
                if not client.info("persistence")["aof_rewrite_in_progress"]:
                    break
                time.sleep(0.1)
            calls = client.info("commandstats").get("cmdstat_evalsha", {})
            result = {"form": options.form, "jobs": options.jobs, "code": str(Path(done.stderr.split("\n", 1)[0]).parent.parent),
                      "exit": done.returncode, "wall_s": round(wall, 3),
                      "client_cpu_s": round(usage.ru_utime + usage.ru_stime
                                            - usage_before.ru_utime - usage_before.ru_stime, 3),
                      "redis_cpu_s": round(redis_cpu, 3),
                      "aof_rewrites": client.info("persistence")["aof_rewrites"],
                      "rewrite_cpu_s": round(sum(client.info("cpu")[k] for k in ("used_cpu_sys_children",
                                                                                  "used_cpu_user_children")), 3),
                      "script_calls": calls.get("calls", 0), "ms_per_call": round(calls.get("usec_per_call", 0) / 1000, 2),
                      "calls_over_10ms": client.slowlog_len(),
                      "queued": client.zcard("sched:{bulk}:q:active"),
                      "recorded": client.exists(*(f"sched:{{bulk}}:job:j{i}:history" for i in range(min(options.jobs, 100))))}
            if done.returncode:
                result["stderr"] = done.stderr[-2000:]
            print(json.dumps(result), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()

"""Submits per second over the HTTP API beside ``Client.submit``, in one run (docs/benchmarks-history.md).

    python scripts/api_submit_bench.py [--jobs N] [--rounds R]

Starts its own redis-server (the settings sched gives every server it starts: AOF on,
unix socket) and ``sched api`` as a process on a loopback port, with a submitter's token.
Then, in R interleaved rounds, submits N one-task jobs (``{"id": "j<i>", "resources":
{"cpu": 0.01, "memory": "1Mi"}}``, each a new job, each round in a namespace of its own)
four ways:

- ``client-1``: ``Client.submit`` in a loop, in this process;
- ``client-8``: the same in 8 processes at once, N/8 each;
- ``http-1``: ``POST /v1/jobs`` from one client over one keep-alive connection;
- ``http-8``: 8 client processes at once, each over its own keep-alive connection;
- ``http-list``: one ``POST /v1/jobs`` of all N specs as a JSON list (``submit_many``).

Prints one JSON line per round and mode (submits/s, and the CPU seconds of the API
server and of Redis during it), then the median of each mode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import redis

from scheduler.client import Client
from scheduler.state.api_tokens import ApiTokens
from scheduler.state.embedded import start_server

SCHED = str(Path(sys.executable).parent / "sched")
CLIENTS = 8


def spec(i: int) -> dict:
    return {"id": f"j{i}", "resources": {"cpu": 0.01, "memory": "1Mi"}}


def client_submits(url: str, namespace: str, first: int, count: int) -> None:
    with Client(url, namespace=namespace) as client:
        for i in range(first, first + count):
            client.submit(spec(i))


def http_submits(port: int, token: str, namespace: str, first: int, count: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port)  # one connection: keep-alive
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    for i in range(first, first + count):
        connection.request("POST", f"/v1/jobs?namespace={namespace}", json.dumps(spec(i)), headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 201:
            raise RuntimeError(f"{response.status}: {body[:200]!r}")
    connection.close()


def http_list(port: int, token: str, namespace: str, count: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    connection.request("POST", f"/v1/jobs?namespace={namespace}", json.dumps([spec(i) for i in range(count)]),
                       headers)
    response = connection.getresponse()
    body = response.read()
    if response.status != 201:
        raise RuntimeError(f"{response.status}: {body[:200]!r}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(mode: str, jobs: int, url: str, port: int, token: str, namespace: str, pool: Pool) -> float:
    start = time.perf_counter()
    if mode == "client-1":
        client_submits(url, namespace, 0, jobs)
    elif mode == "http-1":
        http_submits(port, token, namespace, 0, jobs)
    elif mode == "http-list":
        http_list(port, token, namespace, jobs)
    else:
        share = jobs // CLIENTS
        if mode == "client-8":
            calls = [(client_submits, (url, namespace, k * share, share)) for k in range(CLIENTS)]
        else:
            calls = [(http_submits, (port, token, namespace, k * share, share)) for k in range(CLIENTS)]
        for result in [pool.apply_async(function, args) for function, args in calls]:
            result.get()
        jobs = share * CLIENTS
    return jobs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    modes = ["client-1", "http-1", "client-8", "http-8", "http-list"]
    with tempfile.TemporaryDirectory(prefix="sched-api-bench-") as folder:
        server = start_server(Path(folder), Path(folder) / "redis.sock", daemonize=False)
        url = f"unix://{folder}/redis.sock"
        raw = redis.Redis(unix_socket_path=f"{folder}/redis.sock")
        token = ApiTokens(redis.Redis(unix_socket_path=f"{folder}/redis.sock", decode_responses=True)).create(
            "bench", "*", "submitter")["token"]
        port = 18710
        api = subprocess.Popen([SCHED, "--redis-url", url, "api", "--port", str(port)], stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/v1/openapi.json")
                    break
                except OSError:
                    time.sleep(0.1)
            redis_pid = int(raw.info("server")["process_id"])
            results: dict[str, list[float]] = {mode: [] for mode in modes}
            with Pool(CLIENTS) as pool:
                for round_ in range(args.rounds):
                    for mode in modes:
                        namespace = f"r{round_}-{mode}"
                        with Client(url, namespace=namespace) as client:
                            client.add_node("n1", cpu=1000, memory="1TiB")
                        before = cpu_s(api.pid), cpu_s(redis_pid)
                        rate = run(mode, args.jobs, url, port, token, namespace, pool)
                        after = cpu_s(api.pid), cpu_s(redis_pid)
                        results[mode].append(rate)
                        print(json.dumps({"round": round_, "mode": mode, "submits_per_s": round(rate),
                                          "api_cpu_s": round(after[0] - before[0], 2),
                                          "redis_cpu_s": round(after[1] - before[1], 2)}), flush=True)
            print(json.dumps({mode: {"median": round(statistics.median(rates)), "min": round(min(rates)),
                                     "max": round(max(rates))} for mode, rates in results.items()}))
        finally:
            api.terminate()
            api.wait(10)
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The floors under `sched api` on this machine: what uvicorn and Starlette alone serve,
with the same load as scripts/api_load.py (CLIENTS clients on keep-alive connections,
no wait), for one trivial route at a time:

  direct       an async route that returns a constant (no thread, no Redis)
  hop          the same after a hop to a worker thread and back (what every sched route pays)
  redis_sync   one GET of redis-py in a worker thread (sched's way: its Client is synchronous)
  redis_async  one GET of redis.asyncio on the event loop (the other way)
  redis_loop   one GET on sched's own connection of the loop (state/loop_redis.py: the API's reads now)

each with uvicorn's fast path (httptools, uvloop) and its pure-Python one (h11, asyncio),
then Redis alone (redis-benchmark, GET, 50 clients).

    python scripts/api_floor.py [--seconds 6] [--clients 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_load import Connection, cpu_seconds, free_port, percentile  # noqa: E402

ROUTES = ("direct", "hop", "redis_sync", "redis_async", "redis_loop")


def app(redis_url: str):
    import redis
    import redis.asyncio as aredis
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response
    from starlette.routing import Route

    sync = redis.Redis.from_url(redis_url, decode_responses=True)
    sync.set("floor", "x")
    clients = {}

    async def direct(request):
        return Response(b'{"ok":true}', media_type="application/json")

    async def hop(request):
        await run_in_threadpool(lambda: None)
        return Response(b'{"ok":true}', media_type="application/json")

    async def redis_sync(request):
        value = await run_in_threadpool(sync.get, "floor")
        return Response(json.dumps(value).encode(), media_type="application/json")

    async def redis_async(request):
        if "async" not in clients:
            clients["async"] = aredis.Redis.from_url(redis_url, decode_responses=True)
        value = await clients["async"].get("floor")
        return Response(json.dumps(value).encode(), media_type="application/json")

    from scheduler.state.loop_redis import LoopRedis

    loop_redis = LoopRedis.for_client(sync)

    async def redis_loop(request):
        [value] = await loop_redis.execute([("GET", "floor")])
        return Response(json.dumps(value).encode(), media_type="application/json")

    return Starlette(routes=[Route(f"/{f.__name__}", f) for f in (direct, hop, redis_sync, redis_async, redis_loop)])


async def load(port: int, path: str, seconds: float, clients: int) -> tuple[float, float, float, int]:
    samples: list[tuple[float, int]] = []
    stop = time.perf_counter() + seconds

    async def one():
        connection = Connection("127.0.0.1", port, "-")
        try:
            while time.perf_counter() < stop:
                started = time.perf_counter()
                status, _ = await connection.request("GET", path)
                samples.append((time.perf_counter() - started, status))
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    ok = [t for t, status in samples if status == 200]
    return len(samples) / elapsed, 1000 * percentile(ok, 0.5), 1000 * percentile(ok, 0.99), len(samples) - len(ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "REDIS_URL", "STACK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:  # a server process of its own (its CPU measured apart from the load's)
        import uvicorn

        port, redis_url, stack = args.serve
        http, loop = ("httptools", "uvloop") if stack == "fast" else ("h11", "asyncio")
        uvicorn.Server(uvicorn.Config(app(redis_url), host="127.0.0.1", port=int(port), log_level="warning",
                                      http=http, loop=loop)).run()
        return 0
    folder = Path(tempfile.mkdtemp(prefix="sched-api-floor-"))
    socket_path = folder / "redis.sock"
    redis_server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--save", "",
                                     "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    try:
        while not socket_path.exists():
            time.sleep(0.05)
        print(f"{'route':<12} {'stack':<22} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'server µs/req':>13} failures")
        for stack, label in (("fast", "httptools, uvloop"), ("plain", "h11, asyncio")):
            port = free_port()
            server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), f"unix://{socket_path}",
                                       stack])
            try:
                time.sleep(2.5)
                for route in ROUTES:
                    before = cpu_seconds(server.pid)
                    rate, p50, p99, failures = asyncio.run(load(port, f"/{route}", args.seconds, args.clients))
                    cpu = cpu_seconds(server.pid) - before
                    print(f"{route:<12} {label:<22} {rate:>8.0f} {p50:>7.1f} {p99:>7.1f} "
                          f"{1e6 * cpu / max(1, rate * args.seconds):>13.0f} {failures}")
            finally:
                server.terminate()
                server.wait(timeout=10)
        benchmark = shutil.which("redis-benchmark")
        if benchmark:
            done = subprocess.run([benchmark, "-s", str(socket_path), "-q", "-n", "200000", "-c", "50", "-t", "get"],
                                  capture_output=True, text=True)
            line = [part for part in done.stdout.replace("\r", "\n").splitlines() if "requests per second" in part]
            print("Redis alone (redis-benchmark -c 50 -t get):", line[-1].strip() if line else done.stdout[-200:])
    finally:
        redis_server.terminate()
        redis_server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

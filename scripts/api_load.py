#!/usr/bin/env python3
"""Load one `sched api` as many programs would: CLIENTS concurrent clients, each sending
its next request as soon as the last is answered, over its own keep-alive connection:
35 % GET one job, 35 % GET a page of 100 jobs, 20 % POST a one-task job, 10 % GET nodes.

    python scripts/api_load.py                      # its own redis-server and sched api
    python scripts/api_load.py --workers 2          # sched api --workers 2
    python scripts/api_load.py --workers 1,2 --rounds 3   # 1 and 2 workers in turn, three times
    python scripts/api_load.py --url http://127.0.0.1:8710 --token sched_...   # a server of yours

Prints requests/s, p50/p95/p99 and failures per route, and checks afterwards that every
job the API acknowledged (201) is stored; `--json` prints the figures as JSON. The
clients are a small HTTP/1.1 client on asyncio (one process), so that the load costs
little of the CPU the server shares with it; what they cost is printed too, with the
server's CPU per request and the machine's load average (other work on the machine
slows a round more than it changes the CPU a request costs). docs/benchmarks-history.md, "The
HTTP API under concurrent clients", has the figures and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

MIX = (("get_job", 35), ("get_page", 35), ("post_job", 20), ("get_nodes", 10))
ROUTES = ("get_job", "get_page", "post_job", "get_nodes", "get_token")  # get_token: the API's floor (no Redis read)


class Connection:
    """One keep-alive HTTP/1.1 connection: request() -> (status, body)."""

    def __init__(self, host: str, port: int, token: str):
        self.host, self.port, self.token = host, port, token
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Length: {len(body)}\r\n" + ("Content-Type: application/json\r\n" if body else "") + "\r\n")
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length, chunked = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length)
        out = bytearray()
        while size := int((await self.reader.readline()).strip(), 16):
            out += await self.reader.readexactly(size)
            await self.reader.readline()
        await self.reader.readline()
        return status, bytes(out)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def spec(job_id: str) -> bytes:
    return json.dumps({"id": job_id, "type": "batch", "replicas": 1,
                       "resources": {"cpu": "10m", "memory": "1Mi"}}).encode()


async def client(number: int, args, known: list[str], acknowledged: list[str], samples: dict, stop_at: float):
    host, port = urlsplit(args.url).hostname, urlsplit(args.url).port
    rng = random.Random(args.seed * 1000 + number)
    routes = [name for name, weight in args.mix for _ in range(weight)]
    connection = Connection(host, port, args.token)
    made = 0
    try:
        while time.perf_counter() < stop_at:
            route = rng.choice(routes)
            if route == "get_job":
                method, path, body = "GET", f"/v1/jobs/{rng.choice(known)}", b""
            elif route == "get_page":
                start = rng.choice(known)
                method, path, body = "GET", f"/v1/jobs?per_page=100&next_token={start}", b""
            elif route == "post_job":
                made += 1
                job_id = f"load-{number}-{made}"
                method, path, body = "POST", "/v1/jobs", spec(job_id)
            elif route == "get_nodes":
                method, path, body = "GET", "/v1/nodes", b""
            else:
                method, path, body = "GET", "/v1/token", b""
            started = time.perf_counter()
            try:
                status, _ = await connection.request(method, path, body)
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError):
                status = 0
                connection.close()
                connection = Connection(host, port, args.token)
            elapsed = time.perf_counter() - started
            samples[route].append((elapsed, status))
            if route == "post_job" and status == 201:
                acknowledged.append(job_id)
                known.append(job_id)
    finally:
        connection.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(args, known: list[str]) -> tuple[dict, list[str], float]:
    samples: dict[str, list] = {name: [] for name, _ in args.mix}
    acknowledged: list[str] = []
    started, cpu = time.perf_counter(), time.process_time()
    stop_at = started + args.seconds
    await asyncio.gather(*(client(i, args, known, acknowledged, samples, stop_at) for i in range(args.clients)))
    samples["_clients_cpu_s"] = time.process_time() - cpu  # what the load itself cost
    return samples, acknowledged, time.perf_counter() - started


def report(samples: dict, elapsed: float) -> dict:
    clients_cpu = samples.pop("_clients_cpu_s", None)
    routes = {}
    for name, rows in samples.items():
        ok = [t for t, status in rows if 200 <= status < 300]
        routes[name] = {"requests": len(rows), "per_s": round(len(rows) / elapsed, 1),
                        "failures": len(rows) - len(ok),
                        "p50_ms": round(1000 * percentile(ok, 0.50), 1),
                        "p95_ms": round(1000 * percentile(ok, 0.95), 1),
                        "p99_ms": round(1000 * percentile(ok, 0.99), 1)}
    every = [t for rows in samples.values() for t, status in rows if 200 <= status < 300]
    total = sum(len(rows) for rows in samples.values())
    return {"requests": total, "per_s": round(total / elapsed, 1), "seconds": round(elapsed, 1),
            "clients_cpu_us_per_request": None if clients_cpu is None else round(1e6 * clients_cpu / max(1, total)),
            "failures": sum(r["failures"] for r in routes.values()),
            "p50_ms": round(1000 * percentile(every, 0.50), 1), "p95_ms": round(1000 * percentile(every, 0.95), 1),
            "p99_ms": round(1000 * percentile(every, 0.99), 1), "routes": routes}


# ----------------------------------------------------------------------------- a server of its own
def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) of the process ``pid`` and its children (its workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnServer:
    """A redis-server on a unix socket and `sched api` in front of it, in a temporary folder."""

    def __init__(self, workers: int):
        self.folder = Path(tempfile.mkdtemp(prefix="sched-api-load-"))
        self.workers = workers
        self.processes: list[subprocess.Popen] = []

    def __enter__(self):
        socket_path = self.folder / "redis.sock"
        self.processes.append(subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.redis_url = f"unix://{socket_path}"
        sched = [shutil.which("sched") or str(Path(sys.executable).with_name("sched")), "--redis-url", self.redis_url]
        env = {**os.environ, "SCHED_HOME": str(self.folder)}
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        made = subprocess.run([*sched, "token", "create", "load", "--all-namespaces", "--role", "operator"],
                              capture_output=True, text=True, env=env, check=True)
        self.token = made.stdout.split()[-1]
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [*sched, "api", "--port", str(port)] + (["--workers", str(self.workers)] if self.workers > 1 else [])
        self.processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.processes[-1].poll() is not None:
                    raise RuntimeError("sched api did not start: " + self.processes[-1].stderr.read().decode()[-2000:])
                time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        for process in reversed(self.processes):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


async def seed(args, jobs: int, nodes: int) -> list[str]:
    """Nodes and one-task jobs to read, in lists of 100 jobs per request."""
    host, port = urlsplit(args.url).hostname, urlsplit(args.url).port
    connection = Connection(host, port, args.token)
    try:
        for n in range(nodes):
            body = json.dumps({"cpu": 64, "memory": "256GiB", "labels": {"zone": f"z{n % 3}"}}).encode()
            status, text = await connection.request("PUT", f"/v1/nodes/load-node-{n}", body)
            assert status in (200, 201), text
        ids = [f"seed-{i:06d}" for i in range(jobs)]
        for start in range(0, jobs, 100):
            body = b"[" + b",".join(spec(job_id) for job_id in ids[start:start + 100]) + b"]"
            status, text = await connection.request("POST", "/v1/jobs", body)
            assert status in (200, 201), text
        return ids
    finally:
        connection.close()


async def missing(args, acknowledged: list[str]) -> list[str]:
    """The acknowledged jobs the API does not find now."""
    host, port = urlsplit(args.url).hostname, urlsplit(args.url).port
    connection = Connection(host, port, args.token)
    lost = []
    try:
        for job_id in acknowledged:
            status, _ = await connection.request("GET", f"/v1/jobs/{job_id}")
            if status != 200:
                lost.append(job_id)
    finally:
        connection.close()
    return lost


def mix(text: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for part in text.split(","):
        name, _, weight = part.partition("=")
        if name not in ROUTES or not weight.isdigit():
            raise argparse.ArgumentTypeError(f"{part!r}: give ROUTE=WEIGHT, ROUTE one of {', '.join(ROUTES)}")
        pairs.append((name, int(weight)))
    return tuple(pairs)


def one_round(args, workers: int) -> dict:
    """One round: a server of its own (unless --url), seeded, loaded, checked."""
    own = OwnServer(workers) if not args.url else None
    if own is not None:
        own.__enter__()
        args.url, args.token = own.url, own.token
    try:
        known = asyncio.run(seed(args, args.jobs, args.nodes))
        cpu = cpu_seconds(own.processes[-1].pid) if own is not None else None
        redis_cpu = cpu_seconds(own.processes[0].pid) if own is not None else None
        load_before = os.getloadavg()[0]
        samples, acknowledged, elapsed = asyncio.run(run_load(args, known))
        figures = report(samples, elapsed)
        figures["load_average"] = round((load_before + os.getloadavg()[0]) / 2, 1)
        if own is not None:  # what the server spent, less sensitive to other work on the machine than the rate
            cpu = cpu_seconds(own.processes[-1].pid) - cpu
            redis_cpu = cpu_seconds(own.processes[0].pid) - redis_cpu
            figures.update(server_cpu_s=round(cpu, 1),
                           server_cpu_us_per_request=round(1e6 * cpu / max(1, figures["requests"])),
                           redis_cpu_us_per_request=round(1e6 * redis_cpu / max(1, figures["requests"])))
        lost = asyncio.run(missing(args, acknowledged))
        figures.update(acknowledged=len(acknowledged), missing=len(lost), clients=args.clients,
                       workers=workers if own is not None else None)
    finally:
        if own is not None:
            own.__exit__(None, None, None)
            args.url = args.token = None
    return figures


def print_round(figures: dict) -> None:
    print(f"{figures['requests']} requests in {figures['seconds']} s"
          + (f" ({figures['workers']} worker(s))" if figures.get("workers") else "")
          + f": {figures['per_s']} requests/s, p50 {figures['p50_ms']} ms, p95 {figures['p95_ms']} ms, "
          f"p99 {figures['p99_ms']} ms, {figures['failures']} failures; {figures['acknowledged']} jobs acknowledged, "
          f"{figures['missing']} missing afterwards; load average {figures['load_average']}"
          + (f"; the server's CPU: {figures['server_cpu_us_per_request']} µs a request, Redis's "
             f"{figures['redis_cpu_us_per_request']}" if "server_cpu_s" in figures else "")
          + f"; the clients' CPU: {figures['clients_cpu_us_per_request']} µs a request")
    print(f"{'route':<10} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'failures':>9}")
    for name, row in figures["routes"].items():
        print(f"{name:<10} {row['per_s']:>8} {row['p50_ms']:>8} {row['p95_ms']:>8} {row['p99_ms']:>8} "
              f"{row['failures']:>9}")


def workers_list(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of workers, or several separated by commas (1,2)")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running sched api (default: start a redis-server and sched api)")
    parser.add_argument("--token", help="an operator's token of every namespace, for --url")
    parser.add_argument("--workers", type=workers_list, default=[1],
                        help="sched api --workers, for the server it starts; several (1,2) are run in turn")
    parser.add_argument("--rounds", type=int, default=1, help="how many times to run each --workers, in turn")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=1000, help="one-task jobs submitted before the load")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mix", type=mix, default=MIX, help="ROUTE=WEIGHT,... of " + ", ".join(ROUTES) +
                        " (default: get_job=35,get_page=35,post_job=20,get_nodes=10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (a list of rounds)")
    args = parser.parse_args()
    if args.url and not args.token:
        parser.error("--url needs --token")
    rounds = []
    for _ in range(args.rounds):
        for workers in args.workers:
            figures = one_round(args, workers)
            rounds.append(figures)
            if not args.json:
                print_round(figures)
    if args.json:
        print(json.dumps(rounds if len(rounds) > 1 else rounds[0]))
    elif len(rounds) > 1:
        print("\nrounds, by workers: requests/s; p99 ms; the server's CPU µs a request (load average)")
        for workers in args.workers:
            mine = [f for f in rounds if f.get("workers") == workers]
            print(f"  {workers}: " + "; ".join(f"{f['per_s']:.0f}/s p99 {f['p99_ms']} cpu "
                                              f"{f.get('server_cpu_us_per_request')} ({f['load_average']})" for f in mine))
    return 0 if all(f["failures"] == 0 and f["missing"] == 0 for f in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())

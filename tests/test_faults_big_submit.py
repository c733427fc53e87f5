"""A big submit neither blocks Redis nor half-succeeds (docs/reliability.md, "Large submits").

``enqueue.lua`` creates at most ENQUEUE_CHUNK tasks per call. The big test submits a job
of REPLICAS tasks through ``sched job submit`` in a subprocess, against a redis-server of
its own whose SLOWLOG records every command, while a thread PINGs Redis the whole time.
It checks the exit code, that every task exists exactly once in ``q:active``, and from
Redis's own command statistics that there was one script call per chunk. The PING
latency and the script calls' durations (Redis's SLOWLOG) are printed: measurements, not
assertions (see docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import redis

from scheduler.control import reconcile
from scheduler.model import parse_job
from scheduler.state.app import App
from scheduler.state.jobs import ENQUEUE_CHUNK

from agent_cluster import SCHED

REPLICAS = 200_000
SUBMIT_LIMIT_S = 600  # a bound on "eventually", not a performance target


def test_a_big_submit_runs_in_short_chunks_and_succeeds(own_redis, tmp_path):
    _, url = own_redis
    app = App(redis_url=url, namespace="big")
    client = app.client
    client.config_set("slowlog-log-slower-than", 1000)  # keep the commands over 1 ms (a record, not a check)
    client.config_set("slowlog-max-len", 10_000)
    spec = tmp_path / "big.yaml"
    spec.write_text(f"id: big\nreplicas: {REPLICAS}\nresources: {{cpu: 0.1, memory: 1MiB}}\n")
    pings: list[float] = []
    done = threading.Event()

    def ping_loop():
        pinger = redis.Redis.from_url(url)
        while not done.is_set():
            started = time.perf_counter()
            pinger.ping()
            pings.append(time.perf_counter() - started)
            time.sleep(0.005)
        pinger.close()

    client.slowlog_reset()
    client.config_resetstat()
    thread = threading.Thread(target=ping_loop, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        submit = subprocess.run([SCHED, "--redis-url", url, "--namespace", "big", "job", "submit", str(spec)],
                                capture_output=True, text=True, timeout=SUBMIT_LIMIT_S)
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        thread.join(timeout=10)
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    slow = [entry for entry in client.slowlog_get(10_000) if entry["command"].split()[0].upper() == b"EVALSHA"]
    client.config_set("slowlog-log-slower-than", 10_000)
    assert submit.returncode == 0, submit.stderr
    assert submit.stderr == ""
    # One script call per chunk (no call created more than ENQUEUE_CHUNK tasks); the first
    # also records the submit in the job's history.
    assert stats["calls"] - stats.get("failed_calls", 0) == -(-REPLICAS // ENQUEUE_CHUNK)
    assert [entry["action"] for entry in app.store.read_history(job="big")] == ["submit"]

    members = client.zrange(app.keys.active, 0, -1)
    assert len(members) == REPLICAS
    assert set(members) == {f"big.{i}" for i in range(REPLICAS)}
    assert client.zcard(app.keys.job_tasks("big")) == REPLICAS
    # Finished: no mark is left for workers to complete.
    assert client.zcard(app.keys.filling) == 0
    assert not [f for f in client.hkeys(app.keys.job("big")) if f.startswith("filling:")]
    longest_ms = max((entry["duration"] for entry in slow), default=0) / 1000
    print(f"\nsubmit of {REPLICAS} tasks: {elapsed:.1f} s, {stats['calls']} EVALSHA calls averaging "
          f"{stats['usec_per_call'] / 1000:.2f} ms, {len(slow)} of them over 1 ms (longest {longest_ms:.1f} ms); "
          f"{len(pings)} PINGs meanwhile, max latency {max(pings) * 1000:.1f} ms")
    app.close()


def test_a_fill_chunk_sent_twice_creates_nothing_new(app):
    spec = parse_job({"id": "twice", "replicas": 2500, "resources": {"cpu": 0.1, "memory": "1MiB"}})
    reconcile.submit(app.store, spec)
    store, client = app.store, app.client
    assert client.zcard(app.keys.active) == 2500
    before = store.get_task("twice.1500")
    seq = client.get(app.keys.enqueue_seq)
    assert store.enqueue_fill("twice", 1, spec.priority, 1000, ENQUEUE_CHUNK) == 0  # the same chunk again
    assert client.zcard(app.keys.active) == 2500
    assert client.zcard(app.keys.job_tasks("twice")) == 2500
    assert store.get_task("twice.1500") == before
    assert client.get(app.keys.enqueue_seq) == seq
    # A chunk with a hole creates only the missing task.
    client.delete(app.keys.task("twice.1200"))
    client.zrem(app.keys.active, "twice.1200")
    assert store.enqueue_fill("twice", 1, spec.priority, 1000, ENQUEUE_CHUNK) == 1
    assert client.zscore(app.keys.active, "twice.1200") is not None
    # Refused once the job is at another version, or stopped.
    assert store.enqueue_fill("twice", 2, spec.priority, 2500, 10) is None
    reconcile.stop(store, "twice")
    assert store.enqueue_fill("twice", 1, spec.priority, 2500, 10) is None
    assert not client.exists(app.keys.task("twice.2500"))


def test_a_submit_killed_part_way_is_completed_by_a_worker(own_redis, tmp_path):
    """The submitter is SIGKILLed between its calls: the job counts tasks that do not
    exist yet, and its mark lets any worker create them (reconcile.complete_fills, run by
    every worker each second once the mark is older than FILL_GRACE_MS)."""
    _, url = own_redis
    app = App(redis_url=url, namespace="killed")
    replicas = 100_000
    spec = tmp_path / "big.yaml"
    spec.write_text(f"id: big\nreplicas: {replicas}\nresources: {{cpu: 0.1, memory: 1MiB}}\n")
    submitter = subprocess.Popen([SCHED, "--redis-url", url, "--namespace", "killed", "job", "submit", str(spec)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SUBMIT_LIMIT_S
        while not app.client.exists(app.keys.job("big")) and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(submitter.pid, signal.SIGSTOP)
    finally:
        submitter.kill()
        submitter.wait()
    made = app.client.zcard(app.keys.job_tasks("big"))
    assert 0 < made < replicas, made  # stopped part way
    assert app.store.get_job("big")["spec"]["replicas"] == replicas
    assert reconcile.complete_fills(app.store, grace_ms=60_000) == []  # too recent: the submitter may still be at it
    assert reconcile.complete_fills(app.store, grace_ms=0) == ["big"]
    members = app.client.zrange(app.keys.active, 0, -1)
    assert len(members) == replicas and set(members) == {f"big.{i}" for i in range(replicas)}
    assert app.client.zcard(app.keys.job_tasks("big")) == replicas
    assert app.client.zcard(app.keys.filling) == 0
    assert reconcile.complete_fills(app.store, grace_ms=0) == []  # nothing left to do
    app.close()


def test_a_stopped_job_is_not_completed(app):
    spec = parse_job({"id": "halt", "replicas": 1200, "resources": {"cpu": 0.1, "memory": "1MiB"}})
    reconcile.submit(app.store, spec)
    # As a submitter that died after its first call leaves it: a mark, and tasks missing.
    mark = "filling:1:0"
    app.client.hset(app.keys.job("halt"), mark, f"1200|{spec.priority}|0|0")
    app.client.zadd(app.keys.filling, {"halt": 0})
    for i in range(ENQUEUE_CHUNK, 1200):
        app.client.delete(app.keys.task(f"halt.{i}"))
        app.client.zrem(app.keys.active, f"halt.{i}")
        app.client.zrem(app.keys.job_tasks("halt"), f"halt.{i}")
    reconcile.stop(app.store, "halt")
    assert reconcile.complete_fills(app.store, grace_ms=0) == []
    assert not app.client.exists(app.keys.task(f"halt.{ENQUEUE_CHUNK}"))
    assert app.client.zcard(app.keys.filling) == 0 and not app.client.hexists(app.keys.job("halt"), mark)

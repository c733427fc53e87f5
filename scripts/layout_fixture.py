"""A namespace's keys as JSON lines, to keep one written by a given version of sched as a
test fixture (``tests/fixtures/layout1.jsonl``: written by sched before key layouts were
recorded, layout 1) and load it again.

    # with the interpreter of the version that should write it (a worktree of that commit):
    python scripts/layout_fixture.py make tests/fixtures/layout1.jsonl
    # load a dump into a namespace (tests do this through load()):
    python scripts/layout_fixture.py load tests/fixtures/layout1.jsonl --url URL --namespace NS

``make`` starts a private redis-server, writes a small cluster's history through the
Python API of the sched it runs with (nodes, batch jobs completed and failed with
retries, a service whose task crashed and was replaced, a stopped job, a job still
running and one pending, a rolling deployment, a removed node), then dumps every key of
the namespace ``fixture``: one line per key, ``{"key", "type", "value"}`` (``value``: a
string, a list, a sorted list of set members, a mapping, ``[member, score]`` pairs, or a
stream's ``[id, fields]`` entries), keys sorted. Keys with a TTL (heartbeats, locks) are
left out. It uses only what every version of the API has had since layouts 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAMESPACE = "fixture"


def dump(client, namespace: str) -> list[dict]:
    """Every key of ``namespace`` (except those with a TTL), as records."""
    lines = []
    for key in sorted(client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000)):
        if client.pttl(key) > 0:
            continue
        kind = client.type(key)
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = dict(sorted(client.hgetall(key).items()))
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "zset":
            value = [[m, s] for m, s in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            value = [[entry_id, fields] for entry_id, fields in client.xrange(key)]
        else:
            continue
        lines.append({"key": key, "type": kind, "value": value})
    return lines


def load(client, lines: list[dict], namespace: str, source: str = NAMESPACE) -> int:
    """Write the records into ``namespace`` (their keys' namespace ``source`` replaced).
    Returns how many keys were written."""
    old, new = f"sched:{{{source}}}:", f"sched:{{{namespace}}}:"
    with client.pipeline(transaction=False) as pipe:
        for record in lines:
            key, kind, value = old and record["key"].replace(old, new, 1), record["type"], record["value"]
            pipe.delete(key)
            if kind == "string":
                pipe.set(key, value)
            elif kind == "hash":
                pipe.hset(key, mapping=value)
            elif kind == "list":
                pipe.rpush(key, *value)
            elif kind == "set":
                pipe.sadd(key, *value)
            elif kind == "zset":
                pipe.zadd(key, {m: s for m, s in value})
            elif kind == "stream":
                for entry_id, fields in value:
                    pipe.xadd(key, fields, id=entry_id)
        pipe.execute()
    return len(lines)


def read(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def make(out: Path) -> None:
    from scheduler.client import Client
    from scheduler.control import reconcile
    from scheduler.tools.bench.harness import redis_server

    with redis_server(None) as url:
        c = Client(url, NAMESPACE)
        store = c.store
        c.add_node("n1", cpu=4, memory="8GiB", labels={"zone": "a"})
        c.add_node("n2", cpu=4, memory="8GiB", labels={"zone": "b"})
        c.add_node("gone", cpu=1, memory="1GiB")
        c.remove_node("gone")
        c.submit({"id": "done", "type": "batch", "replicas": 3, "run": {"command": ["true"]}})
        c.submit({"id": "flaky", "type": "batch", "replicas": 1, "max_retries": 1, "run": {"command": ["false"]}})
        c.submit({"id": "web", "replicas": 2, "resources": {"cpu": 0.5, "memory": "256MiB"},
                  "update": {"max_parallel": 1, "min_healthy_time": 0}})
        c.submit({"id": "old", "replicas": 1})
        c.run_workers(until_idle=True)
        for task in c.tasks(job="done"):
            reconcile.task_ended(store, task, True, "exited with code 0")
        for _ in range(2):  # fails, is retried, fails again: the job ends failed
            for task in c.tasks(job="flaky", state="assigned"):
                reconcile.task_ended(store, task, False, "exited with code 1")
            c.run_workers(until_idle=True)
        crashed = c.tasks(job="web", state="assigned")[0]
        reconcile.task_ended(store, crashed, False, "exited with code 2")  # replaced: web.2 replaces it
        c.run_workers(until_idle=True)
        c.stop("old")
        c.submit({"id": "web", "replicas": 2, "resources": {"cpu": 0.5, "memory": "300MiB"},
                  "update": {"max_parallel": 1, "min_healthy_time": 0}})  # a rolling deployment, open
        c.submit({"id": "huge", "replicas": 1, "resources": {"cpu": 64}})  # fits nowhere: pending
        c.run_workers(until_idle=True)
        lines = dump(c.app.client, NAMESPACE)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    print(f"{out}: {len(lines)} keys")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("out", type=Path)
    lo = sub.add_parser("load")
    lo.add_argument("dump", type=Path)
    lo.add_argument("--url", required=True)
    lo.add_argument("--namespace", required=True)
    args = parser.parse_args()
    if args.command == "make":
        make(args.out)
    else:
        import redis

        client = redis.Redis.from_url(args.url, decode_responses=True)
        print(load(client, read(args.dump), args.namespace), "keys", file=sys.stderr)


if __name__ == "__main__":
    main()

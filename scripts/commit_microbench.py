"""Redis CPU of one commit.lua call per placement (INFO commandstats), and of its parts.

Registers NODES nodes, submits one job of N one-cpu tasks (default 512), claims them and
commits each onto its own node in one call (the worst case: every node read and written),
then repeats with the placements packed 8 per node, and with one one-task job per
placement (as ``sched bench --distinct``), one per node. Prints usec_per_call of EVALSHA
for the commit alone, divided by the placements. MAXLEN, if given, is the event
stream's bound for the runs (0: no stream). Run against a private redis-server:

    .venv/bin/python scripts/commit_microbench.py unix:///path/redis.sock [N] [NODES] [MAXLEN]
"""

from __future__ import annotations

import sys

from scheduler.client import Client
from scheduler.model import make_node, parse_job
from scheduler.state.commit import Planned, commit


def run(url: str, n: int, nodes: int, per_node: int, namespace: str, distinct: bool = False,
        maxlen: int | None = None) -> float:
    client = Client(url, namespace)
    app = client.app
    if maxlen is not None:
        client.keep_events(maxlen)
    app.store.put_new_nodes([make_node(f"n{i}", cpu=64, memory="256GiB") for i in range(nodes)])
    resources = {"cpu": 1, "memory": "1GiB"}
    if distinct:
        specs = {f"d{j}": parse_job({"id": f"d{j}", "replicas": 1, "resources": resources}) for j in range(n)}
    else:
        specs = {"m": parse_job({"id": "m", "replicas": n, "resources": resources})}
    for spec in specs.values():
        client.submit(spec)
    claim = app.queue.claim(n, lease_ms=600_000)
    plans = [Planned(t, f"n{i // per_node}", specs[t.rsplit(".", 1)[0]]) for i, t in enumerate(claim.task_ids)]
    app.client.config_resetstat()
    result = commit(app.scripts, app.keys, claim.token, plans)
    stats = app.client.info("commandstats")["cmdstat_evalsha"]
    assert len(result.accepted) == n, result.refused[:3]
    app.store.clear_namespace()
    return stats["usec"] / n


if __name__ == "__main__":
    url = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    maxlen = int(sys.argv[4]) if len(sys.argv) > 4 else None
    for per_node, distinct in ((1, False), (8, False), (1, True)):
        runs = sorted(run(url, n, nodes, per_node, f"mb{per_node}{distinct:d}x{i}", distinct, maxlen) for i in range(5))
        what = "one job per placement, 1 per node" if distinct else f"{per_node} per node"
        print(f"commit.lua, {n} placements, {what}: {runs[2]:.1f} us of Redis per placement "
              f"(median of 5; {runs[0]:.1f}-{runs[-1]:.1f})")

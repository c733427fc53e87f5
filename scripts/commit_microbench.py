"""Redis CPU of one commit.lua call per placement (INFO commandstats), and of its parts.

Registers NODES nodes, submits one job of N one-cpu tasks (default 512), claims them and
commits each onto its own node in one call (the worst case: every node read and written),
then repeats with the placements packed 8 per node, and with one one-task job per
placement (as ``sched bench --distinct``), one per node. Prints usec_per_call of EVALSHA
for the commit alone, divided by the placements. MAXLEN, if given, is the event
stream's bound for the runs (0: no stream). With ``--rules``, one placement per node of
a job with labels (counted by domain on the nodes' zone and rack labels), then with a
required anti-affinity by hostname, then with a hard zone spread, beside the plain job:
what the domain counts and rules cost the commit (the server's CPU time, INFO cpu). With
``--chunks``, as the workers commit: 256 calls of one placement each (what a call costs
by itself), then N placements in calls of 128 (``commit_chunk``), of a plain job and of
a labelled one (the server's CPU time). Run against a private redis-server:

    .venv/bin/python scripts/commit_microbench.py unix:///path/redis.sock [N] [NODES] [MAXLEN] [--rules|--chunks]
"""

from __future__ import annotations

import sys

from scheduler.client import Client
from scheduler.model import make_node, parse_job
from scheduler.engine.rules import RuleIndex, resolve
from scheduler.state.commit import Planned, commit


RULES = {  # --rules: the job's rules beside its labels
    "plain": {},
    "labels": {"labels": {"app": "m"}},
    "anti-affinity by hostname": {"labels": {"app": "m"}, "job_anti_affinity": [
        {"match": {"app": "m"}, "attribute": "node.hostname", "required": True}]},
    "hard zone spread": {"labels": {"app": "m"}, "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 1}]},
}


def chunked(url: str, n: int, nodes: int, per_call: int, namespace: str, labelled: bool) -> float:
    """Redis CPU of committing ``n`` placements (one per node) in calls of ``per_call``: per call
    when a call holds one placement, else per placement."""
    client = Client(url, namespace)
    app = client.app
    app.store.put_new_nodes([make_node(f"n{i}", cpu=64, memory="256GiB",
                                       labels={"zone": f"z{i % 4}", "rack": f"r{i % 40:02d}"}) for i in range(nodes)])
    spec = parse_job({"id": "m", "replicas": n, "resources": {"cpu": 1, "memory": "1GiB"},
                      **({"labels": {"app": "m"}} if labelled else {})})
    client.submit(spec)
    claim = app.queue.claim(n, lease_ms=600_000)
    resolved = resolve(spec, RuleIndex(*app.store.rule_index()), None, None) if spec.rules else None
    plans = [Planned(t, f"n{i}", spec, False, resolved) for i, t in enumerate(claim.task_ids)]
    before = app.client.info("cpu")
    for k in range(0, n, per_call):
        assert not commit(app.scripts, app.keys, claim.token, plans[k:k + per_call]).refused
    after = app.client.info("cpu")
    app.store.clear_namespace()
    used = 1e6 * sum(after[f] - before[f] for f in ("used_cpu_user", "used_cpu_sys"))
    return used / (n // per_call) if per_call == 1 else used / n


def run(url: str, n: int, nodes: int, per_node: int, namespace: str, distinct: bool = False,
        maxlen: int | None = None, rules: dict | None = None) -> float:
    client = Client(url, namespace)
    app = client.app
    if maxlen is not None:
        client.keep_events(maxlen)
    app.store.put_new_nodes([make_node(f"n{i}", cpu=64, memory="256GiB",
                                       labels={"zone": f"z{i % 4}", "rack": f"r{i % 40:02d}"} if rules is not None
                                       else None) for i in range(nodes)])
    resources = {"cpu": 1, "memory": "1GiB"}
    if distinct:
        specs = {f"d{j}": parse_job({"id": f"d{j}", "replicas": 1, "resources": resources}) for j in range(n)}
    else:
        specs = {"m": parse_job({"id": "m", "replicas": n, "resources": resources, **(rules or {})})}
    for spec in specs.values():
        client.submit(spec)
    claim = app.queue.claim(n, lease_ms=600_000)
    resolved = None
    if rules:
        spec = specs["m"]
        read, labels, anti = app.store.rule_index()
        resolved = resolve(spec, RuleIndex(read, labels, anti), lambda attribute: [f"z{i}" for i in range(4)],
                           app.store.rule_epochs()[0])
    plans = [Planned(t, f"n{i // per_node}", specs[t.rsplit(".", 1)[0]], False, resolved)
             for i, t in enumerate(claim.task_ids)]
    app.client.config_resetstat()
    cpu = app.client.info("cpu")
    result = commit(app.scripts, app.keys, claim.token, plans)
    stats = app.client.info("commandstats")["cmdstat_evalsha"]
    after = app.client.info("cpu")
    assert len(result.accepted) == n, result.refused[:3]
    app.store.clear_namespace()
    if rules is not None:  # the server's own CPU time: steadier than the call's time when the machine is loaded
        return 1e6 * sum(after[k] - cpu[k] for k in ("used_cpu_user", "used_cpu_sys")) / n
    return stats["usec"] / n


if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg not in ("--rules", "--chunks")]
    url = args[0]
    n = int(args[1]) if len(args) > 1 else 512
    nodes = int(args[2]) if len(args) > 2 else 5000
    maxlen = int(args[3]) if len(args) > 3 else None
    if "--chunks" in sys.argv:
        found = {"a call of one placement, per call": [], "calls of 128, per placement": [],
                 "calls of 128 of a labelled job, per placement": []}
        for i in range(5):
            found["a call of one placement, per call"].append(chunked(url, 256, nodes, 1, f"mc1x{i}", False))
            found["calls of 128, per placement"].append(chunked(url, n, nodes, 128, f"mc2x{i}", False))
            found["calls of 128 of a labelled job, per placement"].append(chunked(url, n, nodes, 128, f"mc3x{i}", True))
        for what, runs in found.items():
            runs.sort()
            print(f"commit.lua, {what}: {runs[2]:.1f} us of Redis CPU (median of 5; {runs[0]:.1f}-{runs[-1]:.1f})")
        sys.exit(0)
    if "--rules" in sys.argv:
        found: dict[str, list[float]] = {what: [] for what in RULES}
        for i in range(5):  # the variants interleaved
            for k, (what, rules) in enumerate(RULES.items()):
                found[what].append(run(url, n, nodes, 1, f"mr{k}x{i}", maxlen=maxlen, rules=rules))
        for what, runs in found.items():
            runs.sort()
            print(f"commit.lua, {n} placements, 1 per node, {what}: {runs[2]:.1f} us of Redis CPU per placement "
                  f"(median of 5; {runs[0]:.1f}-{runs[-1]:.1f})")
        sys.exit(0)
    for per_node, distinct in ((1, False), (8, False), (1, True)):
        runs = sorted(run(url, n, nodes, per_node, f"mb{per_node}{distinct:d}x{i}", distinct, maxlen) for i in range(5))
        what = "one job per placement, 1 per node" if distinct else f"{per_node} per node"
        print(f"commit.lua, {n} placements, {what}: {runs[2]:.1f} us of Redis per placement "
              f"(median of 5; {runs[0]:.1f}-{runs[-1]:.1f})")

"""What the state machine (tests/test_stateful.py) checks of ``sched rebalance``, ``sched
task evict`` and ``sched capacity``, written again here from their docs (``cli.md``,
``budgets.md``, ``reliability.md``), not from their code.

- A read that promises to write nothing (``sched capacity``, ``sched rebalance
  --dry-run``) is checked against :func:`snapshot`: every key of the namespace and its
  whole value, before and after.
- A running service has its replicas open, and one more for each of its moves whose new
  task is open (make before break): :func:`moving_extra`.
- The scale-down's promise (:func:`scale_down_problems`): each node it removes had its
  tasks placed elsewhere, on nodes that exist, take work (ready, active) and were not
  removed before it or with it, with room for them (cpu, memory, task slots, host ports,
  counted from the live tasks as the answer moved them); every task of the node is
  moved but a global or sysbatch job's, which goes with it; and no job loses more of its
  tasks than its disruption budget allows now (``budget_ledger.desired``).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from scheduler.model import LIVE_STATES
from scheduler.model.errors import NotFound

from budget_ledger import desired
from placement_ledger import request
from stateful_leftovers import typed_keys

ACTIVE_STATES = ("queued", "starting", "placing", "stopping")


def snapshot(app) -> dict[str, object]:
    """Every key of the namespace and its whole value (read by type; not ``DUMP``, whose
    bytes change as Redis rehashes a hash it only read): two equal snapshots, nothing
    was written in between."""
    client = app.client
    keys, types = typed_keys(app)
    readers = {"string": lambda p, k: p.get(k), "hash": lambda p, k: p.hgetall(k),
               "set": lambda p, k: p.smembers(k), "zset": lambda p, k: p.zrange(k, 0, -1, withscores=True),
               "list": lambda p, k: p.lrange(k, 0, -1), "stream": lambda p, k: p.xrange(k)}
    with client.pipeline(transaction=False) as pipe:
        for key, kind in zip(keys, types):
            readers[kind](pipe, key)
        values = pipe.execute()
    return {key: (kind, value) for key, kind, value in zip(keys, types, values)}


def changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """The keys added, removed or changed between two snapshots."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def open_end(store, task_id: str):
    """The task, or the open task its job queued in its place (a chain of replacements)."""
    for _ in range(10):
        try:
            task = store.get_task(task_id)
        except NotFound:
            return None
        if not task.terminal or not task.replaced_by:
            return task
        task_id = task.replaced_by
    return None


def moving_extra(store) -> Counter:
    """job -> its moves in progress whose new task (or what replaced it) is open."""
    out: Counter = Counter()
    for move in store.moves_list(store.active_move_ids()):
        new = open_end(store, move.get("new_task", "")) if move.get("new_task") else None
        if new is not None and not new.terminal:
            out[move["job"]] += 1
    return out


def allowed_now(store, job: str) -> int | None:
    """Disruptions the job's budget allows as its tasks stand (None: no budget), by the
    arithmetic of ``budgets.md`` (the machine's jobs have no health check: running is healthy)."""
    try:
        spec = store.job_spec(job).raw
    except NotFound:
        return None
    budget = spec.get("disruption_budget")
    if not budget:
        return None
    tasks = store.tasks(store.job_task_ids(job))
    healthy = sum(1 for t in tasks if t.state == "running")
    open_ = sum(1 for t in tasks if not t.terminal)
    expected = spec["replicas"] if spec["type"] == "service" else open_
    return max(0, healthy - desired(budget, expected))


def scale_down_problems(store, ledger, answer: dict) -> list[str]:
    """What the scale-down's ``remove`` promises, checked against the cluster as it is
    (``ledger``: the placement ledger, for the specs)."""
    remove = answer["scale_down"]["remove"]
    nodes = {n.name: n for n in store.nodes()}
    where: dict[str, str] = {}  # task -> node, as the answer moves them
    spec_of: dict[str, dict] = {}
    for task in store.tasks(store.all_task_ids()):
        if task.state in LIVE_STATES:
            where[task.id] = task.node
            spec_of[task.id] = ledger.spec(task.job, task.version)
    per_node = ("global", "sysbatch")
    problems, gone = [], set()
    moved_of: Counter = Counter()  # job -> its tasks moved (each counted once)
    moved: set[str] = set()
    for entry in remove:
        name = entry["node"]
        gone.add(name)
        node = nodes.get(name)
        if node is None or node.status != "ready" or node.availability != "active":
            problems.append(f"capacity removes {name}, which is not a ready, active node")
            continue
        on_it = {t for t, n in where.items() if n == name and spec_of[t]["type"] not in per_node}
        targets = {m["task"]: m["to"] for m in entry["moves"]}
        # Besides its live tasks, pending ones the answer placed there first (room they take).
        if not on_it <= set(targets) or entry["tasks"] != len(targets) \
                or any(t not in where and not _pending(store, t) for t in targets):
            problems.append(f"capacity removes {name} moving {sorted(targets)} ({entry['tasks']} tasks); "
                            f"it holds {sorted(on_it)}")
        for task_id, to in targets.items():
            target = nodes.get(to)
            if to in gone or target is None or target.status != "ready" or target.availability != "active":
                problems.append(f"capacity moves {task_id} from {name} to {to}: removed before it, or not a ready, "
                                f"active node")
            if task_id in where:  # placed as its job's current version (a drained task's replacement is)
                where[task_id] = to
                job = task_id.rpartition(".")[0]
                spec_of[task_id] = ledger.spec(job, int(store.job_fields(job)["version"]))
                if task_id not in moved:
                    moved.add(task_id)
                    moved_of[task_id.rpartition(".")[0]] += 1
        for task_id in [t for t, n in where.items() if n == name]:  # a global task goes with its node
            del where[task_id]
    problems += _room(nodes, where, spec_of, gone)
    for job, n in sorted(moved_of.items()):
        allowed = allowed_now(store, job)
        if allowed is not None and n > allowed:
            problems.append(f"capacity moves {n} tasks of job {job}, whose budget allows {allowed} disruption(s) now")
    return problems


def _pending(store, task_id: str) -> bool:
    try:
        return store.get_task(task_id).state == "pending"
    except NotFound:
        return False


def _room(nodes: dict, where: dict[str, str], spec_of: dict[str, dict], gone: set[str]) -> list[str]:
    """Nodes the answer would overfill with the tasks it moved there (cpu, memory, slots, ports)."""
    used: dict[str, Counter] = defaultdict(Counter)
    count: Counter = Counter()
    ports: dict[str, Counter] = defaultdict(Counter)
    for task_id, name in where.items():
        used[name].update(request(spec_of[task_id]))
        count[name] += 1
        ports[name].update(spec_of[task_id].get("ports") or ())
    problems = []
    for name in sorted(count):
        node = nodes.get(name)
        if node is None or name in gone:
            problems.append(f"capacity leaves tasks on {name}, which it removes or does not exist")
            continue
        over = {r: n for r, n in used[name].items() if n > node.capacity.get(r, 0)}
        if over:
            problems.append(f"capacity fills {name} beyond its capacity: {over} of {dict(node.capacity)}")
        if node.slots and count[name] > node.slots:
            problems.append(f"capacity puts {count[name]} tasks on {name}, of {node.slots} task slots")
        if any(n > 1 for n in ports[name].values()):
            problems.append(f"capacity puts two tasks using one host port on {name}: {dict(ports[name])}")
    return problems

"""Scale up: which pools, and how many nodes of each, place every pending task (the
cluster-autoscaler's scale-up, with its binpacking estimator and its expanders).

On a :class:`~scheduler.control.capacity_copy.CapacityCopy` of the cluster:

1. The pending tasks (queue order) are placed on the nodes there are, with the real
   engine: those that fit need no new node (the autoscaler's "filter out schedulable").
2. For each pool with room to grow, the tasks that a node of its shape may take at all
   (constraints, platform, plugins, taints, resources of an empty node) are packed by the
   binpacking estimator (``scheduler/engine/estimator.py``) into a number of nodes.
3. The estimate is proven: that many nodes of the pool are added to the copy (each with
   the task of every running global job that wants it, as a new node gets one), and the
   pending tasks are placed with the real engine, every hard rule held. Where the
   engine places fewer than the estimate (a spread, an anti-affinity the estimator does
   not know of), one more node is added while that places more; new nodes left empty
   are dropped. What the proof placed is the option.
4. The expanders choose among the options (``scheduler/engine/expanders.py``); the chosen
   pool's nodes stay in the copy with what was placed on them, and 2-4 repeat for the
   tasks still pending until every task is placed or no pool places any more.

Tasks no pool can take are listed with why: per pool, the reason an empty node of it
refuses the task, or what the engine said when it could not place it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.control.capacity_copy import CapacityCopy
from scheduler.control.reconcile import global_targets
from scheduler.engine.estimator import Item, estimate, fits_empty
from scheduler.engine.expanders import DEFAULT, Option, choose, waste
from scheduler.engine.filters import filter_pipeline
from scheduler.model import GLOBAL, JobSpec, Node, Task
from scheduler.model.pools import Pool, pool_of

GROWTH = 8  # nodes a proof may add beyond the estimate, one at a time, while each places more
MOST_ROUNDS = 64  # pools chosen in one answer, at most
SHOWN_TASKS = 20  # task ids listed per job among the tasks no pool takes


@dataclass
class Group:
    """Pending tasks of one job version (and pinned node), in queue order."""

    spec: JobSpec
    ids: list[str]
    pin: str = ""


@dataclass
class Trial:
    """Nodes of a pool added to the copy, and what was placed on the copy with them."""

    pool: Pool
    nodes: list[Node]
    placed: list[tuple[JobSpec, list[tuple[str, str]]]] = field(default_factory=list)
    daemons: list[tuple[JobSpec, list[tuple[str, str]]]] = field(default_factory=list)

    def placed_ids(self) -> set[str]:
        return {task for _, assignments in self.placed for task, _ in assignments}

    def option(self) -> Option:
        names = {node.name for node in self.nodes}
        requested: dict[str, int] = {}
        for spec, assignments in (*self.placed, *self.daemons):
            for _, node in assignments:
                if node in names:
                    for r, amount in spec.resources.items():
                        requested[r] = requested.get(r, 0) + amount
        capacity = {r: a * len(self.nodes) for r, a in self.pool.capacity.items()}
        return Option(self.pool.name, len(self.nodes), len(self.placed_ids()), capacity, requested,
                      self.pool.cost * len(self.nodes), self.pool.priority)


def groups_of(copy: CapacityCopy, pending: list[Task]) -> list[Group]:
    """Pending tasks grouped by job version and pinned node, in queue order of their first."""
    out: dict[tuple, Group] = {}
    for task in pending:
        spec = copy.specs.get((task.job, task.version))
        if spec is None or spec.launcher:
            continue
        key = (task.job, task.version, task.pin)
        if key not in out:
            out[key] = Group(spec, [], task.pin)
        out[key].ids.append(task.id)
    return list(out.values())


def place_groups(copy: CapacityCopy, groups: list[Group]) -> tuple[list[tuple[JobSpec, list]], list[Group], dict]:
    """Place each group on the copy as it is; returns (what was placed, the groups' tasks
    left over, job -> the engine's explanation of the last group of it that did not fit)."""
    placed, left, why = [], [], {}
    for group in groups:
        if group.pin:
            node = copy.by_name.get(group.pin)
            if node is None:
                left.append(group)
                why[group.spec.id] = f"pinned to node {group.pin}, which does not exist"
                continue
            result = copy.place(group.spec, group.ids, only=[node])
        elif group.spec.gang and len(group.ids) >= group.spec.gang:
            result = copy.place_gang(group.spec, group.ids, group.spec.gang)
        else:
            result = copy.place(group.spec, group.ids)
        if result.assignments:
            placed.append((group.spec, result.assignments))
        if result.unplaced:
            left.append(Group(group.spec, list(result.unplaced), group.pin))
            if result.explanation is not None:
                why[group.spec.id] = result.explanation.message()
    return placed, left, why


class ScaleUp:
    def __init__(self, copy: CapacityCopy, pools: list[Pool], chain=(DEFAULT,)):
        self.copy, self.pools, self.chain = copy, sorted(pools, key=lambda p: p.name), list(chain)
        self.sizes = {pool.name: 0 for pool in self.pools}  # nodes each pool has now
        for node in copy.nodes:
            pool = pool_of(node, self.pools)
            if pool is not None:
                self.sizes[pool.name] += 1
        self.added = {pool.name: 0 for pool in self.pools}
        self._serial = 0

    def headroom(self, pool: Pool) -> int | None:
        if pool.max_nodes is None:
            return None
        return max(0, pool.max_nodes - self.sizes[pool.name] - self.added[pool.name])

    def run(self, pending: list[Task]) -> dict:
        copy = self.copy
        groups = groups_of(copy, pending)
        total = sum(len(g.ids) for g in groups)
        placed, left, why = place_groups(copy, groups)
        fit_now = sum(len(a) for _, a in placed)
        chosen: list[dict] = []
        first_options: list[dict] | None = None
        for _ in range(MOST_ROUNDS):
            if not any(not g.pin for g in left):
                break
            options = []
            for pool in self.pools:  # each pool's trial on the copy as it is, taken back before the next
                trial = self.trial(pool, left)
                if trial is not None:
                    options.append(trial.option())
                    self.undo(trial)
            if first_options is None:
                first_options = [_option_record(o) for o in options]
            best = choose(options, self.chain)
            if best is None:
                break
            pool = next(p for p in self.pools if p.name == best.pool)
            trial = self.prove(pool, left, best.nodes)  # again, to keep: the trials were undone
            self.added[pool.name] += len(trial.nodes)
            got = trial.placed_ids()
            record = _option_record(trial.option())
            record["new_nodes"] = [node.name for node in trial.nodes]
            chosen.append(record)
            left = [Group(g.spec, [t for t in g.ids if t not in got], g.pin) for g in left]
            left = [g for g in left if g.ids]
        add: dict[str, dict] = {}
        for record in chosen:  # a pool chosen in two rounds is one line
            line = add.setdefault(record["pool"], {"pool": record["pool"], "nodes": 0, "tasks": 0, "cost": 0.0,
                                                   "new_nodes": []})
            line["nodes"] += record["nodes"]
            line["tasks"] += record["tasks"]
            line["cost"] += record["cost"]
            line["new_nodes"] += record["new_nodes"]
        return {"expander": ",".join(self.chain), "pending": total, "fit_now": fit_now,
                "add": list(add.values()), "nodes": sum(r["nodes"] for r in chosen),
                "cost": round(sum(r["cost"] for r in chosen), 6),
                "options": first_options or [], "unplaceable": self.why_not(left, why)}

    # One pool's option.
    def trial(self, pool: Pool, left: list[Group]) -> Trial | None:
        room = self.headroom(pool)
        if room == 0:
            return None
        items, template = [], pool.node("template")
        for group in left:
            if group.pin or not _may_take(group.spec, template):
                continue
            item = Item(dict(group.spec.resources), group.spec.id, tuple(group.spec.ports), group.spec.max_per_node)
            items += [item] * len(group.ids)
        if not items:
            return None
        guess = estimate(items, pool.capacity, room)
        if guess.nodes == 0:
            return None
        return self.prove(pool, left, guess.nodes, room)

    def prove(self, pool: Pool, left: list[Group], count: int, room: int | None = None) -> Trial:
        """Add ``count`` nodes of the pool to the copy and place ``left`` with the engine;
        grow by one node while that places more (up to :data:`GROWTH` and the pool's room);
        drop new nodes left empty. The trial stays in the copy (:meth:`undo` takes it back)."""
        trial = Trial(pool, [])
        self._grow(trial, count)
        trial.placed, still, _ = place_groups(self.copy, left)
        extra = 0
        while still and extra < GROWTH and (room is None or len(trial.nodes) < room):
            before = len(trial.placed_ids())
            self._grow(trial, 1)
            more, still, _ = place_groups(self.copy, still)
            trial.placed += more
            extra += 1
            if len(trial.placed_ids()) == before:
                break
        used = {node for _, assignments in trial.placed for _, node in assignments}
        empty = [node.name for node in trial.nodes if node.name not in used]
        if empty:
            daemons_there = [(spec, [a for a in assignments if a[1] in empty]) for spec, assignments in trial.daemons]
            for _, assignments in daemons_there:
                self.copy.unplace(assignments)
            trial.daemons = [(spec, [a for a in assignments if a[1] not in empty]) for spec, assignments in trial.daemons]
            self.copy.drop_nodes(empty)
            trial.nodes = [node for node in trial.nodes if node.name not in empty]
        return trial

    def _grow(self, trial: Trial, count: int) -> None:
        copy, pool = self.copy, trial.pool
        nodes = []
        for _ in range(count):
            self._serial += 1
            nodes.append(pool.node(f"{pool.name}-new-{self._serial}"))
        copy.add_nodes(nodes)
        trial.nodes += nodes
        for job, spec in sorted(copy.pending.global_jobs.items()):  # each new node gets its global jobs' tasks
            if spec.type != GLOBAL:
                continue
            for name in sorted(global_targets(spec, nodes)):
                result = copy.place(spec, [f"{job}.<{name}>"], only=[copy.by_name[name]])
                if result.assignments:
                    trial.daemons.append((spec, result.assignments))

    def undo(self, trial: Trial) -> None:
        for _, assignments in (*trial.placed, *trial.daemons):
            self.copy.unplace(assignments)
        self.copy.drop_nodes([node.name for node in trial.nodes])

    # What no pool places.
    def why_not(self, left: list[Group], why: dict[str, str]) -> list[dict]:
        out: dict[str, dict] = {}
        for group in left:
            spec = group.spec
            entry = out.setdefault(spec.id, {"job": spec.id, "tasks": 0, "task_ids": [], "reasons": []})
            entry["tasks"] += len(group.ids)
            entry["task_ids"] = (entry["task_ids"] + group.ids)[:SHOWN_TASKS]
            if entry["reasons"]:
                continue
            if group.pin:
                entry["reasons"].append(why.get(spec.id) or f"pinned to node {group.pin}: a new node cannot take it")
                continue
            if not self.pools:
                entry["reasons"].append("no pool in the catalogue (sched pool add)")
            for pool in self.pools:
                template = pool.node("template")
                reason = filter_pipeline(spec, True).check(template, 0)
                if reason is None and not fits_empty(Item(dict(spec.resources)), pool.capacity):
                    reason = "its resources exceed an empty node"
                if reason is None and self.headroom(pool) == 0:
                    reason = f"the pool is at its max_nodes ({pool.max_nodes})"
                if reason is None:
                    reason = why.get(spec.id) or "its placement rules are not met on new nodes of it"
                entry["reasons"].append(f"pool {pool.name}: {reason}")
        return list(out.values())


def _may_take(spec: JobSpec, template: Node) -> bool:
    """Whether an empty node of the pool may take a task of the spec at all."""
    return filter_pipeline(spec, True).check(template, 0) is None


def _option_record(option: Option) -> dict:
    return {"pool": option.pool, "nodes": option.nodes, "tasks": option.tasks, "cost": round(option.cost, 6),
            "waste": round(waste(option), 4), "priority": option.priority,
            "cost_per_task": round(option.cost / option.tasks, 6) if option.tasks else None}

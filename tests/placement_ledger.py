"""Every placement checked against the hard rules of its job, as the cluster stood when it
was committed: a ledger of what is live where, replayed from the namespace's event stream.

The stream holds every change in the order the scripts made it (``docs/events.md``), so
replaying it gives, at each ``assigned`` event, the live tasks that the commit saw. The
placement is then checked here, from the job's stored spec, the node and those live
tasks, with rules written again for this purpose (not the engine's functions, which the
commit and the worker share): node ready and active; a global or sysbatch task on its
pinned node; constraints; taints the job does not tolerate (a ``NoExecute`` one tolerated
for 0 s included); resources; host ports; ``max_per_node``; ``parallelism``; task slots;
hard topology spread; ``distinct_property``; required job affinity and anti-affinity, the
anti-affinity of other jobs included. A commit that let a wrong placement through is
caught whatever the worker or the commit believed.

The ledger also checks every eviction by a ``NoExecute`` taint: not before the task's
``toleration_seconds`` since it met the taint, so not twice within them; and hands every
task event to ``budget_ledger.Budgets``, which checks each drain's eviction against the
job's disruption budget.

The nodes are read at the end of each step: the machine changes nodes (taints,
availability, labels never) only in steps that place nothing, so they are the nodes each
placement of the step met.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import orjson

from scheduler.model import LIVE_STATES, TERMINAL_STATES
from scheduler.model.errors import NotFound

from budget_ledger import Budgets

ENDED = TERMINAL_STATES  # an event with one of these states ends what was live
EVICTED = "evicted from node "


@dataclass(frozen=True)
class Live:
    job: str
    version: int
    node: str


def millicores(value) -> int:
    """A stored cpu amount (``"500m"``, or cores) in millicores."""
    text = str(value)
    return int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)


def request(spec: dict) -> dict[str, int]:
    out = {}
    for name, amount in (spec.get("resources") or {}).items():
        amount = millicores(amount) if name == "cpu" else int(amount)
        if amount > 0:
            out[name] = amount
    return out


def attribute(node, key: str) -> str:
    """A node's value for the attributes the machine writes rules over."""
    if key in ("node.name", "node.id"):
        return node.name
    if key == "node.hostname":
        return node.hostname or node.name
    if key.startswith("node.labels."):
        return node.labels.get(key[len("node.labels."):], "")
    raise AssertionError(f"the ledger does not know attribute {key!r}")


def constraint(text: str) -> tuple[str, str, str]:
    """(key, operator, value) of the constraint forms the machine writes."""
    for op in (" distinct_property", " is_set", " in "):
        if op in text:
            key, _, value = text.partition(op)
            return key.strip(), op.strip(), value.strip()
    for op in ("==", "!="):
        if op in text:
            key, _, value = text.partition(op)
            return key.strip(), op, value.strip()
    raise AssertionError(f"the ledger does not know constraint {text!r}")


def meets(node, text: str) -> bool:
    key, op, value = constraint(text)
    actual = attribute(node, key).casefold()
    if op == "==":
        return actual == value.casefold()
    if op == "!=":
        return actual != value.casefold()
    if op == "in":
        return actual in {v.strip().casefold() for v in value.split(",")}
    if op == "is_set":
        return actual != ""
    return True  # distinct_property: not a property of the node alone


def tolerance(taint, tolerations: list[dict]) -> float | None:
    """Seconds the tolerations let a task stay under ``taint`` (inf: for ever; None: not tolerated)."""
    limits, tolerated = [], False
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("key") and t["key"] != taint.key:
            continue
        if t.get("operator", "Equal") == "Equal" and t.get("value", "") != taint.value:
            continue
        tolerated = True
        if t.get("toleration_seconds") is not None:
            limits.append(t["toleration_seconds"])
    if not tolerated:
        return None
    return min(limits) if limits else math.inf


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == str(v) for k, v in selector.items())


class Ledger:
    def __init__(self, app):
        self.app, self.store = app, app.store
        self.after = "0-0"
        self.live: dict[str, Live] = {}
        self.specs: dict[tuple[str, int], dict] = {}
        self.labels: dict[str, dict] = {}  # job -> its labels (the machine never changes them)
        self.nodes: dict = {}  # as the last step left them
        self.evictions: dict[tuple, int] = {}  # (job, slot, node, taint) -> when it last evicted there
        self.problems: list[str] = []
        self.budgets = Budgets(self.store)  # and the disruptions, against their jobs' budgets
        self.placements = 0
        self.checked_evictions = 0
        self.unchecked = 0  # events of tasks removed before the ledger read them
        self.seen: dict[str, set[str]] = {"jobs": set(), "tasks": set(), "nodes": set()}  # every one named

    # Reading.
    def spec(self, job: str, version: int) -> dict:
        key = (job, version)
        if key not in self.specs:
            self.specs[key] = self.store.job_spec(job, version).raw
            self.labels[job] = dict(self.specs[key].get("labels") or {})
        return self.specs[key]

    def take(self) -> list[str]:
        """The problems found since the last call (one line each), having followed the stream."""
        self.follow()
        problems, self.problems = self.problems, []
        return problems

    def follow(self) -> None:
        """Replay the events since the last call, keeping the problems found."""
        store = self.store
        nodes = self.nodes = {node.name: node for node in store.nodes()}
        problems = self.problems
        entries = self.app.client.xrange(self.app.keys.stream, f"({self.after}", "+")
        for entry_id, fields in entries:
            self.after = entry_id
            event = orjson.loads(fields["event"])
            kind = event.get("type")
            if kind == "job":
                self.seen["jobs"].add(event["id"])
                self.budgets.see_job(event)
            elif kind == "node":
                self.seen["nodes"].add(event["name"])
            if kind != "task":
                continue
            task_id, state = event["id"], event.get("state")
            self.seen["tasks"].add(task_id)
            if state == "assigned":
                try:
                    task = store.get_task(task_id)
                except NotFound:  # ended and removed within the step: its spec is unknown
                    self.unchecked += 1
                    continue
                problems += [f"{task_id} placed on {event['node']}: {p}"
                             for p in self.placement(task_id, task, event["node"], nodes)]
                self.live[task_id] = Live(task.job, task.version, event["node"])
                self.placements += 1
            task = None
            if state == "stopped":
                try:
                    task = store.get_task(task_id)
                except NotFound:  # removed by retention within the step: how it ended is not known
                    self.unchecked += 1
            problems += self.budgets.see(event, task)
            if state in ENDED and task_id in self.live:
                ended = self.live.pop(task_id)
                if task is not None:
                    problems += self.eviction(task_id, task, ended, nodes)

    def agrees(self, tasks) -> list[str]:
        """The ledger's live tasks against the tasks' hashes: a change without its event (or
        the other way round) would make every later check wrong."""
        stored = {t.id: t.node for t in tasks if t.state in LIVE_STATES}
        mine = {task_id: live.node for task_id, live in self.live.items()}
        if stored == mine:
            return []
        return [f"the event stream says {sorted(set(mine.items()) - set(stored.items()))} are live and misses "
                f"{sorted(set(stored.items()) - set(mine.items()))}"]

    # The rules.
    def placement(self, task_id: str, task, name: str, nodes: dict) -> list[str]:
        node = nodes.get(name)
        if node is None:
            return ["the node does not exist"]
        spec = self.spec(task.job, task.version)
        out = []
        if node.status != "ready" or node.availability != "active":
            out.append(f"node {node.status} and {node.availability}")
        if spec["type"] in ("global", "sysbatch") and task.pin != name:
            out.append(f"its task is pinned to {task.pin!r}")
        out += [f"constraint {c} not met" for c in spec.get("constraints") or () if not meets(node, c)]
        for taint in node.taints:
            if taint.effect != "PreferNoSchedule" and tolerance(taint, spec.get("tolerations") or []) in (None, 0):
                out.append(f"taint {taint} not tolerated")
        here = [live for live in self.live.values() if live.node == name]
        used: Counter = Counter()
        ports: set[int] = set()
        for live in here:
            other = self.spec(live.job, live.version)
            used.update(request(other))
            ports.update(other.get("ports") or ())
        for resource, amount in request(spec).items():
            if used[resource] + amount > node.capacity.get(resource, 0):
                out.append(f"{resource} {used[resource]} + {amount} over its capacity {node.capacity.get(resource, 0)}")
        out += [f"host port {p} in use" for p in spec.get("ports") or () if p in ports]
        mine = sum(1 for live in here if live.job == task.job)
        if spec.get("max_per_node") and mine >= spec["max_per_node"]:
            out.append(f"{mine} tasks of its job already there, max_per_node {spec['max_per_node']}")
        if spec.get("parallelism") and sum(1 for live in self.live.values() if live.job == task.job) >= \
                spec["parallelism"]:
            out.append(f"its job runs its parallelism of {spec['parallelism']}")
        slots = getattr(node, "slots", 0)
        if slots and len(here) >= slots:
            out.append(f"{len(here)} live tasks on a node of {slots} task slots")
        return out + self.domain_rules(task.job, spec, node, nodes)

    def counted(self, jobs, key: str) -> Counter:
        """Live tasks of ``jobs`` by their node's value of ``key`` (nodes without it apart)."""
        out: Counter = Counter()
        for live in self.live.values():
            if live.job in jobs:
                node = self.nodes.get(live.node)
                value = attribute(node, key) if node is not None else ""
                if value:
                    out[value] += 1
        return out

    def matching(self, selector: dict) -> set[str]:
        return {job for job in {live.job for live in self.live.values()} if selects(selector, self.labels[job])}

    def domain_rules(self, job: str, spec: dict, node, nodes: dict) -> list[str]:
        labels = spec.get("labels") or {}
        out = []
        static = [c for c in spec.get("constraints") or () if "distinct_property" not in c]
        for rule in spec.get("topology_spread") or ():
            if rule.get("when_unsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            key, selector = rule["attribute"], rule.get("match")
            jobs = {job} if selector is None else self.matching(selector)
            counts = self.counted(jobs, key)
            eligible = {attribute(n, key) for n in nodes.values() if all(meets(n, c) for c in static)} - {""}
            low = 0 if len(eligible) < rule.get("min_domains", 1) or not eligible else min(counts[d] for d in eligible)
            value = attribute(node, key)
            own = selector is None or selects(selector, labels)
            if not value:
                out.append(f"no {key} for its topology_spread")
            elif counts[value] + own - low > rule.get("max_skew", 1):
                out.append(f"topology_spread over {key}: {value} would hold {counts[value] + own}, the fewest {low}, "
                           f"max_skew {rule.get('max_skew', 1)}")
        for text in spec.get("constraints") or ():
            key, op, limit = constraint(text)
            if op == "distinct_property":
                value = attribute(node, key)
                if not value:
                    out.append(f"no {key} for its distinct_property")
                elif self.counted({job}, key)[value] >= int(limit or 1):
                    out.append(f"distinct_property {key}={value} holds {int(limit or 1)} already")
        required = [t for t in spec.get("job_affinity") or () if t.get("required")]
        first = all(selects(t["match"], labels) and not self.matching(t["match"]) for t in required)
        for term in required:
            value = attribute(node, term["attribute"])
            if not value or (not first and not self.counted(self.matching(term["match"]), term["attribute"])[value]):
                out.append(f"job_affinity {term['match']} on {term['attribute']} not met")
        antis = [(t, self.matching(t["match"])) for t in spec.get("job_anti_affinity") or () if t.get("required")]
        if labels:  # the required anti-affinity of the live jobs this one's labels match
            for other in {live.job for live in self.live.values()} - {job}:
                for version in {live.version for live in self.live.values() if live.job == other}:
                    for t in self.spec(other, version).get("job_anti_affinity") or ():
                        if t.get("required") and selects(t["match"], labels):
                            antis.append((t, {other}))
        for term, jobs in antis:
            value = attribute(node, term["attribute"])
            if value and self.counted(jobs, term["attribute"])[value]:
                out.append(f"job_anti_affinity {term['match']} on {term['attribute']}: {value} holds a task of "
                           f"{sorted(jobs)}")
        return out

    def eviction(self, task_id: str, task, ended: Live, nodes: dict) -> list[str]:
        """A task stopped by a NoExecute taint: not before its toleration_seconds since it
        met the taint, and so never twice by one taint within them."""
        if not task.message.startswith(EVICTED):
            return []
        self.checked_evictions += 1
        name, _, text = task.message[len(EVICTED):].partition(" by its taint ")
        node = nodes.get(name)
        taint = next((t for t in node.taints if str(t) == text), None) if node is not None else None
        if taint is None:
            return [f"{task_id} evicted from {name} by {text}, which the node does not have"]
        seconds = tolerance(taint, self.spec(ended.job, ended.version).get("tolerations") or [])
        if seconds == math.inf:
            return [f"{task_id} evicted by {text}, which its job tolerates for ever"]
        if not seconds:
            return []
        problems = []
        met = max(task.assigned_ms, taint.added_ms)
        if task.ended_ms - met < seconds * 1000:
            problems.append(f"{task_id} evicted by {text} {task.ended_ms - met} ms after it met the taint, "
                            f"tolerated for {seconds} s")
        key = (ended.job, task.slot, name, text)  # a slot: a task and the ones that replace it
        last = self.evictions.get(key)
        if last is not None and task.ended_ms - last < seconds * 1000:
            problems.append(f"{task_id}: slot {task.slot} of job {ended.job} evicted twice from {name} by {text} "
                            f"within {task.ended_ms - last} ms, tolerated for {seconds} s")
        self.evictions[key] = task.ended_ms
        return problems

    def overdue(self, now_ms: int, nodes: dict) -> list[str]:
        """After the evictions' upkeep at ``now_ms``: live tasks a NoExecute taint should have
        evicted by then."""
        problems = []
        for task_id, live in sorted(self.live.items()):
            node = nodes.get(live.node)
            if node is None:
                continue
            tolerations = self.spec(live.job, live.version).get("tolerations") or []
            for taint in node.taints:
                if taint.effect != "NoExecute":
                    continue
                seconds = tolerance(taint, tolerations)
                if seconds is None or seconds == 0:
                    problems.append(f"{task_id} still on {live.node} under {taint}, which it does not tolerate")
                elif seconds != math.inf:
                    assigned = self.store.get_task(task_id).assigned_ms
                    due = max(assigned, taint.added_ms) + 1000 * seconds
                    if due <= now_ms:
                        problems.append(f"{task_id} still on {live.node} {now_ms - due} ms after {taint} was to "
                                        f"evict it")
        return problems

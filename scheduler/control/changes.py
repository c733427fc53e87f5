"""What a submit changes against the running version, and a job's versions with their
differences (``sched job plan``, ``sched job submit``, ``sched job history``).

A change is one of: ``create`` (a new job), ``none`` (the running spec), ``scale`` (only
``replicas``), ``deployment`` (a new version rolled out as its ``update`` block says) or
``replace-all`` (a new version without ``update``: every open task stops at once and the
new version's tasks are queued; a batch job's running tasks are kept).
"""

from __future__ import annotations

import orjson

from scheduler.model import PENDING, RUN_TO_COMPLETION, JobSpec, Task

CREATE, NONE, SCALE, DEPLOYMENT, REPLACE_ALL = "create", "none", "scale", "deployment", "replace-all"


def _flatten(value, prefix: str, out: dict) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(inner, f"{prefix}.{key}" if prefix else key, out)
    else:
        out[prefix] = value


def field_changes(old: dict | None, new: dict) -> list[dict]:
    """``[{field, old, new}]`` between two stored specs, nested fields as ``run.command``;
    a field one side lacks is None there."""
    before: dict = {}
    after: dict = {}
    _flatten(old or {}, "", before)
    _flatten(new, "", after)
    return [{"field": name, "old": before.get(name), "new": after.get(name)}
            for name in sorted(set(before) | set(after), key=lambda n: (n != "id", n))
            if before.get(name) != after.get(name)]


def kind_of(stored: dict, spec: JobSpec) -> str:
    """Which change submitting ``spec`` makes to the job stored as ``stored`` (its hash)."""
    if not stored or stored.get("status") != "running":
        return CREATE if not stored else REPLACE_ALL
    old = orjson.loads(stored["spec"])
    new = orjson.loads(orjson.dumps(spec.raw))
    if old == new:
        return NONE
    if not spec.per_node and not spec.launcher and {**old, "replicas": spec.replicas} == new:
        return SCALE
    return DEPLOYMENT if spec.update is not None else REPLACE_ALL


def describe(stored: dict, spec: JobSpec, open_tasks: list[Task], targets: int | None = None) -> dict:
    """The change as the CLI prints it: ``{action, from_version, to_version, fields, stop,
    start, kept}``: ``stop`` the ids of tasks that stop at once, ``start`` how many new
    tasks are queued at once (a deployment starts them group by group), ``kept`` the ids
    of tasks that keep running (a batch job's, or a deployment's until replaced).
    ``targets``: the nodes a global job wants now."""
    action = kind_of(stored, spec)
    old = orjson.loads(stored["spec"]) if stored.get("spec") else None
    version = int(stored.get("version", 0))
    out = {"action": action, "from_version": version or None,
           "to_version": version if action in (NONE, SCALE) else version + 1,
           "fields": field_changes(old, spec.raw) if old is not None else [], "stop": [], "start": 0, "kept": []}
    live = [t for t in open_tasks if t.live]
    if spec.launcher:  # a periodic or parameterized job runs no task itself: its launches do
        out["stop"] = [t.id for t in open_tasks] if action == REPLACE_ALL else []
        return out
    if action == CREATE or (action == REPLACE_ALL and stored.get("status") != "running"):
        out["start"] = spec.replicas if not spec.per_node else targets or 0
    elif action == SCALE:
        if spec.replicas >= len(open_tasks):
            out["start"] = spec.replicas - len(open_tasks)
        else:
            surplus = sorted(open_tasks, key=lambda t: (t.state != PENDING, -t.index))[:len(open_tasks) - spec.replicas]
            out["stop"] = [t.id for t in surplus]
    elif action == REPLACE_ALL:
        if spec.type in RUN_TO_COMPLETION and not spec.per_node:
            out["kept"] = [t.id for t in live]
            out["stop"] = [t.id for t in open_tasks if not t.live]
            out["start"] = max(0, spec.replicas - len(live))
        else:
            out["stop"] = [t.id for t in open_tasks]
            out["start"] = spec.replicas if not spec.per_node else targets or 0
    elif action == DEPLOYMENT:
        out["kept"] = [t.id for t in open_tasks]
        update = spec.update
        out["update"] = {"max_parallel": update.max_parallel, "order": update.order, "canary": update.canary}
    return out


def lines(change: dict, job_id: str) -> list[str]:
    """The change in words, one line each (``nomad job plan``'s diff, shortened)."""
    action = change["action"]
    out = []
    if action == CREATE:
        return [f"job {job_id}: created (version 1), {change['start']} task(s) queued"]
    if action == NONE:
        return [f"job {job_id}: the spec is the running version's ({change['to_version']}); nothing changes"]
    head = {SCALE: "scaled", DEPLOYMENT: "new version rolled out by a deployment",
            REPLACE_ALL: "new version replaces every task at once"}[action]
    out.append(f"job {job_id}: version {change['from_version']} -> {change['to_version']}: {head}")
    for item in change["fields"]:
        out.append(f"  ~ {item['field']}: {show(item['old'])} -> {show(item['new'])}")
    if change["stop"]:
        out.append(f"  stop {len(change['stop'])} task(s): {', '.join(change['stop'][:10])}"
                   + (" ..." if len(change["stop"]) > 10 else ""))
    if change["start"]:
        out.append(f"  start {change['start']} task(s)")
    if action == DEPLOYMENT:
        update = change["update"]
        canary = f", {update['canary']} canary task(s) first" if update["canary"] else ""
        out.append(f"  replace {len(change['kept'])} task(s) {update['max_parallel']} at a time, "
                   f"{update['order']}{canary}")
    elif change["kept"]:
        out.append(f"  keep {len(change['kept'])} running task(s) of the old version until they end")
    return out


def show(value) -> str:
    return "-" if value is None else orjson.dumps(value).decode()


def history(fields: dict, deployments: list[dict]) -> list[dict]:
    """A job's versions, oldest first, from its hash (``spec:<n>`` per version): each with
    its spec, the fields changed from the version before, and its deployment's state."""
    by_version = {d["to"]: d for d in deployments}
    versions = sorted(int(name.split(":", 1)[1]) for name in fields if name.startswith("spec:"))
    out, previous = [], None
    for version in versions:
        spec = orjson.loads(fields[f"spec:{version}"])
        deployment = by_version.get(version)
        out.append({"version": version, "current": str(version) == fields.get("version"),
                    "stable": str(version) == fields.get("stable"),
                    "deployment": deployment["id"] if deployment else None,
                    "deployment_state": deployment["state"] if deployment else None,
                    "changes": field_changes(previous, spec) if previous is not None else [], "spec": spec})
        previous = spec
    return out

"""The JSON Schemas of what the API answers and takes, named once and referred to from
the OpenAPI document (``#/components/schemas/<Name>``).

The records are the CLI's ``--json`` records (the API answers what ``sched ... --json``
prints), so their fields are contracts: fields may be added, never renamed. Every
schema lists the fields every answer has (``required``) and lets more through.
"""

from __future__ import annotations

from scheduler.model import TASK_STATES, job_schema

NAMED: dict[str, dict] = {}  # name -> schema: the document's components


def named(name: str, schema: dict) -> dict:
    """Register ``schema`` as ``name``; returns the reference to it."""
    NAMED[name] = schema
    return {"$ref": f"#/components/schemas/{name}"}


def resolve(schema: dict) -> dict:
    """The schema a reference names (any other schema as it is)."""
    ref = schema.get("$ref", "")
    return NAMED[ref.rpartition("/")[2]] if ref.startswith("#/components/schemas/") else schema


def obj(required: dict, optional: dict | None = None, **more) -> dict:
    """An object with ``required`` fields (name -> schema) and ``optional`` ones."""
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required), **more}


def array(items: dict) -> dict:
    return {"type": "array", "items": items}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


STRING, INTEGER, NUMBER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
ANY_OBJECT = {"type": "object"}
COUNTS = {"type": "object", "additionalProperties": {"type": "integer"},
          "description": "resource -> amount (cpu in millicores, memory in bytes, others in units)"}
MS = {"type": "integer", "description": "milliseconds since the Unix epoch"}
STATE = {"type": "string", "enum": list(TASK_STATES)}

PROBLEM = named("Problem", obj(
    {"type": STRING, "title": STRING, "status": INTEGER, "detail": {"type": "string", "description": "one sentence"}},
    {"instance": STRING}, description="An error, as RFC 9457 says (application/problem+json)."))

# ----------------------------------------------------------------------------- nodes
NODE = named("Node", obj({
    "name": STRING, "capacity": COUNTS, "allocated": COUNTS, "labels": {"type": "object"},
    "availability": {"type": "string", "enum": ["active", "pause", "drain"]},
    "status": STRING, "tasks": INTEGER,
    "platform": obj({"os": STRING, "arch": STRING}), "role": STRING, "plugins": array(STRING),
    "taints": array(STRING)},
    {"slots": nullable(INTEGER),
     "drain": {"type": "object", "description": "its drain in progress (`sched node show`: or how the last "
                                                "one ended)"}},
    description="A node, as `sched node ls --json` prints it (`slots`: its agent's task slots, null without one)."))
TAINT_CHANGE = named("TaintChange", obj(
    {"node": STRING, "before": STRING, "after": STRING},
    description="A node's taints before and after a taint or untaint, as text (`key=value:Effect ...`)."))
NODE_REGISTERED = named("NodeRegistered", obj({"created": BOOLEAN, "node": NODE}))
AVAILABILITY_CHANGE = named("AvailabilityChange", obj(
    {"node": STRING, "before": STRING, "availability": STRING},
    description="A node paused or activated: its availability before and now."))
DRAIN_FIELDS = {
    "node": STRING, "state": {"type": "string", "enum": ["", "draining", "complete", "cancelled"]},
    "message": {"type": "string", "description": "what it waits for, or how it ended"},
    "started_at": MS, "deadline_at": {**MS, "description": "after it the rest is stopped whatever the budgets (0: none)"},
    "force": BOOLEAN, "stopped_count": INTEGER, "moved": INTEGER, "left": INTEGER, "ended_at": MS}
DRAIN = named("Drain", obj(DRAIN_FIELDS, description="A node's drain: in progress, or how the last one ended "
                                                     "(state \"\" when the node was never drained)."))
DRAIN_REPORT = named("DrainReport", obj(
    {"node": STRING, "before": STRING, "stopped": array(STRING), "replacements": array(STRING), **DRAIN_FIELDS},
    description="A drain: the tasks stopped on the node now and their replacements, queued as pending, and the "
                "drain as it stands (state draining while tasks wait on their jobs' disruption budgets)."))
NODE_REMOVED = named("NodeRemoved", obj({"name": STRING, "removed": BOOLEAN}))
HISTORY_ENTRY = named("HistoryEntry", obj(
    {"ts": MS, "action": STRING, "by": STRING, "details": ANY_OBJECT},
    description="Who did what, and when (the audit trail)."))

# ----------------------------------------------------------------------------- budgets
BUDGET = named("Budget", obj({
    "job": STRING, "budget": {"type": "string", "description": "max_unavailable 1, min_available 75%, ..."},
    "expected": INTEGER, "healthy": INTEGER, "desired_healthy": INTEGER,
    "allowed": {"type": "integer", "description": "disruptions the budget allows now"},
    "unavailable": INTEGER, "max_unavailable": {"type": "integer", "description": "expected less desired_healthy"},
    "disrupted": {"type": "object", "additionalProperties": {"type": "integer"},
                  "description": "task id -> when its disruption was counted (ms), until a count sees it end"},
    "evictions": INTEGER, "counted_at": MS},
    description="A job's disruption budget as last counted (`sched budget show --json`)."))
EVICTION = named("Eviction", obj(
    {"task": STRING, "job": STRING, "evicted": BOOLEAN, "verdict": STRING, "replacement": STRING,
     "waiting": STRING}, description="What an eviction did: the task stopped, and its replacement."))

# ----------------------------------------------------------------------------- jobs
JOB_SPEC = named("JobSpec", job_schema.JOB_SPEC)
CHANGES = named("Changes", obj(
    {"action": STRING, "fields": array(obj({"field": STRING}, {"old": {}, "new": {}}))},
    {"from_version": nullable(INTEGER), "to_version": nullable(INTEGER), "stop": array(STRING), "start": INTEGER,
     "kept": array(STRING), "update": ANY_OBJECT},
    description="What a submit changes (see `sched job plan`)."))
SUBMITTED = named("Submitted", obj(
    {"id": STRING, "version": INTEGER, "tasks": array(STRING), "created": BOOLEAN},
    {"deployment": nullable(STRING), "changes": CHANGES, "unoffered": array(STRING), "decimal_memory": STRING},
    description="A job submitted, as `sched job submit --json` prints it."))
JOB_SUMMARY = named("JobSummary", obj(
    {"id": STRING, "type": STRING, "priority": INTEGER, "replicas": nullable(INTEGER), "version": INTEGER,
     "status": STRING, "tasks": {"type": "object", "additionalProperties": INTEGER}},
    description="A job with its task counts by state (`sched job ls --json`)."))
JOB = named("Job", obj(
    {"id": STRING, "version": INTEGER, "status": STRING, "created": MS, "spec": JOB_SPEC,
     "history": array(HISTORY_ENTRY)},
    {"finished_at": MS, "remove_at": nullable(MS)},
    description="A job's spec and status, and who did what to it (`sched job show --json`); a finished job's "
                "finished_at, and remove_at: when retention removes it."))
JOB_VERSION = named("JobVersion", obj(
    {"version": INTEGER, "current": BOOLEAN, "stable": BOOLEAN, "deployment": nullable(STRING),
     "deployment_state": nullable(STRING), "changes": array(ANY_OBJECT), "spec": JOB_SPEC},
    description="One version of a job (`sched job history --json`)."))
PLAN = named("Plan", obj(
    {"job": STRING, "placements": array(obj({"task": STRING, "node": STRING})),
     "preemptions": array(ANY_OBJECT), "pending": array(ANY_OBJECT), "unchanged": BOOLEAN, "changes": CHANGES},
    {"stopping": INTEGER, "gang": ANY_OBJECT},
    description="A dry run (`sched job plan --json`): where the tasks would go now."))
LAUNCHED = named("Launched", obj({"id": STRING, "launched": STRING},
                                 description="A periodic job launched now: its launch's job id."))
SCHEDULE = named("Schedule", obj({"id": STRING, "suspended": BOOLEAN, "next_launch": nullable(STRING)},
                                 description="A periodic job suspended or resumed; next_launch in ISO 8601, UTC."))
DISPATCHED = named("Dispatched", obj({"id": STRING, "dispatched": STRING, "created": BOOLEAN},
                                     description="A dispatch: its launch's job id (created false: a token's)."))
SCALED = named("Scaled", obj({"id": STRING, "replicas": INTEGER, "added": array(STRING), "stopped": array(STRING)}))
STOPPED = named("Stopped", obj({"id": STRING, "stopped": array(STRING)}))
TASK = named("Task", obj(
    {"id": STRING, "job": STRING, "state": STATE, "node": nullable(STRING), "priority": INTEGER,
     "attempts": INTEGER, "version": INTEGER, "health": nullable(STRING)},
    description="A task, as `sched task ls --json` prints it."))
WAITED = named("Waited", obj(
    {"job": STRING, "state": STATE, "wanted": INTEGER, "reached": BOOLEAN, "tasks": array(TASK)},
    {"message": STRING},
    description="A wait for tasks of a job to be in a state: reached, or not within the timeout."))

# ----------------------------------------------------------------------------- tasks
EXPLANATION = named("Explanation", obj(
    {"id": STRING, "state": STATE, "version": INTEGER, "nodes_evaluated": INTEGER,
     "reasons": {"type": "object", "additionalProperties": INTEGER}, "message": STRING},
    {"nominated_node": STRING, "health": STRING, "health_check": ANY_OBJECT, "gang": ANY_OBJECT,
     "tenant": STRING},
    description="Why a task is where it is (`sched task explain --json`)."))
LOGS = named("Logs", obj(
    {"id": STRING, "state": STATE, "stdout": STRING, "stderr": STRING, "stdout_bytes": INTEGER,
     "stderr_bytes": INTEGER},
    {"result": STRING, "traceback": STRING, "exit_code": INTEGER},
    description="What a task printed: the last 64 KiB of each stream, and the bytes written."))

# ----------------------------------------------------------------------------- the rest
COUNTS_BY_STATE = {"type": "object", "additionalProperties": INTEGER}
DEPLOYMENT = named("Deployment", obj(
    {"id": STRING, "job": STRING, "from": INTEGER, "to": INTEGER, "state": STRING,
     "from_counts": COUNTS_BY_STATE, "to_counts": COUNTS_BY_STATE},
    {"canary": INTEGER, "promoted": {"type": ["integer", "boolean"]}, "message": STRING, "created": MS,
     "updated": MS},
    description="A rolling update of a job (`sched deployment status --json`)."))
QUEUES = named("Queues", obj({"active": INTEGER, "backoff": INTEGER, "unschedulable": INTEGER, "inflight": INTEGER},
                            description="Tasks in each part of the scheduling queue."))
QUOTA = named("Quota", obj({"namespace": STRING, "quota": COUNTS, "used": COUNTS},
                          description="A namespace's quota (tasks counted as `tasks`) and what its live tasks hold."))
QUOTA_REMOVED = named("QuotaRemoved", obj({"namespace": STRING, "removed": BOOLEAN}))
POOL = named("Pool", obj({
    "name": STRING, "capacity": COUNTS, "labels": {"type": "object"}, "engine_labels": {"type": "object"},
    "taints": array(STRING), "os": STRING, "arch": STRING, "role": STRING, "plugins": array(STRING),
    "cost": NUMBER, "min_nodes": INTEGER, "max_nodes": nullable(INTEGER), "priority": INTEGER},
    {"nodes": INTEGER, "created": BOOLEAN}, description="A pool, as `sched pool ls --json` prints it."))
POOL_REMOVED = named("PoolRemoved", obj({"name": STRING, "removed": BOOLEAN}))
CAPACITY = named("Capacity", obj(
    {"nodes": INTEGER, "pending": INTEGER, "live": INTEGER, "pools": array(STRING)},
    {"scale_up": ANY_OBJECT, "scale_down": ANY_OBJECT, "decision": ANY_OBJECT, "digest": STRING,
     "recorded_at": MS},
    description="A capacity answer, as `sched capacity --json` prints it (docs/cli.md)."))
TENANT = named("Tenant", obj({"name": STRING, "weight": NUMBER, "used": COUNTS, "dominant_share": NUMBER}))
TENANT_REMOVED = named("TenantRemoved", obj({"name": STRING, "removed": BOOLEAN}))
STREAM_INFO = named("StreamInfo", obj(
    {"namespace": STRING, "key": STRING, "entries": INTEGER, "maxlen": INTEGER, "memory_bytes": INTEGER,
     "oldest": STRING, "newest": STRING, "groups": array(ANY_OBJECT)},
    description="The namespace's event stream (`sched events info --json`)."))
TOKEN_SELF = named("TokenSelf", obj({"name": nullable(STRING), "namespace": STRING, "role": STRING},
                                    description="The token a request carries (name null without tokens)."))

# ----------------------------------------------------------------------------- settings, retention, layout, snapshots
SETTING = named("Setting", obj({"value": {"type": ["number", "string"]}, "default": BOOLEAN},
                               description="A setting's value (seconds, a count, or a name: rebalance_strategy), "
                                           "and whether it is the default."))
SETTINGS = named("Settings", {"type": "object", "additionalProperties": SETTING,
                              "required": ["task_retention", "ended_tasks_per_job", "job_retention", "stream_maxlen"],
                              "description": "The namespace's settings, by name (`sched config set --json`)."})
MEMORY = named("Memory", obj(
    {"used_memory": INTEGER, "maxmemory": INTEGER, "maxmemory_policy": STRING, "live_tasks": INTEGER, "jobs": INTEGER,
     "nodes": INTEGER, "bytes_per_live_task": INTEGER, "bytes_per_job": INTEGER, "bytes_per_node": INTEGER},
    description="Redis's memory as the namespace sees it (bytes; maxmemory 0: no limit), and what one live task, "
                "job (its tasks apart) and node takes on average."))
CONFIG = named("Config", obj({"namespace": STRING, "settings": SETTINGS, "memory": MEMORY},
                             description="The namespace's settings and Redis's memory (`sched config show --json`)."))
GC_REPORT = named("GcReport", obj(
    {"namespace": STRING, "dry_run": BOOLEAN, "counted": INTEGER, "uncounted": INTEGER, "finished": array(STRING),
     "tasks_removed": INTEGER, "jobs_removed": array(STRING), "job_tasks_removed": INTEGER,
     "kept": {"type": "object", "additionalProperties": INTEGER}, "more": BOOLEAN},
    description="What retention removed now, or would remove (`sched gc --json`)."))
LAYOUT = named("Layout", obj({"namespace": STRING, "layout": INTEGER, "latest": INTEGER},
                             description="The namespace's key layout (0: empty) and the one this sched writes."))
UPGRADED = named("Upgraded", obj({"namespace": STRING, "from": INTEGER, "to": INTEGER, "steps": ANY_OBJECT},
                                 description="A key layout moved forward (`sched upgrade --json`): each step's work."))
SNAPSHOT = named("SnapshotSummary", obj(
    {"namespace": STRING, "keys": INTEGER, "saved_at": MS, "layout": INTEGER, "source_namespace": STRING,
     "tries": INTEGER, "paused_ms": INTEGER},
    description="A snapshot restored (`sched snapshot restore --json`, without `file`)."))

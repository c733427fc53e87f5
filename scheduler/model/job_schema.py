"""The JSON Schema of a job spec (``docs/job-spec.schema.json``, the API's ``JobSpec``)
and of a node's description (the API's ``NodeSpec``).

Made from the parser's own constants and regular expressions, so a bound or a name
pattern changed in one place changes in both. What JSON Schema cannot say (a comparison
between two fields, a regular expression or cron expression that compiles, a quantity
written as text within its largest, a dependency that exists) is checked by the parser
alone and listed in :data:`SERVER_CHECKS`; ``tests/test_job_schema.py`` holds the two to
agreement on random specs: what the parser takes the schema takes, what the schema
refuses the parser refuses, and every other refusal is one of those checks.
"""

from __future__ import annotations

from scheduler.model import constraints, names, quantities, taints
from scheduler.model import job as job_module
from scheduler.model.dependencies import MAX_AFTER, WANTED_STATES
from scheduler.model.disruption import MAX_COUNT as MAX_BUDGET
from scheduler.model.disconnect import MAX_STOP_AFTER_S, NEVER, ON_LOSS, STOP
from scheduler.model.parameterized import MAX_META_VALUE, PAYLOADS, _META_KEY_RE
from scheduler.model.periodic import DEFAULT_STARTING_DEADLINE_S, MAX_HISTORY, OVERLAPS
from scheduler.model.reschedule import FUNCTIONS, MAX_ATTEMPTS, MAX_DELAY_S
from scheduler.model.retention import MAX_DURATION_S
from scheduler.model.selectors import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, OPERATORS
from scheduler.model.states import (BATCH, GLOBAL, JOB_TYPES, MAX_PRIORITY, MAX_REPLICAS, MIN_PRIORITY,
                                    PER_NODE_TYPES, RUN_TO_COMPLETION, SERVICE, SPREAD, STRATEGIES)
from scheduler.model.taints import EFFECTS, MAX_TOLERATION_S, NO_EXECUTE
from scheduler.model.topology_spread import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from scheduler.model.update import ORDERS, STOP_FIRST

# What only the parser checks: one sentence each, and the start of its refusal (what
# the agreement test matches a refusal of a spec the schema takes against).
SERVER_CHECKS = {
    "min_available is at most replicas, and at most parallelism": ("cannot exceed replicas", "cannot start with"),
    "gang: true with min_available only when they agree": ("gang: true means",),
    "a quantity written as text is at most the largest one (1,000,000 cores, 1 PiB, 1,000,000 units)":
        ("larger than any machine",),
    "spread targets sum to at most 100": ("sum to",),
    "a regular expression, version or semver constraint compiles": ("invalid regular expression", "invalid version",
                                                                    "invalid semver"),
    "an affinity's operator and value make one constraint": ("is not a constraint operator", "needs a value",
                                                             "takes no value", "needs a comma-separated list"),
    "update: min_healthy_time below healthy_deadline, progress_deadline 0 or at least it": ("must be shorter than",
                                                                                          "must be 0 or at least"),
    "reschedule: max_delay at least delay": ("is below delay",),
    "a duration written as text is whole seconds, within ten years": ("must be whole seconds", "must be a duration"),
    "periodic: a cron expression and a time zone this machine knows": ("cron", "time zone"),
    "parameterized: no meta key both required and optional": ("both required and optional",),
    "after: not the job itself, each job once (and, at submit, jobs that exist)": ("the job itself", "twice"),
}

# The parser's regular expressions, anchored (JSON Schema's ``pattern`` searches).
JOB_ID = names._JOB_ID_RE.pattern
CHILD_ID = names._CHILD_ID_RE.pattern
LABEL_KEY = names._LABEL_KEY_RE.pattern
ENV_NAME = job_module._ENV_NAME_RE.pattern
ATTRIBUTE = (r"(?:node\.(?:id|name|hostname|role|platform\.os|platform\.arch)|(?:node|engine)\.labels\."
             + constraints._LABEL_KEY_RE.pattern + ")")
_SPACE = r"[ \t\n\r\f\v]"  # Python's str.split() and strip() on ASCII: never a newline JSON Schema's \s misses


def anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


def whole(low: int, high: int, **more) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high, **more}


def seconds(low: float, high: float, *, above: bool = False, **more) -> dict:
    bound = {"exclusiveMinimum": low} if above else {"minimum": low}
    return {"type": "number", **bound, "maximum": high, **more}


def text(pattern: str, **more) -> dict:
    return {"type": "string", "pattern": anchored(pattern), **more}


def closed(properties: dict, required: tuple = (), **more) -> dict:
    out = {"type": "object", "additionalProperties": False, "properties": properties, **more}
    if required:
        out["required"] = list(required)
    return out


def nullable(schema: dict) -> dict:
    """``schema``, or null: a field written with no value (``resources:`` in YAML) is
    taken as left out."""
    if schema.keys() & {"oneOf", "anyOf", "allOf", "not", "if"}:  # those would hold for null as for any non-object
        return {"anyOf": [schema, {"type": "null"}]}
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return {**schema, "type": [*kinds, "null"]}


def list_of(items: dict, **more) -> dict:
    return {"type": "array", "items": items, **more}


SCALAR = {"type": ["string", "number"]}
BOOLEAN = {"type": "boolean"}
FLAG_FALSE = {"type": "boolean", "default": False}

# ----------------------------------------------------------------------------- quantities
_CPU_TEXT = quantities._CPU_RE.pattern.replace(r"\s", _SPACE)
_MEMORY_TEXT = _SPACE + r"*([0-9]*\.?[0-9]+)" + _SPACE + r"*(?:[kKMgGtTpP]i?|mi)?[bB]?" + _SPACE + "*"
CPU = {"anyOf": [{"type": "number", "minimum": 0, "maximum": quantities.MAX_MILLICORES // 1000},
                 text(_CPU_TEXT)],
       "description": "cores as a number (0.5) or text (\"1.5\"), or millicores with m (\"500m\")"}
MEMORY = {"anyOf": [{"type": "number", "minimum": 0, "maximum": quantities.MAX_BYTES}, text(_MEMORY_TEXT)],
          "description": "bytes, or text with a unit: 256MiB, 1Gi, 2G (a lone m, millibytes, is refused)"}
UNITS = {"anyOf": [whole(0, quantities.MAX_UNITS), text(_SPACE + "*[0-9]+" + _SPACE + "*")],
         "description": "whole units, as a number or a text of digits"}
# A name for cpu or memory that is not cpu or memory (cpus, mem, ram...) would be a
# resource no node has: refused.
_LOOKALIKE = "|".join(pattern.pattern for _, pattern in quantities._LOOKALIKES)
RESOURCES = {
    "type": "object",
    "propertyNames": {"pattern": anchored(quantities._NAME_RE.pattern),
                      "not": {"pattern": f"^(?!(?:cpu|memory)$)(?:{_LOOKALIKE})$"}},
    "properties": {"cpu": CPU, "memory": MEMORY},
    "additionalProperties": UNITS,
    "description": "what each task asks for on one node; names of a lowercase letter, then up to 31 lowercase "
                   "letters, digits, - and _",
}

# Beside a node's or a quota's own cpu and memory (and a node's gpu): the other resources.
OTHER_RESOURCES = {**{k: v for k, v in RESOURCES.items() if k != "properties"},
                   "propertyNames": {"pattern": anchored(quantities._NAME_RE.pattern),
                                     "not": {"pattern": f"^(?:{_LOOKALIKE})$"}},
                   "description": "other resources than cpu and memory: {name: whole units}"}

# ----------------------------------------------------------------------------- constraints
_SYMBOL = r"(?:==|!=|<=|>=|<|>)"
_VALUED = r"(?:in|set_contains|set_contains_any)"  # a comma-separated list, one item at least
CONSTRAINT = text(
    rf"{_SPACE}*{ATTRIBUTE}{_SPACE}*{_SYMBOL}[\s\S]*"
    rf"|{_SPACE}*{ATTRIBUTE}{_SPACE}+{_VALUED}{_SPACE}+[\s\S]*[^,{_SPACE[1:-1]}][\s\S]*"
    rf"|{_SPACE}*{ATTRIBUTE}{_SPACE}+(?:regexp|version|semver){_SPACE}+[\s\S]*[^{_SPACE[1:-1]}][\s\S]*"
    rf"|{_SPACE}*{ATTRIBUTE}{_SPACE}+(?:is_set|is_not_set){_SPACE}*"
    rf"|{_SPACE}*{ATTRIBUTE}{_SPACE}+distinct_property(?:{_SPACE}+0*(?:[1-9][0-9]{{0,5}}|1000000))?{_SPACE}*",
    description="KEY OP VALUE: node.labels.zone==eu-1, node.labels.tier in web,edge, node.hostname regexp ^web-, "
                "node.labels.gpu is_set, node.labels.kernel version >= 5.10, node.labels.rack distinct_property 2 "
                "(docs/job-spec.md, Constraints)")
SPREAD_ATTRIBUTE = text(f"{_SPACE}*{ATTRIBUTE}{_SPACE}*",
                        description="a node attribute: node.hostname, node.labels.zone, engine.labels.<key>...")
LABELS = {"type": "object", "propertyNames": {"pattern": anchored(LABEL_KEY)}, "additionalProperties": SCALAR}

# ----------------------------------------------------------------------------- blocks
RUN = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "func": text(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*", description="package.module:function"),
        "args": {"description": "positional arguments for func"},
        "kwargs": {"description": "keyword arguments for func"},
        "command": list_of(SCALAR, minItems=1, description="a program and its arguments, run without a shell"),
        "timeout": nullable({"type": "number", "exclusiveMinimum": 0, "description": "seconds"}),
        "env": {"type": "object",
                "propertyNames": {"pattern": anchored(ENV_NAME), "not": {"pattern": "^SCHED_"}},
                "additionalProperties": SCALAR},
    },
    "oneOf": [{"required": ["func"], "not": {"required": ["command"]},
               "properties": {"args": {"type": "array", "items": {}}, "kwargs": {"type": "object"}}},
              {"required": ["command"], "not": {"required": ["func"]}}],
    "description": "what the node agent runs for each task: exactly one of func and command",
}
UPDATE = closed({
    "max_parallel": whole(1, 1_000_000, default=1), "min_healthy_time": seconds(0, 86_400, default=10),
    "healthy_deadline": seconds(0, 86_400, above=True, default=300),
    "progress_deadline": seconds(0, 86_400, default=600), "order": {"enum": list(ORDERS), "default": STOP_FIRST},
    "canary": whole(0, 1_000_000, default=0), "auto_promote": FLAG_FALSE, "auto_revert": FLAG_FALSE,
    "delay": seconds(0, 86_400, default=0), "max_failure_ratio": seconds(0, 1, default=0)},
    allOf=[{"if": {"properties": {"auto_promote": {"const": True}}, "required": ["auto_promote"]},
            "then": {"properties": {"canary": {"minimum": 1}}, "required": ["canary"]}}],
    description="how a new version rolls out (docs/deployments.md): service and global jobs")
PORT = whole(1, 65535)
HEALTH = closed({
    "command": list_of(SCALAR, minItems=1),
    "http": closed({"port": PORT, "path": text(r"/[^\s]*", default="/")}, ("port",)),
    "tcp": closed({"port": PORT}, ("port",)),
    "interval": seconds(0, 86_400, above=True, default=1), "timeout": seconds(0, 86_400, above=True, default=1),
    "failures": whole(1, 1_000_000, default=3), "grace": seconds(0, 86_400, default=0)},
    oneOf=[{"required": ["command"]}, {"required": ["http"]}, {"required": ["tcp"]}],
    description="how the node's agent checks a running task: exactly one of command, http and tcp")
DISCONNECT = closed({
    "on_loss": {"enum": list(ON_LOSS)},
    "stop_after": {"anyOf": [seconds(0, MAX_STOP_AFTER_S, above=True), {"const": NEVER}]}},
    minProperties=1,
    allOf=[{"if": {"type": "object", "properties": {"on_loss": {"const": STOP}, "stop_after": {"const": NEVER}},
                   "required": ["on_loss", "stop_after"]}, "then": False}],
    description="what the job's runs do while their agent has no heartbeat (on_loss: freeze by default)")
_DURATION_TEXT = text(f"{_SPACE}*[0-9]+(?:\\.[0-9]+)?{_SPACE}*(?:ms|s|m|h|d)?{_SPACE}*")
DURATION = {"anyOf": [whole(0, MAX_DURATION_S), _DURATION_TEXT],
            "description": "whole seconds, or a duration: 90s, 30m, 6h, 7d"}


def seconds_or_text() -> dict:
    """A duration (a setting's): seconds, or a text such as 90s, 30m, 6h, 7d."""
    return {"anyOf": [seconds(0, MAX_DURATION_S), _DURATION_TEXT]}
TOLERATION = closed({
    "key": text(f"(?:{taints._KEY_RE.pattern})?"), "operator": {"enum": ["Equal", "Exists"], "default": "Equal"},
    "value": SCALAR, "effect": {"type": ["string", "null"], "enum": [*EFFECTS, "", None]},
    "toleration_seconds": nullable(whole(0, MAX_TOLERATION_S))},
    allOf=[{"if": {"anyOf": [{"not": {"required": ["key"]}}, {"properties": {"key": {"const": ""}}}]},
            "then": {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}}},
           {"if": {"properties": {"operator": {"const": "Exists"}}, "required": ["operator"]},
            "then": {"properties": {"value": {"const": ""}}}},
           {"if": {"properties": {"toleration_seconds": {"type": "integer"}}, "required": ["toleration_seconds"]},
            "then": {"required": ["effect"], "properties": {"effect": {"const": NO_EXECUTE}}}}])
_UNARY = ["is_set", "is_not_set"]
AFFINITY = closed({
    "attribute": SPREAD_ATTRIBUTE,
    "operator": {"enum": ["=", "==", "!=", "<", "<=", ">", ">=", "in", "regexp", "is_set", "is_not_set", "version",
                          "semver", "set_contains", "set_contains_any"], "default": "=="},
    "value": SCALAR, "weight": {**whole(-100, 100), "not": {"const": 0}, "default": 50}}, ("attribute",),
    allOf=[{"if": {"properties": {"operator": {"enum": _UNARY}}, "required": ["operator"]},
            "then": {"properties": {"value": {"const": ""}}}}])
_EXPRESSION = closed({
    "key": text(LABEL_KEY), "operator": {"enum": list(OPERATORS)}, "values": {}}, ("key", "operator"),
    allOf=[{"if": {"properties": {"operator": {"enum": [IN, NOT_IN]}}},
            "then": {"required": ["values"], "properties": {"values": list_of(SCALAR, minItems=1)}},
            "else": {"properties": {"values": {"anyOf": [{"type": "null"}, {"const": []}, {"const": ""},
                                                         {"const": 0}, {"const": False}, {"const": {}}]}}}}])
MATCH = {"match": nullable(LABELS), "match_expressions": nullable(list_of(_EXPRESSION))}
# A selector must require some label: a match with a label, or an In or Exists expression.
_SELECTS = {"anyOf": [{"properties": {"match": {"type": "object", "minProperties": 1}}, "required": ["match"]},
                      {"properties": {"match_expressions": {"type": "array",
                                                            "contains": {"properties": {"operator": {
                                                                "enum": [IN, EXISTS]}}}}},
                       "required": ["match_expressions"]}]}
_NO_SELECTOR = {"properties": {"match": {"type": "null"}, "match_expressions": {"type": "null"}}}
TOPOLOGY_SPREAD = closed({
    "attribute": SPREAD_ATTRIBUTE, "max_skew": whole(1, 1_000_000, default=1),
    "when_unsatisfiable": {"enum": [DO_NOT_SCHEDULE, SCHEDULE_ANYWAY], "default": DO_NOT_SCHEDULE},
    "min_domains": whole(1, 10_000), **MATCH}, ("attribute",),
    allOf=[{"anyOf": [_NO_SELECTOR, _SELECTS]},
           {"if": {"properties": {"when_unsatisfiable": {"const": SCHEDULE_ANYWAY}},
                   "required": ["when_unsatisfiable"]},
            "then": {"not": {"required": ["min_domains"]}}}])
JOB_AFFINITY = closed({
    "attribute": SPREAD_ATTRIBUTE, "required": FLAG_FALSE, "weight": nullable(whole(1, 100)), **MATCH},
    ("attribute",),
    allOf=[_SELECTS,
           {"anyOf": [{"properties": {"required": {"const": True}, "weight": {"type": "null"}},
                       "required": ["required"]},
                      {"properties": {"required": {"const": False}, "weight": {"type": "integer"}},
                       "required": ["weight"]}]}],
    description="required: true (a hard rule), or a weight from 1 to 100 (soft)")
_HISTORY_COUNT = whole(0, MAX_HISTORY)
PERIODIC = closed({
    "cron": {"type": "string", "description": "5 fields (minute hour day month weekday), 6 with a year, 7 with "
                                              "seconds first, a macro such as @daily, or @every 10m"},
    "time_zone": {"type": "string", "default": "UTC", "description": "an IANA zone name"},
    "overlap": {"enum": list(OVERLAPS), "default": "allow"},
    "starting_deadline": seconds(0, 86_400 * 7, above=True, default=DEFAULT_STARTING_DEADLINE_S),
    "history": closed({"completed": {**_HISTORY_COUNT, "default": 3}, "failed": {**_HISTORY_COUNT, "default": 1}}),
    "suspend": FLAG_FALSE}, ("cron",), description="batch and sysbatch jobs: launched on a schedule")
_META_KEYS = nullable(list_of(text(_META_KEY_RE.pattern), uniqueItems=True))
PARAMETERIZED = closed({"payload": {"enum": list(PAYLOADS), "default": "optional"},
                        "meta_required": _META_KEYS, "meta_optional": _META_KEYS},
                       description="batch and sysbatch jobs: launched by dispatch")
_ANY_JOB_ID = text(f"{JOB_ID}|{CHILD_ID}")
AFTER = list_of({"anyOf": [_ANY_JOB_ID, closed({"job": _ANY_JOB_ID,
                                                 "state": {"enum": list(WANTED_STATES), "default": "complete"}},
                                                ("job",))]},
                minItems=1, maxItems=MAX_AFTER, description="jobs whose state this job's tasks wait for")
RESCHEDULE = closed({
    "delay": seconds(0, MAX_DELAY_S), "delay_function": {"enum": list(FUNCTIONS), "default": "constant"},
    "max_delay": seconds(0, MAX_DELAY_S), "attempts": whole(0, MAX_ATTEMPTS),
    "interval": seconds(0, 365 * 86_400, default=0), "unlimited": BOOLEAN},
    description="what follows a failed task (Nomad's reschedule)")
PREFERENCE = closed({"spread": SPREAD_ATTRIBUTE,
                     "targets": nullable({"type": "object", "minProperties": 1,
                                          "additionalProperties": whole(0, 100)})}, ("spread",))


_BUDGET_VALUE = {"anyOf": [whole(0, MAX_BUDGET), text(f"{_SPACE}*(?:[0-9]{{1,2}}|0[0-9]{{2}}|100)%{_SPACE}*")],
                 "description": "a count of tasks, or a percentage of the expected ones such as \"25%\""}
DISRUPTION_BUDGET = closed({"max_unavailable": _BUDGET_VALUE, "min_available": _BUDGET_VALUE},
                           minProperties=1, maxProperties=1,
                           description="how many of its tasks voluntary disruptions may take down at once "
                                       "(kube's PodDisruptionBudget): one of the two")


def _when_type(types, then: dict) -> dict:
    """``then`` for the job types ``types`` (a spec without ``type`` is a service)."""
    given = {"if": {"properties": {"type": {"enum": sorted(types)}}, "required": ["type"]}, "then": then}
    if SERVICE in types:
        given["if"] = {"anyOf": [given["if"], {"not": {"required": ["type"]}}]}
    return given


_NOT_RUN_TO_COMPLETION = set(JOB_TYPES) - RUN_TO_COMPLETION
_NULL = {"type": "null"}
JOB_SPEC = {
    "type": "object",
    "description": "A job: N identical tasks (docs/job-spec.md). Checked by the server beyond this schema: "
                   + "; ".join(SERVER_CHECKS) + ".",
    "additionalProperties": False,
    "properties": {
        "id": nullable(text(f"{JOB_ID}|{CHILD_ID}", description="1 to 63 letters, digits, - and _, starting with a "
                                                                "letter or digit; a new random id when left out")),
        "type": {"enum": list(JOB_TYPES), "default": SERVICE},
        "priority": whole(MIN_PRIORITY, MAX_PRIORITY, default=50),
        "replicas": whole(0, MAX_REPLICAS, default=1, description="not for global and sysbatch jobs"),
        "resources": nullable(RESOURCES),
        "constraints": nullable(list_of(CONSTRAINT)),
        "preferences": nullable(list_of(PREFERENCE)),
        "ports": nullable(list_of(PORT, uniqueItems=True)),
        "plugins": nullable(list_of(text(names._PLUGIN_RE.pattern))),
        "strategy": {"enum": list(STRATEGIES), "default": SPREAD},
        "max_per_node": whole(0, MAX_REPLICAS, default=0, description="0: no limit"),
        "run": nullable(RUN),
        "preemptible": {"type": "boolean", "default": True},
        "preempt": {"enum": ["lower", "never"], "default": "lower"},
        "max_retries": whole(0, 1000, default=3),
        "restart_delay": seconds(0, 3600, default=1.0),
        "gang": FLAG_FALSE,
        "min_available": whole(0, MAX_REPLICAS, default=0),
        "tenant": text(names._TENANT_RE.pattern, default="default"),
        "update": nullable(UPDATE),
        "health": nullable(HEALTH),
        "disconnect": nullable(DISCONNECT),
        "ttl_after_finished": {**DURATION, "anyOf": [*DURATION["anyOf"], _NULL]},
        "labels": nullable(LABELS),
        "tolerations": nullable(list_of(TOLERATION)),
        "affinities": nullable(list_of(AFFINITY)),
        "topology_spread": nullable(list_of(TOPOLOGY_SPREAD)),
        "job_affinity": nullable(list_of(JOB_AFFINITY)),
        "job_anti_affinity": nullable(list_of(JOB_AFFINITY)),
        "periodic": nullable(PERIODIC),
        "parameterized": nullable(PARAMETERIZED),
        "after": nullable(AFTER),
        "parallelism": whole(1, MAX_REPLICAS, description="batch jobs: at most this many live tasks at once"),
        "deadline": seconds(0, job_module.MAX_DEADLINE_S, above=True,
                            description="batch and sysbatch jobs: seconds before the job is stopped and failed"),
        "reschedule": nullable(RESCHEDULE),
        "disruption_budget": nullable(DISRUPTION_BUDGET),
        "meta": nullable({"type": "object", "propertyNames": {"pattern": anchored(ENV_NAME)},
                          "additionalProperties": {"anyOf": [{"type": "string", "maxLength": MAX_META_VALUE},
                                                             {"type": "number"}]}}),
    },
    "allOf": [
        _when_type(PER_NODE_TYPES, {"not": {"required": ["replicas"]},
                                    "properties": {"gang": {"const": False}, "min_available": {"const": 0}}}),
        _when_type(RUN_TO_COMPLETION, {"properties": {"update": _NULL, "disruption_budget": {"anyOf": [
            _NULL, {"properties": {"min_available": {"type": "integer"}}, "required": ["min_available"]}]}}}),
        _when_type({GLOBAL}, {"properties": {"update": {"anyOf": [_NULL, {"properties": {"canary": {"const": 0}}}]}}}),
        _when_type(_NOT_RUN_TO_COMPLETION, {"properties": {"periodic": _NULL, "parameterized": _NULL},
                                            "not": {"required": ["deadline"]}}),
        _when_type(set(JOB_TYPES) - {BATCH}, {"not": {"required": ["parallelism"]}}),
        {"not": {"properties": {"periodic": {"type": "object"}, "parameterized": {"type": "object"}},
                 "required": ["periodic", "parameterized"]}},
    ],
}


def job_spec_document() -> dict:
    """The job spec's schema as a file of its own (``docs/job-spec.schema.json``)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "sched job spec", **JOB_SPEC}


# ----------------------------------------------------------------------------- nodes
_NODE_LABELS = {"anyOf": [LABELS, list_of(text(f"{_SPACE}*{LABEL_KEY}{_SPACE}*=[\\s\\S]*")), {"type": "null"}],
                "description": "{key: value}, or a list of key=value"}
_PLATFORM = text(r"[A-Za-z0-9_.-]{1,63}")
TAINT = text(f"{_SPACE}*{taints._KEY_RE.pattern}(?:={taints._VALUE_RE.pattern})?:(?:{'|'.join(EFFECTS)}){_SPACE}*",
             description="KEY[=VALUE]:EFFECT, such as dedicated=gpu:NoSchedule")
NODE_SPEC = closed({
    "cpu": CPU, "memory": MEMORY, "gpu": {**UNITS, "anyOf": [*UNITS["anyOf"], {"type": "null"}]},
    "resources": nullable({**OTHER_RESOURCES, "description": "other resources: {name: whole units}; gpu here or "
                                                             "as its own field, not both"}),
    "labels": _NODE_LABELS, "engine_labels": _NODE_LABELS,
    "os": {**_PLATFORM, "default": "linux"}, "arch": {**_PLATFORM, "default": "amd64"},
    "role": {**_PLATFORM, "default": "worker"}, "plugins": nullable(list_of(text(names._PLUGIN_RE.pattern))),
    "taints": nullable(list_of(TAINT, description="given, they replace the node's"))},
    ("cpu", "memory"), description="What a node offers, as `sched node add` takes it.",
    allOf=[{"if": {"properties": {"gpu": {"not": {"type": "null"}}}, "required": ["gpu"]},
            "then": {"properties": {"resources": {"anyOf": [{"type": "null"}, {"not": {"required": ["gpu"]}}]}}}}])


if __name__ == "__main__":  # python -m scheduler.model.job_schema > docs/job-spec.schema.json
    import json

    print(json.dumps(job_spec_document(), indent=2))

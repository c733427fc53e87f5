"""The job spec's JSON Schema (scheduler/model/job_schema.py) against the parser that
reads specs: on random specs, drawn field by field from values each side of every bound,
what the parser takes the schema takes, what the schema refuses the parser refuses, and
any other refusal is one of the checks the schema names as the server's. The same for a
node's description. The published file is what the code makes, and names every field
docs/job-spec.md lists. Pure: no Redis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.model import job_schema, parse_job
from scheduler.model.errors import SpecError
from scheduler.tools.api.nodes import node_from_body

ROOT = Path(__file__).resolve().parent.parent
JOB = jsonschema_rs.validator_for(job_schema.JOB_SPEC)
NODE = jsonschema_rs.validator_for(job_schema.NODE_SPEC)
SERVER_ONLY = [fragment for fragments in job_schema.SERVER_CHECKS.values() for fragment in fragments]


def of(*values):
    return st.sampled_from(values)


def block(always: dict | None = None, /, **optional) -> st.SearchStrategy:
    """A mapping with the fields ``always`` and some of the others, each drawn from its values."""
    return st.fixed_dictionaries(always or {}, optional=optional)


def some(strategy, most: int = 3):
    return st.lists(strategy, max_size=most)


CPU = of(0, 0.5, 2, 1_000_000, -1, "500m", "1.5", " 2 ", "250 m", "half", "5mm", True, None, "2e3")
MEMORY = of(0, 268435456, 2**50, 2**50 + 1, -1, "256MiB", "1Gi", "2G", "512", "256m", "256mi", "1GI", "10GB", "lots",
            True, None, "256Mb", "1.5Gi")
UNITS = of(0, 1, 2.0, 2.5, "2", "2.0", " 3 ", 1_000_000, 1_000_001, -1, "x", None, True, "9999999")
RESOURCES = st.one_of(
    block(cpu=CPU, memory=MEMORY, gpu=UNITS, fpga=UNITS, **{"nvidia-gpu": UNITS, "GPU": UNITS, "cpus": UNITS,
                                                             "mem": UNITS, "ram": CPU, "memroy": MEMORY,
                                                             "9gpu": UNITS, "a" * 32: UNITS, "b" * 33: UNITS}),
    of(None, "x", []))
CONSTRAINT = of("node.labels.zone==eu-1", "node.labels.zone == eu-1", "node.platform.os!=windows",
                "node.labels.tier in web,edge", "node.labels.tier in ,", "node.labels.tier in",
                "engine.labels.cores >= 8", "node.hostname regexp ^api-[0-9]+$", "node.hostname regexp [",
                "node.labels.m is_not_set", "node.labels.m is_set x", "node.labels.k version >= 5.10, < 6",
                "node.labels.k version >= 1.x", "node.labels.a semver >= 1.6.0-beta1", "node.labels.a semver ~> 1.0",
                "node.labels.f set_contains avx2,sse4", "node.labels.f set_contains",
                "node.labels.f set_contains_any a", "node.labels.r distinct_property",
                "node.labels.r distinct_property 2", "node.labels.r distinct_property 0",
                "node.labels.r distinct_property two", "node.labels.r distinct_property 1000001", "foo==bar",
                "node.labels.zone=eu-1", "==eu-1", "", "  ", 7, "node.labels.a b==1", "node.labels.zone==",
                "node.id==n1", "node.labels.a==x in y", "node.labels.a in ==x", "node.labels.a is_set ==x",
                "node.labels.$==1", " node.labels.zone<x ", "node.role in  a , b")
ATTRIBUTE = of("node.labels.zone", " node.hostname ", "zone", 3, "node.labels.a b", "engine.labels.x/y")
TARGETS = of(None, {"eu-1": 70, "eu-2": 30}, {"eu-1": 70, "eu-2": 40}, {}, {"a": 170}, {"a": 50.0}, {"a": 1.5}, "x")
PREFERENCE = st.one_of(block({"spread": ATTRIBUTE}, targets=TARGETS), of({"zone": 1}, "x", {"spread": 1}))
RUN = st.one_of(block(func=of("m.mod:f", "main", "a.b:c_1", 3), args=of([], [1], "x"), kwargs=of({}, {"a": 1}, []),
                      command=of(["sleep", "1"], [], ["a", 2], ["a", True], "sleep"),
                      timeout=of(1, 0.5, 0, -1, None, True),
                      env=of({"LEVEL": "debug"}, {"A": 1}, {"1X": "a"}, {"SCHED_X": "a"}, {"A": True}, [],
                             {"a_b": "x"}),
                      shell=of("x")),
                of(None, "x"))
SECONDS = of(0, 5, 10, 300, 600, 86_400, 86_401, -1, 0.5, True)
UPDATE = st.one_of(block(max_parallel=of(1, 2, 0, 2.0, 1_000_001), min_healthy_time=SECONDS,
                         healthy_deadline=SECONDS, progress_deadline=SECONDS,
                         order=of("stop-first", "start-first", "x", None), canary=of(0, 1, -1, 1.0),
                         auto_promote=of(True, False, "yes"), auto_revert=of(True, False), delay=SECONDS,
                         max_failure_ratio=of(0, 0.5, 1, 1.5), extra=of(1)),
                   of(None, "x"))
HEALTH = st.one_of(block(command=of(["true"], [], "true", None),
                         http=of({"port": 8080}, {"port": 8080, "path": "/h"}, {"port": 0}, {"path": "/"},
                                 {"port": 80, "path": "h"}, {"port": 80, "path": "/a b"}, {"port": 80, "x": 1},
                                 {"port": 80.0, "path": None}),
                         tcp=of({"port": 80}, {"port": 70000}, {}), interval=of(1, 0, 0.5), timeout=of(1, 0),
                         failures=of(3, 0, 3.0), grace=of(0, 5, -1)),
                   of(None, "x"))
DISCONNECT = of(None, {}, {"on_loss": "freeze"}, {"on_loss": "stop", "stop_after": "never"},
                {"on_loss": "run", "stop_after": 30}, {"stop_after": "never"}, {"stop_after": 0},
                {"stop_after": 86_401}, {"on_loss": "pause"}, {"x": 1}, "freeze", {"on_loss": None},
                {"on_loss": "stop", "stop_after": 600})
TTL = of(None, 0, 3600, 1.5, 1.0, "1h", "90s", " 7d ", "1500ms", "2000ms", "1.5s", "soon", -1, 315_360_000,
         315_360_001, "99999d", True)
LABELS = of(None, {}, {"app": "db"}, {"app": 1}, {"app": True}, {"a b": "x"}, {"tier/x.y-z": "v"}, ["app=db"], "x")
TOLERATION = st.one_of(block(key=of("dedicated", "", "a b", None), operator=of("Equal", "Exists", "In", None),
                             value=of("gpu", "", 0, None, True), effect=of("NoSchedule", "NoExecute",
                                                                           "PreferNoSchedule", "", None,
                                                                           "NoScheduled"),
                             toleration_seconds=of(0, 300, 300.0, -1, 31_536_001, None, 1.5), values=of(1)),
                       of("x"))
AFFINITY = st.one_of(block({"attribute": ATTRIBUTE},
                           operator=of("==", "=", "!=", "in", "regexp", "is_set", "version", "distinct_property",
                                       "foo", None, "<", "set_contains"),
                           value=of("eu-1", "", ">= 6", "[", 3, True, "=5", ","),
                           weight=of(50, -80, 0, 101, 1.5, 2.0, None, True), target=of(1)),
                     of({"operator": "=="}, "x"))
MATCH = of(None, {}, {"app": "web"}, {"a b": "x"}, "x", {"app": 1})
EXPRESSIONS = of(None, [], [{"key": "tier", "operator": "In", "values": ["web"]}],
                 [{"key": "tier", "operator": "NotIn", "values": ["web"]}], [{"key": "tier", "operator": "Exists"}],
                 [{"key": "tier", "operator": "DoesNotExist", "values": ["x"]}], [{"key": "tier", "operator": "In"}],
                 [{"operator": "Exists"}], [{"key": "tier", "operator": "Exists", "values": []}], "x",
                 [{"key": "tier", "operator": "Exists", "values": {}}], [{"key": "t", "operator": "In", "values": [],
                                                                          "x": 1}])
SPREAD = st.one_of(block({"attribute": ATTRIBUTE}, max_skew=of(1, 0, 2.0, 1_000_001),
                         when_unsatisfiable=of("DoNotSchedule", "ScheduleAnyway", "Never", None),
                         min_domains=of(1, 3, 0, 10_001, None), match=MATCH, match_expressions=EXPRESSIONS,
                         topology_key=of(1)),
                   of("x", {"max_skew": 1}))
JOB_AFFINITY = st.one_of(block(match=MATCH, match_expressions=EXPRESSIONS, attribute=ATTRIBUTE,
                               required=of(True, False, None, "yes"), weight=of(1, 100, 0, 101, None, 50.0),
                               x=of(1)),
                         of("x"))
PERIODIC = st.one_of(block(cron=of("0 2 * * *", "@daily", "@every 10m", "61 * * * *", "* * *", "@often", 5),
                           time_zone=of("UTC", "Europe/Berlin", "Europe/Berln", "", None),
                           overlap=of("allow", "forbid", "queue"),
                           starting_deadline=of(60, 0, 604_800, 604_801),
                           history=of({"completed": 3, "failed": 1}, {"completed": -1}, {}, {"x": 1}, None,
                                      {"failed": 2.0}),
                           suspend=of(False, True, "no"), crons=of(1)),
                     of(None, "x"))
PARAMETERIZED = st.one_of(block(payload=of("optional", "required", "forbidden", "maybe", None),
                                meta_required=of(["customer"], ["a-b"], ["x", "x"], None, "customer"),
                                meta_optional=of(["region"], ["customer"], []), extra=of(1)),
                          of(None, "x"))
AFTER = of(None, [], ["extract"], [{"job": "extract", "state": "failed"}], [{"job": "extract", "state": "done"}],
           ["extract", "extract"], ["web"], ["a b"], [{"job": "x", "y": 1}], "extract", ["render/dispatch-1-0123abcd"],
           [{"state": "ended"}], [{"job": "x", "state": None}])
RESCHEDULE = st.one_of(block(delay=of(5, -1, 86_401, 0), delay_function=of("constant", "exponential", "linear"),
                             max_delay=of(300, 1, 86_400), attempts=of(10, -1, 1001, 2.0),
                             interval=of(0, 3600, -1), unlimited=of(True, False, "no"), tries=of(1)),
                       of(None, "x"))
DISRUPTION_BUDGET = of(None, {"max_unavailable": 1}, {"max_unavailable": "25%"}, {"min_available": 3},
                       {"min_available": "75%"}, {"min_available": 2.0}, {"max_unavailable": 1.5},
                       {"max_unavailable": -1}, {"min_available": "150%"}, {"min_available": "3"},
                       {"max_unavailable": 1, "min_available": 1}, {}, {"maxUnavailable": 1}, "x",
                       {"min_available": " 075% "}, {"max_unavailable": True}, {"min_available": "100%"},
                       {"max_unavailable": 1_000_001}, {"min_available": "0100%"}, {"max_unavailable": "0%"})
META = of(None, {"customer": "acme"}, {"a-b": "x"}, {"k": "x" * 1025}, {"k": "x" * 1024}, {"k": 3}, {"k": True}, "x",
          {})

FIELDS = dict(
    id=of("web", "a-1_b", "x" * 63, "x" * 64, "-web", "web.1", "nightly/periodic-1700000000",
          "render/dispatch-1-0123abcd", "", None, 7, " web"),
    type=of("service", "batch", "global", "sysbatch", "daemon", None),
    priority=of(0, 50, 1000, 1001, -1, 2.0, 2.5, True, "50", None),
    replicas=of(0, 1, 3, 3.0, 1_000_000, 1_000_001, -1, 1.5, False, "3", None),
    resources=RESOURCES, constraints=st.one_of(some(CONSTRAINT), of(None, "x")),
    preferences=st.one_of(some(PREFERENCE), of(None, "x")),
    ports=of(None, [], [8080], [8080, 8080], [0], [65_536], [80.0, 81], [True], "80", [80, 80.0]),
    plugins=of(None, [], ["network"], ["a b"], "network", [1]), strategy=of("spread", "binpack", "pack", None),
    max_per_node=of(0, 2, -1, 1_000_001), run=RUN, preemptible=of(True, False, "yes", None),
    preempt=of("lower", "never", "always"), max_retries=of(0, 3, 1000, 1001, -1),
    restart_delay=of(0, 1.0, 3600, 3601, -1, True, "1"), gang=of(True, False, None, "yes"),
    min_available=of(0, 1, 2, 1_000_001, -1, 2.0), tenant=of("default", "team-a", "team a", "", None, "a" * 64,
                                                             "a" * 65),
    update=UPDATE, health=HEALTH, disconnect=DISCONNECT, ttl_after_finished=TTL, labels=LABELS,
    tolerations=st.one_of(some(TOLERATION), of(None, "x")), affinities=st.one_of(some(AFFINITY), of(None, "x")),
    topology_spread=st.one_of(some(SPREAD, 2), of(None, "x")),
    job_affinity=st.one_of(some(JOB_AFFINITY, 2), of(None, "x")),
    job_anti_affinity=st.one_of(some(JOB_AFFINITY, 2), of(None, "x")), periodic=PERIODIC,
    parameterized=PARAMETERIZED, after=AFTER, parallelism=of(1, 50, 0, 1_000_001, None, 5.0),
    deadline=of(3600, 0, 0.5, 2_592_000, 2_592_001, None, True), reschedule=RESCHEDULE, meta=META,
    disruption_budget=DISRUPTION_BUDGET,
    colour=of("red"))
SPECS = block(**FIELDS)


def agree(validator, parse, value) -> tuple[bool, bool]:
    """(schema takes it, parser takes it); a refusal the schema does not explain must be
    one of the server's own checks."""
    takes = validator.is_valid(value)
    try:
        parse(value)
    except SpecError as exc:
        if takes:
            assert any(fragment in str(exc) for fragment in SERVER_ONLY), (
                f"the schema takes what the parser refuses, and that is no server check: {value!r}: {exc}")
        return takes, False
    assert takes, f"the parser takes what the schema refuses: {value!r}: {list(validator.iter_errors(value))[:2]}"
    return takes, True


@pytest.mark.slow
@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPECS)
def test_the_schema_and_the_parser_agree_on_random_specs(spec):
    agree(JOB, parse_job, spec)


@pytest.mark.slow
@settings(max_examples=700, deadline=None)
@given(st.one_of([st.fixed_dictionaries({name: values}) for name, values in FIELDS.items()]))
def test_the_schema_and_the_parser_agree_field_by_field(spec):
    agree(JOB, parse_job, spec)


# Fields whose values matter together, drawn so that more specs are valid.
@pytest.mark.slow
@settings(max_examples=700, deadline=None)
@given(block({"type": of("service", "batch", "global", "sysbatch")}, replicas=of(0, 2, 3.0), gang=of(True, False),
             min_available=of(0, 1, 2, 4), parallelism=of(1, 2, 4), deadline=of(60, 0.5), update=UPDATE,
             periodic=of({"cron": "@daily"}, None), parameterized=of({"payload": "required"}, None),
             tolerations=some(TOLERATION, 2), topology_spread=some(SPREAD, 1), job_affinity=some(JOB_AFFINITY, 1),
             affinities=some(AFFINITY, 1), disconnect=DISCONNECT, health=HEALTH, reschedule=RESCHEDULE,
             disruption_budget=DISRUPTION_BUDGET))
def test_the_schema_and_the_parser_agree_where_fields_meet(spec):
    agree(JOB, parse_job, spec)


def test_the_schema_takes_the_docs_examples_and_refuses_what_they_refuse():
    doc = (ROOT / "docs" / "job-spec.md").read_text()
    examples = [json.loads(block) for block in re.findall(r"```json\n(\{.*?\})\n```", doc, re.S)]
    assert len(examples) >= 2
    for example in examples:
        assert agree(JOB, parse_job, example) == (True, True), example
    assert agree(JOB, parse_job, {"id": "web", "replica": 3}) == (False, False)
    assert agree(JOB, parse_job, {"id": "web", "type": "global", "replicas": 3}) == (False, False)
    assert agree(JOB, parse_job, {"id": "w", "replicas": 2, "min_available": 3}) == (True, False)  # a server check


NODE_BODIES = block(
    {"cpu": CPU, "memory": MEMORY}, gpu=UNITS, resources=st.one_of(block(gpu=UNITS, fpga=UNITS, cpus=UNITS),
                                                                  of(None, "x")),
    labels=of(None, {"zone": "a"}, ["zone=a", " rack = 1"], ["zone"], ["=a"], {"a b": 1}, "zone=a", {"z": True}),
    engine_labels=of(None, {"cores": 8}, ["kernel=6.1"]), os=of("linux", "", "win dows", None, "a" * 64),
    arch=of("amd64", "x86_64"), role=of("worker", "edge", 3),
    plugins=of(None, ["network"], ["a b"]),
    taints=of(None, [], ["dedicated=gpu:NoSchedule"], [" spot:PreferNoSchedule "], ["gpu"], ["a=b:Never"],
              ["a b:NoSchedule"], ["k=v v:NoExecute"], "a:NoSchedule"),
    extra=of(1))


@pytest.mark.slow
@settings(max_examples=700, deadline=None)
@given(NODE_BODIES | block(cpu=CPU, memory=MEMORY))
def test_the_node_schema_and_registering_agree_on_random_bodies(body):
    agree(NODE, lambda value: node_from_body("n1", value), body)


def test_the_published_schema_is_what_the_code_makes_and_names_every_documented_field():
    published = json.loads((ROOT / "docs" / "job-spec.schema.json").read_text())
    assert published == job_schema.job_spec_document(), \
        "run: python -m scheduler.model.job_schema > docs/job-spec.schema.json"
    table = (ROOT / "docs" / "job-spec.md").read_text().split("## Fields", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert documented == set(published["properties"]) == set(parse_job.__globals__["_JOB_FIELDS"])

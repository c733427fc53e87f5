"""Parsing what people write: quantities, node flags and job specs (constraints: test_constraints.py), and
specs as stored. No Redis."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from scheduler.model.disconnect import FREEZE, RUN, STOP, Disconnect
from scheduler.model.errors import SpecError
from scheduler.model import make_node, parse_job, parse_labels
from scheduler.state.jobs import parse_stored
from scheduler.model.quantities import (MAX_BYTES, format_memory_exact, format_quantity, parse_cpu, parse_memory,
                                        parse_resources, parse_units)

MiB, GiB = 2**20, 2**30


# ----------------------------------------------------------------------------- quantities
@pytest.mark.parametrize("written, millicores", [
    (0.5, 500),
    ("0.5", 500),
    ("500m", 500),
    ("500 m", 500),
    (2, 2000),
    ("2", 2000),
    (" 1.5 ", 1500),
    (".25", 250),
    ("1m", 1),
    (0, 0),
    ("1500m", 1500),
])
def test_cpu_quantities(written, millicores):
    assert parse_cpu(written) == millicores


@pytest.mark.parametrize("written, size", [
    ("256MiB", 256 * MiB),
    ("256Mi", 256 * MiB),
    ("1Gi", GiB),
    ("1GiB", GiB),
    ("1.5Gi", GiB + GiB // 2),
    ("2G", 2 * 10**9),
    ("2GB", 2 * 10**9),
    ("512Ki", 512 * 1024),
    ("1 Gi", GiB),
    (1024, 1024),
    ("1024", 1024),
    ("1Ti", 2**40),
    ("1Pi", MAX_BYTES),  # the upper bound itself is accepted
])
def test_memory_quantities(written, size):
    assert parse_memory(written) == size


@pytest.mark.parametrize("parse, value", [
    (parse_cpu, "-1"),
    (parse_cpu, -1),
    (parse_cpu, -0.5),
    (parse_cpu, "lots"),
    (parse_cpu, ""),
    (parse_cpu, "500mm"),
    (parse_cpu, "1e3"),
    (parse_cpu, "1.2.3"),
    (parse_cpu, True),
    (parse_cpu, None),
    (parse_cpu, [1]),
    (parse_cpu, float("nan")),
    (parse_cpu, float("inf")),
    (parse_cpu, 10**7),          # ten million cores: a typo, not a machine
    (parse_memory, "-256MiB"),
    (parse_memory, -1),
    (parse_memory, "8XB"),
    (parse_memory, "big"),
    (parse_memory, "1 G i"),
    (parse_memory, "2Pi"),       # beyond a pebibyte
    (parse_memory, 2**51),
    (parse_memory, False),
    (parse_units, 1.5),
    (parse_units, "1.5"),
    (parse_units, -2),
    (parse_units, "two"),
    (parse_units, 10**7),
])
def test_bad_quantities_are_spec_errors(parse, value):
    with pytest.raises(SpecError) as info:
        parse(value, "x")
    assert str(info.value).startswith("x")


def test_units_accept_whole_numbers_and_digit_strings():
    assert parse_units(2, "gpu") == 2
    assert parse_units("3", "gpu") == 3
    assert parse_units(4.0, "gpu") == 4


def test_parse_resources_dispatches_by_name():
    assert parse_resources({"cpu": "250m", "memory": "1Gi", "gpu": 1}) == {"cpu": 250, "memory": GiB, "gpu": 1}
    assert parse_resources(None) == {}


@pytest.mark.parametrize("raw", [
    ["cpu", 1],
    "cpu=1",
    {"CPU": 1},
    {"1cpu": 1},
    {"": 1},
    {"cpu": "abc"},
    {"gpu": -1},
])
def test_parse_resources_rejects(raw):
    with pytest.raises(SpecError):
        parse_resources(raw)


@pytest.mark.parametrize("name, amount, text", [
    ("cpu", 500, "500m"),
    ("cpu", 2000, "2"),
    ("memory", 256 * MiB, "256Mi"),
    ("memory", 8 * GiB, "8Gi"),
    ("memory", 1000, "1000"),
    ("gpu", 3, "3"),
])
def test_format_quantity(name, amount, text):
    assert format_quantity(name, amount) == text


@pytest.mark.parametrize("amount, shown", [
    (512 * MiB, "512Mi"), (1536 * MiB, "1536Mi"), (8 * GiB, "8Gi"), (2**50, "1Pi"), (10**9, "1G"),
    (1500 * 10**6, "1500M"), (64 * 1000, "64k"), (1024, "1Ki"), (1000 * MiB + 1, 1000 * MiB + 1), (0, 0), (7, 7),
])
def test_memory_is_shown_exactly_as_people_write_it(amount, shown):
    assert format_memory_exact(amount) == shown
    assert parse_memory(shown) == amount  # the text is the same amount when read back


def test_memory_shown_exactly_reads_back_for_any_amount():
    for amount in (1, 999, 4096, 3 * 10**6, 5 * 2**30 + 2**20, 123_456_789, MAX_BYTES):
        assert parse_memory(format_memory_exact(amount)) == amount, amount


# ----------------------------------------------------------------------------- nodes
def test_make_node_parses_flags():
    n = make_node("n1", cpu="4", memory="8GiB", resources={"gpu": "2"}, labels=["zone=eu-1", "rack = r2"],
                  plugins=["network", "network", "volume"])
    assert n.capacity == {"cpu": 4000, "memory": 8 * GiB, "gpu": 2}
    assert n.labels == {"zone": "eu-1", "rack": "r2"}
    assert n.plugins == frozenset({"network", "volume"})
    assert (n.availability, n.status, n.hostname) == ("active", "ready", "n1")


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "bad name"}, "node name"),
    ({"name": ""}, "node name"),
    ({"cpu": None}, "needs a cpu"),
    ({"memory": None}, "needs a memory"),
    ({"cpu": "-1"}, "cpu"),
    ({"memory": "lots"}, "memory"),
    ({"labels": ["zone"]}, "key=value"),
    ({"labels": ["bad key=x"]}, "not valid"),
    ({"os": "linux os"}, "os"),
    ({"plugins": ["bad plugin"]}, "plugin"),
])
def test_make_node_rejects(kwargs, match):
    args = {"name": "n1", "cpu": "1", "memory": "1Gi", **kwargs}
    with pytest.raises(SpecError, match=match):
        make_node(args.pop("name"), **args)


def test_parse_labels_forms():
    assert parse_labels({"zone": "eu-1", "n": 3}) == {"zone": "eu-1", "n": "3"}
    assert parse_labels(["a=b=c"]) == {"a": "b=c"}
    assert parse_labels(None) == {}
    with pytest.raises(SpecError):
        parse_labels({"zone": True})
    with pytest.raises(SpecError):
        parse_labels("zone=eu-1")


# ----------------------------------------------------------------------------- job specs
def test_parse_job_defaults_and_normalised_form():
    spec = parse_job({"id": "web", "resources": {"cpu": 0.5, "memory": "256MiB"}})
    assert (spec.id, spec.type, spec.priority, spec.replicas, spec.strategy) == ("web", "service", 50, 1, "spread")
    assert spec.resources == {"cpu": 500, "memory": 256 * MiB}
    assert spec.raw["resources"] == {"cpu": "500m", "memory": 256 * MiB}
    # The normalised form parses back to the same spec (the store relies on this).
    again = parse_job(spec.raw)
    assert again.raw == spec.raw
    assert again.resources == spec.resources


@pytest.mark.parametrize("raw", [
    {"id": "svc"},
    {"id": "b", "type": "batch", "replicas": 0, "resources": {"cpu": "1500m", "memory": "1Gi", "gpu": 2}},
    {"id": "g", "type": "global", "constraints": ["node.labels.zone in eu-1,eu-2"], "ports": [80]},
    {"id": "full", "priority": 0, "replicas": 7, "preferences": [{"spread": "node.labels.rack"}],
     "plugins": ["network"], "strategy": "binpack", "max_per_node": 1, "run": {"func": "pkg.mod:fn", "args": [1]},
     "preemptible": False, "preempt": "never", "max_retries": 0, "restart_delay": 0},
])
def test_stored_form_parses_back_to_itself(raw):
    """Redis keeps ``spec.raw``; workers and agents parse it again, so it must round-trip."""
    spec = parse_job(raw)
    again = parse_job(spec.raw)
    assert again.raw == spec.raw
    assert (again.type, again.replicas, again.resources, again.ports) == (spec.type, spec.replicas,
                                                                           spec.resources, spec.ports)
    assert [c.text for c in again.constraints] == [c.text for c in spec.constraints]


@pytest.mark.parametrize("disconnect, on_loss, stop_after, stored", [
    (None, "freeze", None, None),
    ({"on_loss": "freeze"}, "freeze", None, None),
    ({"on_loss": "stop"}, "stop", None, {"on_loss": "stop"}),
    ({"on_loss": "run"}, "run", None, {"on_loss": "run"}),
    ({"on_loss": "freeze", "stop_after": 600}, "freeze", 600.0, {"on_loss": "freeze", "stop_after": 600.0}),
    ({"on_loss": "stop", "stop_after": 1.5}, "stop", 1.5, {"on_loss": "stop", "stop_after": 1.5}),
    ({"on_loss": "run", "stop_after": 30}, "run", 30.0, {"stop_after": 30.0}),
    # Specs written before on_loss existed keep their meaning (and their stored form): run until then.
    ({"stop_after": 30}, "run", 30.0, {"stop_after": 30.0}),
    ({"stop_after": 0.5}, "run", 0.5, {"stop_after": 0.5}),
    ({"stop_after": "never"}, "run", math.inf, {"stop_after": "never"}),
])
def test_disconnect_parses_and_round_trips(disconnect, on_loss, stop_after, stored):
    raw = {"id": "web"} if disconnect is None else {"id": "web", "disconnect": disconnect}
    spec = parse_job(raw)
    assert (spec.disconnect.on_loss, spec.disconnect.stop_after) == (on_loss, stop_after)
    assert spec.raw.get("disconnect") == stored
    assert parse_job(spec.raw).disconnect == spec.disconnect
    assert spec.with_id("other").disconnect == spec.disconnect


@pytest.mark.parametrize("disconnect, says", [
    ({}, ""), ({"stop_after": 0}, ", with a number of seconds above 0 and at most 86400, not 0."),
    ({"stop_after": -1}, ", with a number"), ({"stop_after": True}, ", with a number"),
    ({"stop_after": "soon"}, ", with a number"), ({"stop_after": 86_401}, ", with a number"),
    ({"after": 3}, "."), ("never", "."), (30, "."),
    ({"on_loss": "pause"}, "; on_loss 'pause' is not one of freeze, stop, run."),
    ({"on_loss": True}, "; on_loss True is not one of"),
])
def test_disconnect_refuses_what_it_does_not_know_in_one_sentence(disconnect, says):
    with pytest.raises(SpecError) as raised:
        parse_job({"id": "web", "disconnect": disconnect})
    message = str(raised.value)
    assert message.startswith("job web: disconnect must be {on_loss: freeze | stop | run, "
                              "stop_after: <seconds> | never}" + says), message


def test_disconnect_refuses_a_stop_that_never_comes():
    with pytest.raises(SpecError, match=r"^job web: disconnect has on_loss: stop with stop_after: never; a run "
                                        r"that is never stopped is on_loss: run\.$"):
        parse_job({"id": "web", "disconnect": {"on_loss": "stop", "stop_after": "never"}})


@settings(max_examples=300, deadline=None)
@given(on_loss=st.sampled_from(["freeze", "stop", "run"]),
       stop_after=st.one_of(st.none(), st.just(math.inf), st.floats(0.01, 100)),
       ttl=st.floats(0.1, 30), times=st.lists(st.floats(0, 200), min_size=2, max_size=8))
def test_a_run_goes_from_running_to_frozen_to_stopped_and_never_back(on_loss, stop_after, ttl, times):
    """What a run does as its agent's heartbeat ages: it runs within a TTL of the last
    renewal, is frozen only with on_loss freeze, is stopped exactly past stop_after (by
    default one TTL for stop, never otherwise), and never goes back as the age grows."""
    if on_loss == "stop" and stop_after == math.inf:
        return
    disconnect = Disconnect(on_loss, stop_after)
    limit = stop_after if stop_after is not None else (ttl if on_loss == "stop" else math.inf)
    order = {RUN: 0, FREEZE: 1, STOP: 2}
    seen = []
    for since in sorted(times):
        action = disconnect.action(since, ttl)
        assert (action == STOP) == (since > limit)
        assert action != FREEZE or (on_loss == "freeze" and ttl < since <= limit)
        if since <= ttl and since <= limit:
            assert action == RUN
        seen.append(order[action])
    assert seen == sorted(seen)
    assert disconnect.action(None, ttl) == disconnect.action(5.0, None) == RUN  # nothing known yet: run


def test_parse_job_full_spec():
    spec = parse_job({
        "id": "web", "type": "batch", "priority": 900, "replicas": 3,
        "resources": {"cpu": "250m", "memory": "1Gi", "gpu": 1},
        "constraints": ["node.labels.zone==eu-1", "node.platform.os!=windows"],
        "preferences": [{"spread": "node.labels.zone"}], "ports": [8080, 443], "plugins": ["network"],
        "strategy": "binpack", "max_per_node": 2, "run": {"command": ["sleep", 1]},
    })
    assert spec.type == "batch" and spec.priority == 900 and spec.replicas == 3
    assert [c.text for c in spec.constraints] == ["node.labels.zone==eu-1", "node.platform.os!=windows"]
    assert [p.spread for p in spec.preferences] == ["node.labels.zone"]
    assert spec.ports == (443, 8080)
    assert spec.run == {"command": ["sleep", "1"]}
    assert spec.max_per_node == 2 and spec.strategy == "binpack"


def test_job_without_id_gets_a_fresh_one():
    a, b = parse_job({}), parse_job({})
    assert a.id.startswith("job-") and a.id != b.id


def test_global_job_has_no_replicas():
    assert parse_job({"id": "g", "type": "global"}).replicas == 0


@pytest.mark.parametrize("raw, match", [
    ([1, 2], "must be a mapping"),
    ("web", "must be a mapping"),
    (None, "must be a mapping"),
    ({"id": "web", "replica": 3}, "unknown field 'replica'"),
    ({"id": "bad id"}, "job id"),
    ({"id": 7}, "job id"),
    ({"id": "web", "type": "cron"}, "type 'cron'"),
    ({"id": "web", "replicas": -1}, "replicas must be between"),
    ({"id": "web", "replicas": 2.5}, "replicas must be a whole number"),
    ({"id": "web", "replicas": True}, "replicas must be a whole number"),
    ({"id": "web", "replicas": "3"}, "replicas must be a whole number"),
    ({"id": "web", "priority": 1001}, "priority must be between"),
    ({"id": "web", "priority": -1}, "priority must be between"),
    ({"id": "web", "resources": {"cpu": -1}}, "must not be negative"),
    ({"id": "web", "resources": {"cpu": "fast"}}, "not a cpu quantity"),
    ({"id": "web", "resources": {"memory": "1Ei"}}, "not a memory quantity"),
    ({"id": "web", "resources": {"cpu": 10**7}}, "larger than any machine"),
    ({"id": "web", "resources": [1]}, "must be a mapping"),
    ({"id": "web", "constraints": ["node.labels.zone"]}, "no operator"),
    ({"id": "web", "constraints": ["node.colour==red"]}, "not known"),
    ({"id": "web", "constraints": "node.labels.zone==eu-1"}, "must be a list"),
    ({"id": "web", "preferences": [{"spread": "node.colour"}]}, "not known"),
    ({"id": "web", "preferences": [{"pack": "node.labels.zone"}]}, "preference"),
    ({"id": "web", "ports": [0]}, "port 0"),
    ({"id": "web", "ports": [70000]}, "port 70000"),
    ({"id": "web", "ports": [80, 80]}, "twice"),
    ({"id": "web", "ports": 80}, "must be a list"),
    ({"id": "web", "strategy": "random"}, "strategy"),
    ({"id": "web", "max_per_node": -1}, "max_per_node"),
    ({"id": "web", "run": {"func": "not a func"}}, "run.func"),
    ({"id": "web", "run": {"func": "a:b", "command": ["x"]}}, "exactly one"),
    ({"id": "web", "run": {"command": []}}, "run.command"),
    ({"id": "web", "run": {"command": ["x"], "shell": True}}, "unknown field 'shell'"),
    ({"id": "web", "run": {"command": ["x"], "timeout": 0}}, "timeout"),
    ({"id": "web", "run": "sleep 1"}, "run must be"),
    ({"id": "web", "plugins": "network"}, "plugins"),
    ({"id": "web", "preemptible": "yes"}, "preemptible"),
    ({"id": "web", "preempt": "always"}, "preempt"),
    ({"id": "web", "restart_delay": -1}, "restart_delay"),
    ({"id": "g", "type": "global", "replicas": 2}, "takes no replicas"),
    ({"id": "web", "resources": {"cpus": 1, "memory": "1GiB"}}, r"unknown resource 'cpus'; did you mean 'cpu'\?"),
    ({"id": "web", "resources": {"CPU": 1}}, r"unknown resource 'CPU'; did you mean 'cpu'\?"),
    ({"id": "web", "resources": {"cores": 2}}, "did you mean 'cpu'"),
    ({"id": "web", "resources": {"mem": "1Gi"}}, r"unknown resource 'mem'; did you mean 'memory'\?"),
    ({"id": "web", "resources": {"ram": "1Gi"}}, "did you mean 'memory'"),
    ({"id": "web", "resources": {"memory_mb": 512}}, "did you mean 'memory'"),
    ({"id": "web", "replica": 3}, r"\(did you mean 'replicas'\?\)"),
    ({"id": "web", "cpus": 1}, r"\(did you mean resources: \{cpu: \.\.\.\}\?\)"),
])
def test_bad_job_specs(raw, match):
    with pytest.raises(SpecError, match=match):
        parse_job(raw)


def test_generic_resources_are_not_taken_for_cpu_or_memory():
    spec = parse_job({"id": "web", "resources": {"cpu": 1, "memory": "1Gi", "gpu": 1, "gpus": 2, "fpga": 1,
                                                  "memory-bandwidth": 3, "disk": 4}})
    assert spec.resources == {"cpu": 1000, "memory": 2**30, "gpu": 1, "gpus": 2, "fpga": 1, "memory-bandwidth": 3,
                              "disk": 4}


def test_a_node_capacity_near_miss_is_refused_too():
    with pytest.raises(SpecError, match="node n1 capacity has an unknown resource 'vcpus'; did you mean 'cpu'"):
        make_node("n1", cpu=1, memory="1Gi", resources={"vcpus": 4})


# ----------------------------------------------------------------------------- stored specs
STORED_TEMPLATES = [
    {"replicas": 2, "resources": {"cpu": "500m", "memory": "1Gi"}},
    {"replicas": 1, "priority": 700, "resources": {"cpu": "2"}, "constraints": ["node.labels.zone==z1"],
     "preferences": [{"spread": "node.labels.zone"}], "ports": [8080], "max_per_node": 1},
    {"type": "global", "resources": {"memory": "64Mi"}, "plugins": ["gpu"], "run": {"func": "builtins:print"}},
]


@pytest.mark.parametrize("template", STORED_TEMPLATES)
def test_stored_specs_of_one_template_parse_as_in_full_each_with_its_own_id(template):
    for job_id in ("web", "web-2", "w_3"):
        text = orjson.dumps(parse_job({"id": job_id, **template}).raw).decode()
        stored, full = parse_stored(text), parse_job(orjson.loads(text))
        assert stored == full and stored.raw == full.raw
        assert stored.id == stored.raw["id"] == job_id


def test_an_invalid_stored_spec_is_refused_naming_its_own_job():
    text = orjson.dumps(parse_job({"id": "fine", "resources": {"cpu": "1"}}).raw).decode()
    parse_stored(text)
    broken = text.replace('"fine"', '"broken"').replace('"priority":50', '"priority":5000')
    with pytest.raises(SpecError, match="job broken: priority"):
        parse_stored(broken)


# ----------------------------------------------------------------------------- specs shown to people
def test_job_text_shows_memory_in_units_and_reads_back_as_the_same_spec():
    from scheduler.tools.render import job_text
    import yaml

    spec = parse_job({"id": "web", "replicas": 3, "resources": {"cpu": 0.5, "memory": "512MiB", "gpu": 1}})
    stored = orjson.loads(orjson.dumps(spec.raw))
    assert stored["resources"]["memory"] == 512 * MiB  # stored (and --json) in bytes
    text = job_text({"status": "running", "version": 2, "spec": stored})
    assert "  memory: 512Mi\n" in text and "536870912" not in text and "  cpu: 500m\n" in text
    shown = yaml.safe_load(text)
    assert (shown.pop("status"), shown.pop("version")) == ("running", 2)
    assert parse_job(shown).raw == spec.raw  # the YAML is the same spec, submitted again
    whole = parse_job({"id": "train", "resources": {"cpu": 4, "memory": "1G"}})
    text = job_text({"status": "running", "version": 1, "spec": orjson.loads(orjson.dumps(whole.raw))})
    assert "  cpu: 4\n  memory: 1G\n" in text, text
    shown = yaml.safe_load(text)
    del shown["status"], shown["version"]
    assert parse_job(shown).raw == whole.raw

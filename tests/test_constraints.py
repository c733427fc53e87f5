"""Constraint parsing and matching (SwarmKit syntax plus Nomad's operators); no Redis."""

import pytest

from scheduler.model.constraints import parse_constraint, parse_constraints
from scheduler.model.errors import SpecError
from scheduler.model import Node, make_node

GiB = 2**30

NODE = make_node(
    "n1", cpu=4, memory="8GiB", hostname="host-1", role="manager", os="linux", arch="arm64",
    labels={"zone": "eu-1", "disk": "SSD", "gen": "10", "rack": "r7"},
    engine_labels={"os": "ubuntu"},
)


@pytest.mark.parametrize("text, key, op, value", [
    ("node.labels.zone==eu-1", "node.labels.zone", "==", "eu-1"),
    ("node.labels.zone == eu-1", "node.labels.zone", "==", "eu-1"),
    ("node.labels.zone!=eu-1", "node.labels.zone", "!=", "eu-1"),
    ("node.labels.gen<=10", "node.labels.gen", "<=", "10"),
    ("node.labels.gen>=10", "node.labels.gen", ">=", "10"),
    ("node.labels.gen<10", "node.labels.gen", "<", "10"),
    ("node.labels.gen > 10", "node.labels.gen", ">", "10"),
    ("node.labels.zone in eu-1, eu-2", "node.labels.zone", "in", "eu-1, eu-2"),
    ("node.hostname regexp ^host-[0-9]+$", "node.hostname", "regexp", "^host-[0-9]+$"),
    ("node.labels.zone is_set", "node.labels.zone", "is_set", ""),
    ("engine.labels.os is_not_set", "engine.labels.os", "is_not_set", ""),
    # the value may contain operators and words of its own
    ("node.labels.url==http://x/?a=1", "node.labels.url", "==", "http://x/?a=1"),
    ("node.labels.gen<=a==b", "node.labels.gen", "<=", "a==b"),
    ("node.labels.note==fast in eu", "node.labels.note", "==", "fast in eu"),
    ("node.labels.note!=a regexp b", "node.labels.note", "!=", "a regexp b"),
    ("node.labels.zone==eu-1", "node.labels.zone", "==", "eu-1"),
    ("  node.labels.zone  ==  eu-1  ", "node.labels.zone", "==", "eu-1"),
    ("node.platform.os!=windows", "node.platform.os", "!=", "windows"),
    ("node.labels.size<=10", "node.labels.size", "<=", "10"),
    ("node.labels.size>=10", "node.labels.size", ">=", "10"),
    ("node.labels.size<10", "node.labels.size", "<", "10"),
    ("node.labels.size>10", "node.labels.size", ">", "10"),
    ("node.labels.zone in eu-1, eu-2", "node.labels.zone", "in", "eu-1, eu-2"),
    ("node.labels.zone regexp ^eu-", "node.labels.zone", "regexp", "^eu-"),
    ("node.labels.gpu is_set", "node.labels.gpu", "is_set", ""),
    ("node.labels.gpu is_not_set", "node.labels.gpu", "is_not_set", ""),
    ("engine.labels.storage==ssd", "engine.labels.storage", "==", "ssd"),
    ("node.id==n1", "node.id", "==", "n1"),
    ("node.hostname==h1", "node.hostname", "==", "h1"),
    ("node.role==manager", "node.role", "==", "manager"),
    ("node.platform.arch==arm64", "node.platform.arch", "==", "arm64"),
    ("node.labels.a==b==c", "node.labels.a", "==", "b==c"),
    # The first operator splits key from value, whatever the value holds.
    ("node.labels.desc==made in france", "node.labels.desc", "==", "made in france"),
    ("node.labels.x!=a==b", "node.labels.x", "!=", "a==b"),
    ("node.labels.x<a==b", "node.labels.x", "<", "a==b"),
    ("node.labels.note==is_set", "node.labels.note", "==", "is_set"),
])
def test_parse(text, key, op, value):
    c = parse_constraint(text)
    assert (c.key, c.op, c.value) == (key, op, value)
    assert str(c) == text.strip()
    assert c.text == text.strip()


@pytest.mark.parametrize("text, expected", [
    # SwarmKit's keys; == and != ignore case, as SwarmKit does
    ("node.id==n1", True),
    ("node.name==N1", True),
    ("node.hostname==host-1", True),
    ("node.hostname!=host-1", False),
    ("node.role==manager", True),
    ("node.role==worker", False),
    ("node.platform.os==linux", True),
    ("node.platform.arch==amd64", False),
    ("node.labels.zone==eu-1", True),
    ("node.labels.zone==EU-1", True),
    ("node.labels.zone==eu-2", False),
    ("node.labels.zone!=eu-2", True),
    ("engine.labels.os==ubuntu", True),
    ("engine.labels.os!=ubuntu", False),
    # a missing label compares as empty
    ("node.labels.missing==", True),
    ("node.labels.missing!=x", True),
    ("node.labels.missing==x", False),
    # ordering is numeric when both sides are numbers: "10" > "9" although "10" < "9" as text
    ("node.labels.gen>9", True),
    ("node.labels.gen>=10", True),
    ("node.labels.gen<10", False),
    ("node.labels.gen<=10.0", True),
    ("node.labels.gen<1e2", True),
    # otherwise by text
    ("node.labels.rack>r5", True),
    ("node.labels.rack<r5", False),
    ("node.labels.zone>=eu", True),
    # a missing label satisfies no ordering
    ("node.labels.missing<5", False),
    ("node.labels.missing>=0", False),
    # nan and inf are not numbers: they compare as text
    ("node.labels.gen<nan", True),
    ("node.labels.gen<inf", True),
    # in: a comma list, case-insensitive
    ("node.labels.zone in eu-2,eu-1", True),
    ("node.labels.zone in EU-1", True),
    ("node.labels.zone in eu-2, us-1", False),
    ("node.labels.missing in a,b", False),
    # regexp: searched, case-sensitive
    ("node.hostname regexp ^host-[0-9]$", True),
    ("node.labels.disk regexp ssd", False),
    ("node.labels.disk regexp (?i)ssd", True),
    ("node.labels.zone regexp ^us", False),
    # is_set / is_not_set
    ("node.labels.zone is_set", True),
    ("node.labels.missing is_set", False),
    ("node.labels.missing is_not_set", True),
    ("engine.labels.os is_not_set", False),
])
def test_matches(text, expected):
    assert parse_constraint(text).matches(NODE) is expected


@pytest.mark.parametrize("text, words", [
    ("node.colour==red", "not known"),
    ("labels.zone==eu", "not known"),
    ("node.labels.==eu", "invalid label name"),
    ("node.labels.zone=eu", "no operator"),
    ("node.labels.zone", "no operator"),
    ("", "non-empty"),
    ("   ", "non-empty"),
    ("==eu", "no key"),
    ("node.labels.zone is_set yes", "takes no value"),
    ("node.labels.zone in", "needs a value"),
    ("node.labels.zone in ,", "comma-separated"),
    ("node.labels.zone regexp (", "invalid regular expression"),
    ("node labels zone==eu", "invalid key"),
    ("node.labels.zone=eu-1", "no operator"),
    ("==eu-1", "no key"),
    ("node.foo==bar", "not known"),
    ("labels.zone==eu-1", "not known"),
    ("node.labels.==x", "invalid label name"),
    ("node.labels.x=<5", "invalid key"),
    ("node.labels.gpu is_set yes", "takes no value"),
    ("node.labels.zone regexp", "needs a value"),
])
def test_parse_errors(text, words):
    with pytest.raises(SpecError, match=words):
        parse_constraint(text)


def test_parse_errors_name_non_strings():
    with pytest.raises(SpecError):
        parse_constraint(None)
    with pytest.raises(SpecError, match="list of strings"):
        parse_constraints("node.labels.zone==eu-1")


def test_parse_constraints_keeps_order():
    parsed = parse_constraints(["node.labels.zone==eu-1", "node.role!=manager"])
    assert [c.text for c in parsed] == ["node.labels.zone==eu-1", "node.role!=manager"]
    assert parse_constraints(None) == ()


# ----------------------------------------------------------------------------- matching on hand-built nodes
def node(**kw) -> Node:
    defaults = {"name": "n1", "capacity": {"cpu": 1000, "memory": GiB}}
    return Node(**{**defaults, **kw})


@pytest.mark.parametrize("raw", [5, None, ["ok"], {"a": 1}])
def test_constraint_must_be_a_string(raw):
    with pytest.raises(SpecError):
        parse_constraint(raw)


def test_constraints_must_be_a_list():
    assert parse_constraints(None) == ()
    with pytest.raises(SpecError, match="must be a list"):
        parse_constraints("node.labels.zone==eu-1")


@pytest.mark.parametrize("text, labels, expected", [
    ("node.labels.zone==eu-1", {"zone": "eu-1"}, True),
    ("node.labels.zone==eu-1", {"zone": "eu-2"}, False),
    ("node.labels.zone==EU-1", {"zone": "eu-1"}, True),       # SwarmKit compares case-insensitively
    ("node.labels.zone!=eu-1", {}, True),                     # a missing label compares as empty
    ("node.labels.zone==eu-1", {}, False),
    ("node.labels.zone==", {}, True),
    ("node.labels.zone in eu-1, eu-2", {"zone": "eu-2"}, True),
    ("node.labels.zone in eu-1, eu-2", {"zone": "eu-3"}, False),
    ("node.labels.cores>8", {"cores": "16"}, True),           # numeric, not "16" < "8" as strings
    ("node.labels.cores<8", {"cores": "16"}, False),
    ("node.labels.cores>=16", {"cores": "16"}, True),
    ("node.labels.cores<=15.5", {"cores": "16"}, False),
    ("node.labels.cores<8", {}, False),                       # ordering never holds for a missing label
    ("node.labels.tier>b", {"tier": "c"}, True),              # strings order as strings
    ("node.labels.zone regexp ^eu-", {"zone": "eu-9"}, True),
    ("node.labels.zone regexp ^eu-", {"zone": "us-1"}, False),
    ("node.labels.gpu is_set", {"gpu": "a100"}, True),
    ("node.labels.gpu is_set", {}, False),
    ("node.labels.gpu is_not_set", {}, True),
])
def test_constraint_matching_labels(text, labels, expected):
    assert parse_constraint(text).matches(node(labels=labels)) is expected


def test_constraint_matching_fixed_keys():
    n = node(name="n7", os="linux", arch="arm64", role="manager", engine_labels={"disk": "ssd"})
    assert parse_constraint("node.id==n7").matches(n)
    assert parse_constraint("node.hostname==n7").matches(n)   # hostname defaults to the name
    assert parse_constraint("node.platform.os!=windows").matches(n)
    assert not parse_constraint("node.platform.arch==amd64").matches(n)
    assert parse_constraint("node.role==manager").matches(n)
    assert parse_constraint("engine.labels.disk==ssd").matches(n)
    assert not parse_constraint("node.labels.disk==ssd").matches(n)

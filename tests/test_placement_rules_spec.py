"""The new placement fields and operators as written: parsing, stored form, and one
sentence for each bad input (no Redis but for the last test, which checks nothing is
written)."""

from __future__ import annotations

import pytest

from scheduler.model import SpecError, make_node, parse_job
from scheduler.model.constraints import parse_constraint
from scheduler.model.taints import Taint, Toleration, eviction, parse_taint, taints_from_text, taints_text, untolerated
from scheduler.model.versions import version_test


# ----------------------------------------------------------------------------- go-version and SemVer 2.0
@pytest.mark.parametrize("constraint, version, holds", [
    # go-version's own cases (constraint_test.go)
    (">= 1.0, < 1.2", "1.1.5", True), ("< 1.0, < 1.2", "1.1.5", False), ("= 1.0", "1.1.5", False),
    ("= 1.0", "1.0.0", True), ("1.0", "1.0.0", True), ("~> 1.0", "2.0", False), ("~> 1.0", "1.1", True),
    ("~> 1.0.3", "1.0.4", True), ("~> 1.0.3", "1.1", False), ("~> 1.2", "1.3.0", True), ("~> 1.2.3", "1.3.0", False),
    ("> 10", "8", False),
    # pre-releases: a constraint without one never meets one; with one, only the same numbers
    ("> 1.0", "1.1-beta", False), (">= 1.0.0-beta", "1.0.0-rc1", True), (">= 1.0.0-beta", "1.1.0-rc1", False),
    ("< 1.0.0-beta", "0.9", True), (">= 2.0", "2.1.0-beta", False),
    ("> 1.0-beta1", "1.0-rc1", True), ("~> 1.0-beta1", "1.0", False), ("~> 1.0-beta1", "1.0-beta2", True),
    ("= 1.0", "v1.0", True), ("!= 4.19", "4.19.0", False), (">= 5.10", "not a version", False),
])
def test_version_follows_go_version(constraint, version, holds):
    assert version_test(constraint, strict=False)(version) is holds


@pytest.mark.parametrize("constraint, version, holds", [
    # Nomad's semver cases (helper/constraints/semver/constraints_test.go)
    (">= 1.0, < 1.2", "1.1.5", True), ("< 1.0, < 1.2", "1.1.5", False), ("= 1.0", "1.0.0", True), ("1.0", "1.0.0", True),
    ("> 10", "8", False), ("> 2.0", "2.1.0-beta", True), ("> 2.1.0-a", "2.1.0-beta", True),
    ("> 2.1.0-a", "2.1.1-beta", True), ("> 2.1.0-a", "2.1.1", True), ("> 2.1.0-a", "2.1.0", True),
    ("<= 2.1.0-a", "2.0.0", True), (">= 0.6.1", "1.3.0-beta1", True), ("> 1.0-beta1", "1.0-rc1", True),
    (">= 0.6.1", "1.3.0-beta1+ent", True), (">= 1.3.0-beta1", "1.3.0-beta1+ent", True),
    ("> 1.3.0-beta1+cgo", "1.3.0-beta1+ent", False), ("= 1.3.0-beta1+cgo", "1.3.0-beta1+ent", True),
    # SemVer 2.0 precedence: 1.0.0-alpha < -alpha.1 < -alpha.beta < -beta < -beta.2 < -beta.11 < -rc.1 < 1.0.0
    ("< 1.0.0-alpha.1", "1.0.0-alpha", True), ("< 1.0.0-alpha.beta", "1.0.0-alpha.1", True),
    ("< 1.0.0-beta", "1.0.0-alpha.beta", True), ("< 1.0.0-beta.2", "1.0.0-beta", True),
    ("< 1.0.0-beta.11", "1.0.0-beta.2", True), ("< 1.0.0-rc.1", "1.0.0-beta.11", True), ("< 1.0.0", "1.0.0-rc.1", True),
    ("> 1.0", "1.0.0.1", False),  # four numbers are no semver version
    ("> 1.0", "1.1beta", False),  # a pre-release needs its '-'
])
def test_semver_follows_semver_2(constraint, version, holds):
    assert version_test(constraint, strict=True)(version) is holds


@pytest.mark.parametrize("text", ["node.labels.kernel version >= 1.x", "node.labels.kernel semver ~> 1.0",
                                  "node.labels.kernel semver >= 1.0beta1", "node.labels.kernel version"])
def test_bad_version_constraints_are_refused_when_parsed(text):
    with pytest.raises(SpecError, match="constraint 'node.labels.kernel"):
        parse_constraint(text)


def test_set_operators_split_on_commas_and_need_every_or_any():
    node = make_node("n", cpu=1, memory="1GiB", labels={"features": "avx2, sse4,aes"})
    assert parse_constraint("node.labels.features set_contains avx2,sse4").matches(node)
    assert not parse_constraint("node.labels.features set_contains avx2,avx512").matches(node)
    assert parse_constraint("node.labels.features set_contains_any avx512, aes").matches(node)
    assert not parse_constraint("node.labels.features set_contains_any AVX2").matches(node)  # Nomad: exact


def test_distinct_property_takes_a_count_or_none():
    assert parse_constraint("node.labels.rack distinct_property").limit == 1
    assert parse_constraint("node.labels.rack distinct_property 2").limit == 2
    with pytest.raises(SpecError, match="distinct_property takes a whole number"):
        parse_constraint("node.labels.rack distinct_property two")


# ----------------------------------------------------------------------------- taints
def test_kube_toleration_matching():
    gpu = Taint("dedicated", "gpu", "NoSchedule")
    assert Toleration("dedicated", "Equal", "gpu", "NoSchedule").tolerates(gpu)
    assert Toleration("dedicated", "Equal", "gpu").tolerates(gpu)  # no effect: every effect
    assert not Toleration("dedicated", "Equal", "db").tolerates(gpu)
    assert Toleration("dedicated", "Exists").tolerates(gpu)
    assert Toleration("", "Exists").tolerates(gpu)  # no key with Exists: every taint
    assert not Toleration("dedicated", "Exists", "", "NoExecute").tolerates(gpu)
    assert untolerated((Taint("spot", "", "PreferNoSchedule"), gpu), ()) == gpu  # PreferNoSchedule never refuses


def test_taints_round_trip_through_their_text_with_the_time_of_no_execute():
    taints = (parse_taint("dedicated=gpu:NoSchedule"), parse_taint("spot:PreferNoSchedule"),
              parse_taint("gone:NoExecute", added_ms=1234))
    text = taints_text(taints)
    assert text == "dedicated=gpu:NoSchedule spot:PreferNoSchedule gone:NoExecute@1234"
    assert taints_from_text(text) == taints


def test_no_execute_evicts_at_once_or_after_toleration_seconds():
    gone = parse_taint("gone:NoExecute", added_ms=10_000)
    assert eviction((gone,), ()) == (0, gone)
    assert eviction((gone,), (Toleration("gone", "Exists", "", "NoExecute", 30),)) == (40_000, gone)
    assert eviction((gone,), (Toleration("gone", "Exists"),)) is None
    assert eviction((parse_taint("x:NoSchedule"),), ()) is None


# ----------------------------------------------------------------------------- the spec's fields
def test_a_spec_without_the_new_fields_keeps_its_stored_form():
    raw = parse_job({"id": "web"}).raw
    assert not {"labels", "tolerations", "affinities", "topology_spread", "job_affinity", "job_anti_affinity"} & set(raw)
    assert raw["preferences"] == []
    assert not parse_job({"id": "web"}).rules and not parse_job({"id": "web"}).counted


def test_every_field_parses_and_its_stored_form_parses_back_to_itself():
    raw = {"id": "db", "labels": {"app": "db", "tier": 1},
           "tolerations": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                           {"key": "gone", "operator": "Exists", "effect": "NoExecute", "toleration_seconds": 60}],
           "affinities": [{"attribute": "node.labels.zone", "value": "eu-1", "weight": 50},
                          {"attribute": "node.labels.kernel", "operator": "version", "value": ">= 5", "weight": -20}],
           "topology_spread": [{"attribute": "node.labels.zone", "max_skew": 2, "min_domains": 3},
                               {"attribute": "node.id", "when_unsatisfiable": "ScheduleAnyway",
                                "match_expressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]}],
           "job_affinity": [{"match": {"app": "web"}, "attribute": "node.hostname", "weight": 30}],
           "job_anti_affinity": [{"match": {"app": "db"}, "attribute": "node.labels.zone", "required": True}],
           "preferences": [{"spread": "node.labels.zone", "targets": {"eu-1": 70, "eu-2": 30}}],
           "constraints": ["node.labels.rack distinct_property 2"]}
    spec = parse_job(raw)
    assert spec.labels == {"app": "db", "tier": "1"}
    assert spec.tolerations[0].operator == "Equal" and spec.tolerations[1].seconds == 60
    assert spec.topology_spread[0].hard and not spec.topology_spread[1].hard
    assert spec.topology_spread[1].attribute == "node.name"  # node.id is counted as node.name
    assert spec.rules and spec.counted
    again = parse_job(spec.raw)
    assert again.raw == spec.raw


BAD = [
    ({"tolerations": [{"key": "k", "effect": "NoScheduled"}]},
     "job j: tolerations[0] effect 'NoScheduled' is not one of NoSchedule, PreferNoSchedule, NoExecute."),
    ({"tolerations": [{"operator": "Equal", "value": "x"}]},
     "job j: tolerations[0] has no key, so its operator must be Exists (it then tolerates every taint)."),
    ({"tolerations": [{"key": "k", "operator": "Exists", "value": "x"}]},
     "job j: tolerations[0]: operator Exists takes no value."),
    ({"tolerations": [{"key": "k", "effect": "NoSchedule", "toleration_seconds": 5}]},
     "job j: tolerations[0] toleration_seconds applies to effect NoExecute only."),
    ({"affinities": [{"attribute": "node.labels.zone", "value": "a", "weight": 101}]},
     "job j: affinities[0] weight must be a whole number from -100 to 100 other than 0, not 101."),
    ({"affinities": [{"attribute": "node.labels.zone", "value": "a", "weight": 0}]},
     "job j: affinities[0] weight must be a whole number from -100 to 100 other than 0, not 0."),
    ({"job_anti_affinity": [{"match": "app=db", "attribute": "node.hostname", "required": True}]},
     "job j: job_anti_affinity[0] match must be a mapping of label to value, such as {app: db}."),
    ({"job_anti_affinity": [{"match_expressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}],
                             "attribute": "node.hostname", "required": True}]},
     "job j: job_anti_affinity[0] must require some label (match, or match_expressions with In or Exists): only "
     "jobs with labels are counted, and this selector would match jobs without any."),
    ({"job_affinity": [{"match": {"app": "db"}, "attribute": "node.hostname"}]},
     "job j: job_affinity[0] needs either required: true or a weight from 1 to 100 (soft), not both."),
    ({"job_affinity": [{"match": {"app": "db"}, "required": True}]},
     "job j: job_affinity[0] needs an attribute, the topology domain such as node.hostname or node.labels.zone."),
    ({"topology_spread": [{"attribute": "node.labels.zone", "max_skew": 0}]},
     "job j: topology_spread[0] max_skew must be a whole number from 1 to 1000000, not 0."),
    ({"topology_spread": [{"attribute": "node.labels.zone", "when_unsatisfiable": "ScheduleAnyway",
                           "min_domains": 2}]},
     "job j: topology_spread[0] min_domains applies to when_unsatisfiable: DoNotSchedule only."),
    ({"topology_spread": [{"attribute": "zone"}]},
     "job j: topology_spread[0] attribute key 'zone' is not known; use one of node.id, node.name, node.hostname, "
     "node.role, node.platform.os, node.platform.arch, node.labels.<key>, engine.labels.<key>."),
    ({"preferences": [{"spread": "node.labels.zone", "targets": {"a": 70, "b": 40}}]},
     "job j: preference node.labels.zone targets sum to 110; they must sum to at most 100 (values not named share "
     "what is left)."),
    ({"labels": ["app=db"]}, "job j: labels must be a mapping of label to value, such as {app: db}."),
    # Where the text stands, as for every other field; kube's names point to ours.
    ({"constraints": ["node.labels.zone==a", "node.labels.zone=~["]},
     "job j: constraints[1] 'node.labels.zone=~[' has no operator; write key==value, key!=value, key<value, "
     "'key in a,b', 'key regexp RE', 'key is_set', 'key is_not_set', 'key version >= 1.2', "
     "'key semver >= 1.2.0', 'key set_contains a,b', 'key set_contains_any a,b' or 'key distinct_property N'."),
    ({"affinities": [{"attribute": "node.labl.zone", "value": "a"}]},
     "job j: affinities[0] key 'node.labl.zone' is not known; use one of node.id, node.name, node.hostname, "
     "node.role, node.platform.os, node.platform.arch, node.labels.<key>, engine.labels.<key>."),
    ({"topology_spread": [{"topology_key": "node.labels.zone", "max_skew": 1}]},
     "job j: topology_spread[0] has unknown field 'topology_key' (did you mean 'attribute'?); known fields are "
     "attribute, match, match_expressions, max_skew, min_domains, when_unsatisfiable."),
    ({"topology_spread": [{"attribute": "node.labels.zone", "maxSkew": 2}]},
     "job j: topology_spread[0] has unknown field 'maxSkew' (did you mean 'max_skew'?); known fields are "
     "attribute, match, match_expressions, max_skew, min_domains, when_unsatisfiable."),
    ({"affinities": [{"value": "a"}]},
     "job j: affinities[0] needs an attribute, such as {attribute: node.labels.zone, operator: '==', value: eu-1, "
     "weight: 50}."),
]


@pytest.mark.parametrize("extra, message", BAD, ids=[m.split(": ", 1)[1][:40] for _, m in BAD])
def test_bad_input_is_one_sentence(extra, message):
    with pytest.raises(SpecError) as raised:
        parse_job({"id": "j", **extra})
    assert str(raised.value) == message


def test_a_bad_spec_writes_nothing(sched, app):
    result = sched("job", "submit", "-", input='{"id": "j", "affinities": [{"attribute": "node.labels.zone", '
                                                  '"value": "a", "weight": 101}]}', ok=False)
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: job j: affinities[0] weight must be a whole number from -100 to 100 other "
                                     "than 0, not 101.")
    assert list(app.client.scan_iter(match=f"sched:{{{app.keys.namespace}}}:*")) == []

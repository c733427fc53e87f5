"""The filter pipeline: each filter alone, the order reasons are reported in, explanations,
and the split between static filters and ``misfit`` that the placer relies on. No Redis."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model import reasons
from scheduler.engine.filters import (Constraints, HostPorts, MaxPerNode, NodeReady, Platform, Plugins,
                               Resources, TaskSlots, filter_pipeline)
from scheduler.engine.fit import misfit
from scheduler.model import DOWN, DRAIN, PAUSE, make_node, parse_job


def node(name="n1", *, cpu=4, memory="8GiB", gpu=None, availability="active", status="ready",
         labels=None, plugins=None, os="linux", arch="amd64", allocated=None, ports=(), slots=0, tasks=0):
    resources = {"gpu": gpu} if gpu is not None else None
    n = make_node(name, cpu=cpu, memory=memory, resources=resources, labels=labels,
                  plugins=plugins, os=os, arch=arch)
    n.availability, n.status, n.slots, n.tasks = availability, status, slots, tasks
    n.allocated.update(allocated or {})
    n.ports.update({port: "other-task" for port in ports})
    return n


def job(**spec):
    return parse_job({"id": "web", **spec})


GIB = 2**30

# (filter, job spec, node, tasks of the job on the node, expected reason)
CASES = [
    (NodeReady, {}, node(), 0, None),
    (NodeReady, {}, node(status=DOWN), 0, reasons.NODE_DOWN),
    (NodeReady, {}, node(availability=DRAIN), 0, reasons.NODE_DRAINED),
    (NodeReady, {}, node(availability=PAUSE), 0, reasons.NODE_PAUSED),
    (Resources, {"resources": {"cpu": 4, "memory": "8GiB"}}, node(), 0, None),
    (Resources, {"resources": {"cpu": 1}}, node(allocated={"cpu": 3500}), 0, reasons.insufficient("cpu")),
    (Resources, {"resources": {"cpu": 0.5}}, node(allocated={"cpu": 3500}), 0, None),
    (Resources, {"resources": {"memory": "1GiB"}}, node(allocated={"memory": 7 * GIB + 1}), 0,
     reasons.insufficient("memory")),
    (Resources, {"resources": {"gpu": 1}}, node(), 0, reasons.insufficient("gpu")),
    (Resources, {"resources": {"gpu": 2}}, node(gpu=2), 0, None),
    (Resources, {"resources": {"gpu": 2}}, node(gpu=2, allocated={"gpu": 1}), 0, reasons.insufficient("gpu")),
    (Plugins, {"plugins": ["network", "volume"]}, node(plugins=["volume", "network", "log"]), 0, None),
    (Plugins, {"plugins": ["network", "volume"]}, node(plugins=["network"]), 0, reasons.missing_plugin("volume")),
    (Constraints, {"constraints": ["node.labels.zone==eu-1"]}, node(labels={"zone": "eu-1"}), 0, None),
    (Constraints, {"constraints": ["node.labels.zone==eu-1"]}, node(labels={"zone": "us-1"}), 0,
     reasons.constraint_not_met("node.labels.zone==eu-1")),
    (Constraints, {"constraints": ["node.labels.zone==eu-1", "node.labels.ssd is_set"]}, node(labels={"zone": "eu-1"}),
     0, reasons.constraint_not_met("node.labels.ssd is_set")),
    (Platform, {"constraints": ["node.platform.os==windows"]}, node(), 0, reasons.PLATFORM_MISMATCH),
    (Platform, {"constraints": ["node.platform.arch in arm64,amd64"]}, node(arch="arm64"), 0, None),
    (Platform, {"constraints": ["node.platform.arch!=arm64"]}, node(arch="arm64"), 0, reasons.PLATFORM_MISMATCH),
    (HostPorts, {"ports": [8080, 9090]}, node(ports=[80]), 0, None),
    (HostPorts, {"ports": [8080, 9090]}, node(ports=[9090]), 0, reasons.port_in_use(9090)),
    (MaxPerNode, {"max_per_node": 2}, node(), 1, None),
    (MaxPerNode, {"max_per_node": 2}, node(), 2, reasons.MAX_PER_NODE),
    (TaskSlots, {}, node(tasks=9), 0, None),  # no agent: no limit
    (TaskSlots, {}, node(slots=2, tasks=1), 0, None),
    (TaskSlots, {}, node(slots=2, tasks=2), 0, "node has all 2 task slots in use"),
    (TaskSlots, {}, node(slots=2, tasks=3), 0, "node has all 2 task slots in use"),  # an agent back with fewer
    (TaskSlots, {}, node(slots=1, tasks=1), 0, "node has its 1 task slot in use"),
]


@pytest.mark.parametrize("filter_class, spec, candidate, on_node, expected", CASES)
def test_each_filter_alone(filter_class, spec, candidate, on_node, expected):
    f = filter_class()
    assert f.set_task(job(**spec)) is True
    assert f.check(candidate, on_node) == expected


@pytest.mark.parametrize("filter_class, spec", [
    (Resources, {}),
    (Resources, {"resources": {"cpu": 0, "memory": 0}}),  # asking for nothing needs no room
    (Plugins, {}),
    (Constraints, {}),
    (Constraints, {"constraints": ["node.platform.os==windows"]}),  # platform ones go to Platform
    (Platform, {"constraints": ["node.labels.zone==eu-1"]}),
    (HostPorts, {}),
    (MaxPerNode, {"max_per_node": 0}),
])
def test_filters_with_nothing_to_check_drop_out(filter_class, spec):
    assert filter_class().set_task(job(**spec)) is False


def test_pipeline_keeps_only_filters_the_job_needs():
    # Readiness and task slots are the nodes' own: every job is checked for them.
    assert [f.name for f in filter_pipeline(job(), taints=False).filters] == ["ready", "slots"]
    assert [f.name for f in filter_pipeline(job()).filters] == ["ready", "taints", "slots"]  # some node may have taints
    full = filter_pipeline(job(resources={"cpu": 1}, plugins=["net"], constraints=["node.labels.a==b", "node.platform.os==linux"],
                               ports=[80], max_per_node=1))
    assert [f.name for f in full.filters] == ["ready", "resources", "plugins", "constraints", "platform", "taints", "slots",
                                              "ports", "max_per_node"]
    assert [f.name for f in full.static] == ["plugins", "constraints", "platform", "taints"]


BAD = job(resources={"cpu": 1}, plugins=["net"], constraints=["node.labels.zone==eu-1", "node.platform.os==windows"],
          ports=[80], max_per_node=1)


@pytest.mark.parametrize("candidate, on_node, expected", [
    # a node failing everything is reported under the first filter, in SwarmKit's order
    (node(status=DOWN, availability=DRAIN, allocated={"cpu": 4000}, ports=[80]), 1, reasons.NODE_DOWN),
    (node(availability=DRAIN, allocated={"cpu": 4000}, ports=[80]), 1, reasons.NODE_DRAINED),
    (node(allocated={"cpu": 4000}, ports=[80]), 1, reasons.insufficient("cpu")),
    (node(ports=[80]), 1, reasons.missing_plugin("net")),
    (node(plugins=["net"], ports=[80]), 1, reasons.constraint_not_met("node.labels.zone==eu-1")),
    (node(plugins=["net"], labels={"zone": "eu-1"}, ports=[80]), 1, reasons.PLATFORM_MISMATCH),
    # all its task slots in use: after what the node lacks or is, before what tasks hold there
    (node(allocated={"cpu": 4000}, slots=1, tasks=1), 1, reasons.insufficient("cpu")),
    (node(plugins=["net"], slots=1, tasks=1), 1, reasons.constraint_not_met("node.labels.zone==eu-1")),
    (node(plugins=["net"], labels={"zone": "eu-1"}, os="windows", ports=[80], slots=1, tasks=1), 1,
     "node has its 1 task slot in use"),
    (node(plugins=["net"], labels={"zone": "eu-1"}, os="windows", ports=[80]), 1, reasons.port_in_use(80)),
    (node(plugins=["net"], labels={"zone": "eu-1"}, os="windows"), 1, reasons.MAX_PER_NODE),
    (node(plugins=["net"], labels={"zone": "eu-1"}, os="windows"), 0, None),
])
def test_pipeline_reports_the_first_failure(candidate, on_node, expected):
    assert filter_pipeline(BAD).check(candidate, on_node) == expected


def test_explain_counts_each_node_once_under_its_first_reason():
    spec = job(resources={"cpu": 2}, constraints=["node.labels.zone==eu-1"])
    nodes = (
        [node(f"cpu{i}", labels={"zone": "eu-1"}, allocated={"cpu": 3000}) for i in range(7)]
        + [node(f"zone{i}", labels={"zone": "us-1"}) for i in range(3)]
        # drained and short of cpu and in the wrong zone: counted once, as drained
        + [node(f"drained{i}", availability=DRAIN, allocated={"cpu": 4000}) for i in range(2)]
    )
    explanation = filter_pipeline(spec).explain(nodes, {})
    assert (explanation.nodes_evaluated, explanation.available) == (12, 0)
    assert explanation.reasons == {"insufficient cpu": 7, "constraint node.labels.zone==eu-1 not met": 3,
                                   "node drained": 2}
    assert explanation.message() == (
        "0/12 nodes available: 7 insufficient cpu, 3 constraint node.labels.zone==eu-1 not met, 2 node drained.")


def test_explain_counts_available_nodes_and_uses_job_counts():
    spec = job(max_per_node=1)
    nodes = [node("a"), node("b"), node("c")]
    explanation = filter_pipeline(spec).explain(nodes, {"a": 1})
    assert (explanation.nodes_evaluated, explanation.available) == (3, 2)
    assert explanation.message() == "2/3 nodes available: 1 max_per_node reached."
    assert filter_pipeline(spec).explain([], {}).message() == "0/0 nodes available: no nodes registered."


# The placer checks static filters (cached) and misfit separately; the two must agree with the pipeline.
nodes_st = st.builds(
    node,
    name=st.sampled_from(["a", "b"]),
    cpu=st.integers(0, 4),
    memory=st.sampled_from(["0", "1GiB", "2GiB"]),
    gpu=st.none() | st.integers(0, 2),
    availability=st.sampled_from(["active", "active", PAUSE, DRAIN]),
    status=st.sampled_from(["ready", "ready", DOWN]),
    labels=st.dictionaries(st.sampled_from(["zone", "ssd"]), st.sampled_from(["eu-1", "us-1", ""]), max_size=2),
    plugins=st.lists(st.sampled_from(["net", "vol"]), unique=True),
    os=st.sampled_from(["linux", "windows"]),
    allocated=st.fixed_dictionaries({"cpu": st.integers(0, 4000)}),
    ports=st.lists(st.sampled_from([80, 443]), unique=True),
    slots=st.sampled_from([0, 0, 1, 2]),
    tasks=st.integers(0, 3),
)
jobs_st = st.builds(
    lambda cpu, gpu, constraints, plugins, ports, limit: job(
        resources={"cpu": cpu, "gpu": gpu}, constraints=constraints, plugins=plugins, ports=ports, max_per_node=limit),
    st.sampled_from([0, 0.5, 1, 3]),
    st.integers(0, 1),
    st.lists(st.sampled_from(["node.labels.zone==eu-1", "node.labels.ssd is_set", "node.platform.os!=windows"]),
             unique=True),
    st.lists(st.sampled_from(["net", "vol"]), unique=True),
    st.lists(st.sampled_from([80, 443]), unique=True),
    st.integers(0, 2),
)


@settings(max_examples=150, deadline=None)
@given(candidate=nodes_st, spec=jobs_st, on_node=st.integers(0, 3))
def test_pipeline_is_static_filters_plus_misfit(candidate, spec, on_node):
    pipeline = filter_pipeline(spec)
    split = pipeline.static_check(candidate) is None and misfit(
        candidate, spec.resources, spec.ports, spec.max_per_node, on_node) is None
    assert (pipeline.check(candidate, on_node) is None) == split


# SwarmKit's platform filter compares canonical architecture names: a node reporting
# x86_64 is amd64, aarch64 is arm64, whichever side names which.
@pytest.mark.parametrize("constraint, arch, fits", [
    ("node.platform.arch==amd64", "x86_64", True),
    ("node.platform.arch==x86_64", "amd64", True),
    ("node.platform.arch==arm64", "aarch64", True),
    ("node.platform.arch==aarch64", "arm64", True),
    ("node.platform.arch==AMD64", "X86_64", True),
    ("node.platform.arch!=amd64", "x86_64", False),
    ("node.platform.arch!=arm64", "x86_64", True),
    ("node.platform.arch in arm64,amd64", "x86_64", True),
    ("node.platform.arch in aarch64", "arm64", True),
    ("node.platform.arch==arm64", "x86_64", False),
    ("node.platform.arch==amd64", "aarch64", False),
])
def test_platform_arch_aliases_match_both_ways(constraint, arch, fits):
    flt = Platform()
    assert flt.set_task(job(constraints=[constraint]))
    assert (flt.check(node(arch=arch), 0) is None) == fits

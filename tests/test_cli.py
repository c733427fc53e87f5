"""The ``sched`` CLI through click's CliRunner, against the suite's Redis: commands, the
``--json`` shapes other tools read, and bad input that must leave Redis untouched."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scheduler.state.namespace import NAMESPACE_REGISTRY
from scheduler.tools.cli import main

from commits import commit_one

GiB = 2**30

WEB_YAML = """\
id: web
priority: 70
replicas: 3
resources: {cpu: 0.5, memory: 256MiB}
constraints: ["node.labels.zone==eu-1"]
"""

BATCH_JSON = json.dumps({"id": "crunch", "type": "batch", "replicas": 2,
                         "resources": {"cpu": "250m", "memory": "1Gi"}})


def as_json(result):
    return json.loads(result.stdout)


def snapshot_all(client) -> dict:
    """Every key in the server, with its type, serialised value and expiry (but RQ's own
    keys, which RQ workers of other tests may refresh or let expire meanwhile, and the
    registry of namespaces, which any other test's process may add its namespace to)."""
    return {key: (client.type(key), client.dump(key), client.pttl(key))
            for key in sorted(client.scan_iter(count=1000)) if not key.startswith("rq:") and key != NAMESPACE_REGISTRY}


def live(app, task_id, node):
    """Make a pending task live on a node through lua/commit.lua."""
    claim = app.queue.claim(10_000)
    job = app.client.hget(app.keys.task(task_id), "job")
    assert commit_one(app, claim.token, task_id, node, job, {"cpu": 500}) == 1
    app.queue.release(claim.token, [t for t in claim.task_ids if t != task_id])


# ----------------------------------------------------------------------------- nodes
def test_node_add_and_ls_json_shape(sched):
    assert sched("node", "add", "n2", "--cpu", "2", "--memory", "4GiB").stdout == "node n2 added\n"
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB", "--gpu", "1", "--label", "zone=eu-1",
          "--label", "rack=r1", "--os", "linux", "--arch", "arm64", "--plugin", "network")
    records = as_json(sched("node", "ls", "--json"))
    assert [r["name"] for r in records] == ["n1", "n2"]
    n1 = records[0]
    assert {"name", "capacity", "allocated", "labels", "availability", "status", "tasks"} <= set(n1)
    assert n1["capacity"] == {"cpu": 4000, "memory": 8 * GiB, "gpu": 1}
    assert n1["allocated"] == {"cpu": 0, "memory": 0, "gpu": 0}
    assert n1["labels"] == {"zone": "eu-1", "rack": "r1"}
    assert (n1["availability"], n1["status"], n1["tasks"]) == ("active", "ready", 0)


def test_node_add_again_updates(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    live_setup = sched("job", "submit", "-", input="id: web\nresources: {cpu: 0.5}\n")
    assert live_setup.stdout == "web\n"
    live(app, "web.0", "n1")
    assert sched("node", "add", "n1", "--cpu", "8", "--memory", "8GiB").stdout == "node n1 updated\n"
    (n1,) = as_json(sched("node", "ls", "--json"))
    assert n1["capacity"]["cpu"] == 8000
    assert n1["allocated"]["cpu"] == 500 and n1["tasks"] == 1


def test_node_ls_table_and_empty_json(sched):
    assert as_json(sched("node", "ls", "--json")) == []
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB", "--label", "zone=eu-1")
    out = sched("node", "ls").stdout
    assert "n1" in out and "zone=eu-1" in out and "cpu 0/4" in out


def test_node_pause_activate_drain(sched):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    assert sched("node", "pause", "n1").stdout == "node n1: active -> pause\n"
    assert as_json(sched("node", "ls", "--json"))[0]["availability"] == "pause"
    assert sched("node", "activate", "n1").stdout == "node n1: pause -> active\n"
    assert as_json(sched("node", "ls", "--json"))[0]["availability"] == "active"
    assert sched("node", "drain", "n1").stdout == "node n1 drained: 0 task(s) stopped; 0 replacement(s) queued\n"
    assert as_json(sched("node", "ls", "--json"))[0]["availability"] == "drain"


def test_node_drain_moves_live_tasks(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input="id: web\nreplicas: 1\nresources: {cpu: 0.5}\n")
    live(app, "web.0", "n1")
    assert sched("node", "drain", "n1").stdout == "node n1 drained: 1 task(s) stopped; 1 replacement(s) queued\n"
    tasks = {t["id"]: t for t in as_json(sched("task", "ls", "--json"))}
    assert tasks["web.0"]["state"] == "stopped"
    assert tasks["web.1"]["state"] == "pending"
    (n1,) = as_json(sched("node", "ls", "--json"))
    assert n1["tasks"] == 0 and n1["allocated"]["cpu"] == 0


def test_node_rm(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("node", "add", "n2", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input="id: web\nreplicas: 1\nresources: {cpu: 0.5}\n")
    live(app, "web.0", "n2")
    assert sched("node", "rm", "n1").stdout == "node n1 removed\n"
    assert [r["name"] for r in as_json(sched("node", "ls", "--json"))] == ["n2"]

    before = snapshot_all(app.client)
    refused = sched("node", "rm", "n2", ok=False)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("Error: node 'n2' still runs tasks")
    assert snapshot_all(app.client) == before


# ----------------------------------------------------------------------------- jobs
def test_job_submit_yaml_file(sched, tmp_path, app):
    path = tmp_path / "web.yaml"
    path.write_text(WEB_YAML)
    assert sched("job", "submit", path).stdout == "web\n"
    assert app.client.zcard(app.keys.active) == 3


def test_job_submit_json_file_with_json_output(sched, tmp_path):
    path = tmp_path / "crunch.json"
    path.write_text(BATCH_JSON)
    result = as_json(sched("job", "submit", path, "--json"))
    changes = result.pop("changes")
    assert result == {"id": "crunch", "version": 1, "tasks": ["crunch.0", "crunch.1"], "created": True,
                      "deployment": None}
    assert changes["action"] == "create" and changes["start"] == 2


@pytest.mark.parametrize("text, job_id, count", [(WEB_YAML, "web", 3), (BATCH_JSON, "crunch", 2)])
def test_job_submit_from_stdin(sched, app, text, job_id, count):
    assert sched("job", "submit", "-", input=text).stdout == f"{job_id}\n"
    assert len(app.store.job_task_ids(job_id)) == count


def test_job_submit_without_id_prints_the_new_one(sched, app):
    job_id = sched("job", "submit", "-", input="replicas: 1\n").stdout.strip()
    assert job_id.startswith("job-")
    assert app.store.job_ids() == [job_id]


def test_job_resubmit_identical_then_changed(sched):
    sched("job", "submit", "-", input=WEB_YAML)
    again = as_json(sched("job", "submit", "-", "--json", input=WEB_YAML))
    assert again["changes"]["action"] == "none"
    assert {k: again[k] for k in ("id", "version", "tasks", "created")} == \
        {"id": "web", "version": 1, "tasks": [], "created": False}
    changed = as_json(sched("job", "submit", "-", "--json", input=WEB_YAML.replace("priority: 70", "priority: 80")))
    assert changed["version"] == 2 and changed["tasks"] == ["web.3", "web.4", "web.5"]
    assert changed["changes"]["action"] == "replace-all" and changed["deployment"] is None
    assert changed["changes"]["fields"] == [{"field": "priority", "old": 70, "new": 80}]
    assert changed["changes"]["stop"] == ["web.0", "web.1", "web.2"]
    states = {t["id"]: t["state"] for t in as_json(sched("task", "ls", "--json", "--job", "web"))}
    assert states == {"web.0": "stopped", "web.1": "stopped", "web.2": "stopped",
                      "web.3": "pending", "web.4": "pending", "web.5": "pending"}


def test_job_ls_and_show(sched):
    sched("job", "submit", "-", input=WEB_YAML)
    sched("job", "submit", "-", input=BATCH_JSON)
    records = as_json(sched("job", "ls", "--json"))
    assert [r["id"] for r in records] == ["crunch", "web"]
    web = records[1]
    assert (web["type"], web["priority"], web["replicas"], web["version"], web["status"]) == \
        ("service", 70, 3, 1, "running")
    assert web["tasks"] == {"pending": 3}
    assert "web" in sched("job", "ls").stdout

    shown = as_json(sched("job", "show", "web", "--json"))
    assert shown["id"] == "web" and shown["version"] == 1 and shown["status"] == "running"
    assert shown["spec"]["resources"] == {"cpu": "500m", "memory": 256 * 2**20}
    assert shown["spec"]["constraints"] == ["node.labels.zone==eu-1"]
    text = sched("job", "show", "web").stdout
    assert "status: running" in text and "replicas: 3" in text


def test_job_scale(sched):
    sched("job", "submit", "-", input=WEB_YAML)
    assert sched("job", "scale", "web", 5).stdout == "job web: 2 added, 0 stopped\n"
    result = as_json(sched("job", "scale", "web", 1, "--json"))
    assert result == {"id": "web", "replicas": 1, "added": [], "stopped": ["web.4", "web.3", "web.2", "web.1"]}
    pending = as_json(sched("task", "ls", "--json", "--state", "pending"))
    assert [t["id"] for t in pending] == ["web.0"]
    assert as_json(sched("job", "show", "web", "--json"))["spec"]["replicas"] == 1


def test_job_stop(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input=WEB_YAML)
    live(app, "web.1", "n1")
    assert sched("job", "stop", "web").stdout == "job web stopped (3 task(s))\n"
    assert as_json(sched("queue", "ls", "--json")) == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert {t["state"] for t in as_json(sched("task", "ls", "--json"))} == {"stopped"}
    assert as_json(sched("job", "show", "web", "--json"))["status"] == "stopped"
    assert as_json(sched("node", "ls", "--json"))[0]["allocated"]["cpu"] == 0


# ----------------------------------------------------------------------------- tasks
def test_piped_tables_give_whole_values_however_wide(sched, app, monkeypatch):
    """Not a terminal (a pipe, a script): no cell is cut or wrapped, as kubectl prints."""
    monkeypatch.delenv("COLUMNS", raising=False)
    long_label = "team=" + "x" * 90
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB", "--label", long_label,
          "--taint", "dedicated=gpu:NoSchedule")
    sched("job", "submit", "-", input='{"id": "a-rather-long-job-name-for-a-nightly-report-of-every-region"}')
    nodes = sched("node", "ls").stdout
    assert long_label in nodes and "dedicated=gpu:NoSchedule" in nodes and "…" not in nodes
    assert len(nodes.splitlines()) == 2  # a header and one row: nothing wrapped
    tasks = sched("task", "ls").stdout
    assert "a-rather-long-job-name-for-a-nightly-report-of-every-region.0" in tasks and "…" not in tasks


def test_health_is_shown_only_for_running_tasks(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input='{"id": "b", "type": "batch", "replicas": 2}')
    for task_id in ("b.0", "b.1"):
        live(app, task_id, "n1")
    app.client.hset(app.keys.task("b.0"), mapping={"state": "running", "health": "healthy"})
    assert {r["id"]: r["health"] for r in as_json(sched("task", "ls", "--json"))} == {"b.0": "healthy", "b.1": None}
    assert as_json(sched("task", "explain", "b.0", "--json"))["health"] == "healthy"
    app.client.hset(app.keys.task("b.0"), "state", "completed")  # how it was while it ran stays in its hash
    assert {r["id"]: r["health"] for r in as_json(sched("task", "ls", "--json"))} == {"b.0": None, "b.1": None}
    assert "health" not in as_json(sched("task", "explain", "b.0", "--json"))
    rows = [line.split() for line in sched("task", "ls").stdout.splitlines()[1:]]
    assert [row[4] for row in rows] == ["-", "-"]


def test_task_ls_json_shape_and_filters(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("node", "add", "n2", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input=WEB_YAML)
    sched("job", "submit", "-", input=BATCH_JSON)
    live(app, "web.1", "n1")
    live(app, "crunch.0", "n2")

    records = as_json(sched("task", "ls", "--json"))
    assert sorted(r["id"] for r in records) == ["crunch.0", "crunch.1", "web.0", "web.1", "web.2"]
    for r in records:
        assert {"id", "job", "state", "node", "priority"} <= set(r)
    by_id = {r["id"]: r for r in records}
    assert by_id["web.1"] == {**by_id["web.1"], "job": "web", "state": "assigned", "node": "n1", "priority": 70}
    assert by_id["web.0"]["node"] is None and by_id["web.0"]["state"] == "pending"
    assert by_id["crunch.1"]["priority"] == 50

    ids = lambda *args: sorted(r["id"] for r in as_json(sched("task", "ls", "--json", *args)))  # noqa: E731
    assert ids("--job", "web") == ["web.0", "web.1", "web.2"]
    assert ids("--state", "assigned") == ["crunch.0", "web.1"]
    assert ids("--state", "pending", "--job", "crunch") == ["crunch.1"]
    assert ids("--node", "n1") == ["web.1"]
    assert ids("--node", "n2", "--job", "web") == []
    assert ids("--state", "completed") == []
    table = sched("task", "ls", "--job", "web").stdout
    assert "web.1" in table and "n1" in table and "crunch" not in table


def test_task_explain_json_shape(sched, app):
    sched("job", "submit", "-", input=WEB_YAML)
    never = as_json(sched("task", "explain", "web.0", "--json"))
    assert never == {"id": "web.0", "state": "pending", "version": 1, "nodes_evaluated": 0, "reasons": {},
                     "message": "waiting for a scheduler worker; no attempt has been made yet."}

    claim = app.queue.claim(1)
    reasons = {"insufficient cpu": 2, "constraint node.labels.zone==eu-1 not met": 1}
    message = "0/3 nodes available: 2 insufficient cpu, 1 constraint node.labels.zone==eu-1 not met."
    app.queue.fail(claim.token, [("web.0", {"nodes_evaluated": 3, "reasons": reasons, "message": message})])
    explained = as_json(sched("task", "explain", "web.0", "--json"))
    assert {"id", "state", "nodes_evaluated", "reasons", "message"} <= set(explained)
    assert explained["id"] == "web.0" and explained["state"] == "pending"
    assert explained["nodes_evaluated"] == 3
    assert explained["reasons"] == reasons
    assert explained["message"] == message
    assert sched("task", "explain", "web.0").stdout == f"web.0: pending\n{message}\n"


def test_task_explain_placed_and_stopped(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    sched("job", "submit", "-", input=WEB_YAML)
    live(app, "web.2", "n1")
    placed = as_json(sched("task", "explain", "web.2", "--json"))
    assert (placed["state"], placed["message"]) == ("assigned", "placed on node n1, which has no agent to start it: a "
                                                               "node added with sched node add runs nothing (sched "
                                                               "agent n1 runs its tasks).")
    assert placed["reasons"] == {"node has no agent": 1}
    sched("job", "stop", "web")
    stopped = as_json(sched("task", "explain", "web.0", "--json"))
    assert (stopped["state"], stopped["message"]) == ("stopped", "job stopped")


# ----------------------------------------------------------------------------- queue
def test_queue_ls_json_shape(sched, app):
    assert as_json(sched("queue", "ls", "--json")) == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    sched("job", "submit", "-", input=WEB_YAML)
    sched("job", "submit", "-", input=BATCH_JSON)
    claim = app.queue.claim(3)
    app.queue.fail(claim.token, [(claim.task_ids[0], {"nodes_evaluated": 0, "reasons": {}, "message": "x"})])
    app.queue.cluster_event()
    app.queue.fail(claim.token, [(claim.task_ids[1], {"nodes_evaluated": 0, "reasons": {}, "message": "x"})])
    counts = as_json(sched("queue", "ls", "--json"))
    assert counts == {"active": 2, "backoff": 1, "unschedulable": 1, "inflight": 1, "waiting": 0}
    table = sched("queue", "ls").stdout
    assert "unschedulable" in table and app.keys.active in table


def test_environment_picks_redis_and_namespace(redis_url, namespace, app):
    runner = CliRunner()
    env = {"SCHED_REDIS_URL": redis_url, "SCHED_NAMESPACE": namespace}
    assert runner.invoke(main, ["node", "add", "n1", "--cpu", "1", "--memory", "1Gi"], env=env).exit_code == 0
    assert app.store.node_names() == ["n1"]
    result = runner.invoke(main, ["node", "ls", "--json"], env=env)
    assert [r["name"] for r in json.loads(result.stdout)] == ["n1"]


# ----------------------------------------------------------------------------- bad input
def spec_case(text):
    return (["job", "submit", "-"], text)


BAD_INPUT = {
    "malformed yaml": spec_case("id: web2\nreplicas: [3\n"),
    "malformed json": spec_case('{"id": "web2", "replicas": 3,'),
    "yaml list, not a mapping": spec_case("- id: web2\n"),
    "empty spec": spec_case(""),
    "unknown field": spec_case("id: web2\nreplica: 3\n"),
    "unknown field in json": spec_case('{"id": "web2", "cpus": 1}'),
    "cpu written as cpus": spec_case("id: web2\nresources: {cpus: 1, memory: 1GiB}\n"),
    "memory written as ram": spec_case("id: web2\nresources: {cpu: 1, ram: 1GiB}\n"),
    "memory misspelt": spec_case("id: web2\nresources: {memroy: 256MiB}\n"),
    "job scale below zero": (["job", "scale", "web", "-1"], None),
    "negative cpu": spec_case("id: web2\nresources: {cpu: -1}\n"),
    "negative memory": spec_case("id: web2\nresources: {memory: -256MiB}\n"),
    "non-numeric cpu": spec_case("id: web2\nresources: {cpu: lots}\n"),
    "absurd memory": spec_case("id: web2\nresources: {memory: 100Pi}\n"),
    "absurd cpu": spec_case('{"id": "web2", "resources": {"cpu": 50000000}}'),
    "bad constraint syntax": spec_case("id: web2\nconstraints: ['node.labels.zone']\n"),
    "unknown constraint key": spec_case("id: web2\nconstraints: ['node.colour==red']\n"),
    "replicas below zero": spec_case("id: web2\nreplicas: -1\n"),
    "unknown job type": spec_case("id: web2\ntype: cron\n"),
    "bad job id": spec_case("id: 'web 2'\n"),
    "bad change to an existing job": spec_case("id: web\nreplicas: -3\n"),
    "node drain unknown": (["node", "drain", "nope"], None),
    "node pause unknown": (["node", "pause", "nope"], None),
    "node activate unknown": (["node", "activate", "nope"], None),
    "node rm unknown": (["node", "rm", "nope"], None),
    "node drain bad name": (["node", "drain", "no pe"], None),
    "job show unknown": (["job", "show", "nope"], None),
    "job scale unknown": (["job", "scale", "nope", "2"], None),
    "job stop unknown": (["job", "stop", "nope"], None),
    "job scale a stopped job": (["job", "scale", "old", "2"], None),
    "task explain unknown": (["task", "explain", "nope"], None),
    "task ls unknown job": (["task", "ls", "--job", "nope"], None),
    "task ls unknown node": (["task", "ls", "--node", "nope"], None),
    "node add negative cpu": (["node", "add", "n9", "--cpu=-1", "--memory", "1Gi"], None),
    "node add non-numeric cpu": (["node", "add", "n9", "--cpu", "four", "--memory", "1Gi"], None),
    "node add bad memory": (["node", "add", "n9", "--cpu", "1", "--memory", "8XB"], None),
    "node add absurd cpu": (["node", "add", "n9", "--cpu", "99999999", "--memory", "1Gi"], None),
    "node add bad label": (["node", "add", "n9", "--cpu", "1", "--memory", "1Gi", "--label", "zone"], None),
    "node add bad resource": (["node", "add", "n9", "--cpu", "1", "--memory", "1Gi", "--resource", "fpga"], None),
    "node add bad name": (["node", "add", "n 9", "--cpu", "1", "--memory", "1Gi"], None),
    "node update with bad memory": (["node", "add", "n1", "--cpu", "1", "--memory", "lots"], None),
}


@pytest.mark.parametrize("args, stdin", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_exits_2_and_leaves_redis_untouched(sched, app, args, stdin):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB", "--label", "zone=eu-1")
    sched("job", "submit", "-", input=WEB_YAML)
    live(app, "web.0", "n1")
    sched("job", "submit", "-", input="id: old\nreplicas: 1\n")
    sched("job", "stop", "old")
    before = snapshot_all(app.client)

    result = sched(*args, input=stdin, ok=False)

    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("Error: ")
    assert result.stderr.endswith(".\n") and result.stderr.count("\n") == 1   # one sentence, one line
    assert result.stdout == ""
    assert snapshot_all(app.client) == before


def test_a_resource_no_node_offers_is_submitted_with_a_warning(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "8GiB")
    result = sched("job", "submit", "-", input="id: train\nresources: {cpu: 1, gpu: 1, tpu: 2}\n")
    assert result.stdout == "train\n"
    assert result.stderr == (f"Warning: job train asks for gpu and tpu, which no node of namespace {app.keys.namespace} "
                             f"has offered; its tasks wait until a node does.\n")
    assert app.store.get_job("train")["version"] == 1  # submitted all the same

    bulk = sched("job", "submit", "--json", "-", input="id: a\nresources: {gpu: 1}\n---\nid: b\nresources: {gpu: 1}\n")
    assert [r.get("unoffered") for r in as_json(bulk)] == [["gpu"], ["gpu"]]
    assert bulk.stderr.count("\n") == 1 and "jobs a and b ask for gpu" in bulk.stderr

    sched("node", "add", "n2", "--cpu", "4", "--memory", "8GiB", "--gpu", "1")
    offered = sched("job", "submit", "--json", "-", input="id: train2\nresources: {cpu: 1, gpu: 1}\n")
    assert offered.stderr == "" and "unoffered" not in as_json(offered)


def test_a_misspelt_resource_name_gets_a_did_you_mean(sched, app):
    result = sched("job", "submit", "-", input="id: web\nresources: {cpu: 0.5, memroy: 256MiB}\n", ok=False)
    assert (result.exit_code, result.stderr) == (2, "Error: job web resources has an unknown resource 'memroy'; "
                                                    "did you mean 'memory'? Resources other than cpu and memory "
                                                    "count whole units.\n")
    typo = sched("job", "submit", "-", input="id: web\nresources: {cpuu: 500m}\n", ok=False)
    assert "did you mean 'cpu'?" in typo.stderr
    gpu = sched("job", "submit", "-", input="id: web\nresources: {gpu: 500m}\n", ok=False)
    assert gpu.stderr == "Error: job web resources.gpu counts whole units (like 1 or 2), not '500m'.\n"
    assert app.client.exists(app.keys.job("web")) == 0


def test_decimal_memory_is_said_on_submit_and_shown_as_written(sched):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "10GB")
    result = sched("job", "submit", "-", input="id: big\nresources: {cpu: 1, memory: 10GB}\n")
    assert result.stdout == "big\n"
    assert result.stderr == ("Note: job big asks for 10G of memory, a decimal unit: 10,000,000,000 bytes (9.31Gi); "
                             "write 10Gi for 10 GiB.\n")
    assert "memory: 10G\n" in sched("job", "show", "big").stdout  # not 9765625Ki
    assert "memory 0/10G" in sched("node", "ls").stdout
    assert as_json(sched("job", "show", "big", "--json"))["spec"]["resources"]["memory"] == 10**10
    binary = sched("job", "submit", "--json", "-", input="id: small\nresources: {memory: 256MiB}\n")
    assert binary.stderr == "" and "decimal_memory" not in as_json(binary)
    bulk = sched("job", "submit", "--json", "-", input="id: a\nresources: {memory: 500M}\n---\n"
                                                       "id: b\nresources: {memory: 500M}\n")
    assert [r["decimal_memory"] for r in as_json(bulk)] == ["500M", "500M"]
    assert bulk.stderr.count("\n") == 1 and "jobs a and b ask for 500M of memory" in bulk.stderr


def test_scaling_below_zero_is_one_sentence_about_replicas(sched):
    sched("job", "submit", "-", input=WEB_YAML)
    result = sched("job", "scale", "web", "-1", ok=False)
    assert (result.exit_code, result.stderr) == (2, "Error: replicas must be a whole number from 0 to 1000000, not "
                                                    "-1; 0 stops every task of the job.\n")
    assert sched("job", "scale", "web", "0").stdout == "job web: 0 added, 3 stopped\n"


@pytest.mark.parametrize("args, stdin", [
    (["node", "add", "n1", "--cpu=-1", "--memory", "1Gi"], None),
    (["node", "add", "n1", "--cpu", "1", "--memory", "1Gi", "--label", "zone"], None),
    (["job", "submit", "-"], "id: web\nreplicas: -1\n"),
    (["job", "submit", "-"], "id: web\nresources: {cpu: [\n"),
], ids=["node add", "node label", "job spec", "job yaml"])
def test_bad_input_is_reported_before_connecting(tmp_path, args, stdin):
    """A spec error is the user's to fix first: it is not hidden behind 'cannot reach Redis'."""
    url = f"unix://{tmp_path}/nobody-listens.sock"
    result = CliRunner().invoke(main, ["--redis-url", url, *args], input=stdin)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("Error: ") and "cannot reach" not in result.stderr

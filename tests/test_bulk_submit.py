"""Bulk submission: many jobs per ``enqueue_many.lua`` call (``Client.submit_many``,
``sched job submit`` of several YAML documents or JSON lines). Every job and task exists
once, as the one-by-one submit would have made it; queue scores follow the order given;
each task's pending event is published; a bad document writes nothing."""

from __future__ import annotations

import gc
import json

import orjson
import pytest
from click.testing import CliRunner

from scheduler.client import Client
from scheduler.model.spec_text import load_specs, read_specs
from scheduler.model import SpecError, parse_job
from scheduler.state.jobs import ENQUEUE_CHUNK
from scheduler.tools.cli import main

from test_events import drain
from worker_harness import cluster_problems, format_problems, wait_until


def snapshot(client, namespace):
    return {key: client.type(key) for key in client.scan_iter(match=f"sched:{{{namespace}}}:*")}


def without_times(fields: dict, old: str, new: str) -> dict:
    drop = {"created", "updated", "qscore"}
    return {k: v.replace(old, new) for k, v in fields.items() if k not in drop}


def test_submit_many_writes_each_job_once_as_submit_would(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    specs = [{"id": f"j{i}", "replicas": 1 + i % 3, "priority": 50 + i % 2, "resources": {"cpu": 0.1}}
             for i in range(1200)]  # several chunks
    results = client.submit_many(specs)
    assert [r["id"] for r in results] == [s["id"] for s in specs]
    assert all(r["created"] and r["version"] == 1 for r in results)
    assert results[4]["tasks"] == ["j4.0", "j4.1"]
    store, keys = app.store, app.keys
    ids = [t for s in specs for t in (f"{s['id']}.{n}" for n in range(s["replicas"]))]
    assert sorted(store.job_ids()) == sorted(s["id"] for s in specs)
    active = app.client.zrange(keys.active, 0, -1, withscores=True)
    assert sorted(t for t, _ in active) == sorted(ids)  # each once
    # Scores: priority first, then the order given.
    order = {t: i for i, t in enumerate(ids)}
    by_score = [t for t, _ in active]
    assert by_score == sorted(ids, key=lambda t: (-int(specs[int(t[1:].split(".")[0])]["priority"]), order[t]))
    # The same hashes as the ordinary submit makes (times aside).
    client.submit({"id": "single", "replicas": 2, "priority": 50, "resources": {"cpu": 0.1}})
    assert without_times(store.job_fields("j4"), "j4", "single") == without_times(store.job_fields("single"), "", "")
    assert without_times(app.client.hgetall(keys.task("j4.1")), "j4", "single") == \
        without_times(app.client.hgetall(keys.task("single.1")), "", "")
    assert app.client.hget(keys.job_shares, "j4") == app.client.hget(keys.job_shares, "single")
    assert store.job_task_ids("j4") == ["j4.0", "j4.1"]
    problems, _ = cluster_problems(app, settled=False)
    assert not problems, format_problems(problems)


def test_existing_duplicate_global_and_big_jobs_fall_back(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    client.add_node("n1", cpu=4, memory="8GiB")
    client.submit({"id": "old", "replicas": 1})
    results = client.submit_many([
        {"id": "old", "replicas": 1},  # unchanged
        {"id": "dup", "replicas": 1},
        {"id": "dup", "replicas": 2, "priority": 90},  # a new version of the one just made
        {"id": "every", "type": "global"},
        {"id": "big", "replicas": ENQUEUE_CHUNK + 1},
    ])
    assert {k: results[0][k] for k in ("id", "version", "tasks", "created")} == \
        {"id": "old", "version": 1, "tasks": [], "created": False}
    assert results[0]["changes"]["action"] == "none"
    assert results[1]["created"] and results[2]["version"] == 2 and not results[2]["created"]
    assert results[3]["tasks"] == ["every.0"] and results[4]["created"]
    assert len(results[4]["tasks"]) == ENQUEUE_CHUNK + 1
    assert client.job("dup")["version"] == 2
    assert {t.id: t.state for t in client.tasks(job="dup")} == {"dup.0": "stopped", "dup.1": "pending",
                                                               "dup.2": "pending"}
    assert len(client.tasks(job="old")) == 1


def test_a_chunk_sent_twice_creates_nothing_more(app):
    parsed = [(f"j{i}", parse_job({"id": f"j{i}", "replicas": 2})) for i in range(10)]
    assert app.store.enqueue_many(parsed) == [True] * 10
    before = app.client.zcard(app.keys.active)
    assert app.store.enqueue_many(parsed) == [False] * 10
    assert app.client.zcard(app.keys.active) == before == 20


def test_a_job_given_twice_in_a_call_of_new_jobs_is_made_once(app):
    first, second = parse_job({"id": "twice", "replicas": 1}), parse_job({"id": "twice", "replicas": 3})
    assert app.store.enqueue_many([("a", first), ("twice", first), ("twice", second)]) == [True, True, False]
    assert app.store.job_task_ids("twice") == ["twice.0"]
    assert app.client.zcard(app.keys.active) == 2
    assert app.client.llen(app.keys.job_history("twice")) == 0  # not recorded: no one given


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_waits_while_jobs_are_submitted_in_bulk(redis_url, namespace, enabled):
    seen = []

    def specs():
        for i in range(3):
            seen.append(gc.isenabled())
            yield {"id": f"g{i}", "replicas": 1}

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        results = Client(redis_url, namespace).submit_many(specs())
        assert seen == [False] * 3 and gc.isenabled() == enabled  # paused, then as it was
    finally:
        (gc.enable if was else gc.disable)()
    assert [r["created"] for r in results] == [True] * 3


def test_each_task_has_its_pending_event(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    pubsub = app.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(app.keys.events)
    wait_until(lambda: app.client.pubsub_numsub(app.keys.events)[0][1] >= 1, 10, "the subscription")
    try:
        client.submit_many([{"id": f"e{i}", "replicas": 2} for i in range(300)])
        published = [orjson.loads(m) for m in drain(pubsub)]
    finally:
        pubsub.close()
    events = [e for e in published if e["type"] != "audit"]  # each submit is also announced once, with who
    assert sorted(e["job"] for e in published if e["type"] == "audit") == sorted(f"e{i}" for i in range(300))
    tasks = [e for e in events if e["type"] == "task"]
    assert sorted(e["id"] for e in tasks) == sorted(f"e{i}.{n}" for i in range(300) for n in range(2))
    assert all(e["state"] == "pending" and e["job"] == e["id"].split(".")[0] for e in tasks)
    jobs = [e for e in events if e["type"] != "task"]  # each job announced once, before its tasks
    assert [(e["type"], e["id"], e["event"], e["replicas"]) for e in jobs] == [
        ("job", f"e{i}", "submitted", 2) for i in range(300)]
    assert events.index(jobs[0]) < events.index(next(e for e in tasks if e["id"] == "e0.0"))


def test_load_specs_reads_json_lines_and_yaml_documents():
    assert load_specs('{"id": "a"}\n\n{"id": "b"}\n') == [{"id": "a"}, {"id": "b"}]
    assert load_specs('{\n  "id": "a"\n}\n') == [{"id": "a"}]
    assert load_specs("id: a\n---\nid: b\n") == [{"id": "a"}, {"id": "b"}]
    assert load_specs("{id: a, replicas: 2}") == [{"id": "a", "replicas": 2}]
    with pytest.raises(SpecError, match=r"^document 2 \(line 3\) is not valid JSON\.$"):
        load_specs('{"id": "a"}\n\n{"id": "b",\n')
    with pytest.raises(SpecError, match=r"at line \d+ \(document 2\)\.$"):
        load_specs("id: a\n---\nid: b\nreplicas: [1\n")


@pytest.mark.parametrize("form", ["yaml", "jsonl"])
def test_cli_submits_many_and_refuses_a_bad_document_whole(redis_url, namespace, app, tmp_path, form):
    runner = CliRunner()
    docs = [{"id": f"w{i}", "replicas": 1} for i in range(5)]

    def text(documents):
        if form == "jsonl":
            return "".join(json.dumps(d) + "\n" for d in documents)
        return "".join("---\n" + json.dumps(d) + "\n" for d in documents)

    bad = docs[:2] + [{"id": "w2", "replicas": -1}] + docs[3:]
    before = snapshot(app.client, namespace)
    result = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace, "job", "submit", "-"],
                           input=text(bad))
    assert result.exit_code != 0
    assert "document 3" in result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert snapshot(app.client, namespace) == before  # nothing written

    path = tmp_path / "jobs"
    path.write_text(text(docs))
    result = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace, "job", "submit", str(path),
                                  "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [r["id"] for r in out] == [d["id"] for d in docs] and all(r["created"] for r in out)
    result = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace, "job", "submit", "-"],
                           input=text(docs))
    assert result.stdout.split() == [d["id"] for d in docs]


def as_read(jobs):
    """(id, stored spec text) of each job as read_specs gives it."""
    return [(job_id, orjson.dumps({**spec.raw, "id": job_id})) for job_id, spec in jobs]


def as_loaded(text):
    """The same, from the whole text read by load_specs and each document parsed alone."""
    return [(d["id"], orjson.dumps(parse_job(d).raw)) for d in load_specs(text)]


@pytest.mark.parametrize("text", [
    # Documents that differ only in their id, then ones that differ in more, or that look alike but are not.
    "---\nid: a\nreplicas: 2\n---\nid: b\nreplicas: 2\n---\nid: c\nreplicas: 3\n---\nid: d\nreplicas: 2\n",
    "---\nid: a\nrun: {func: 'm:f', kwargs: {id: x}}\n---\nid: b\nrun: {func: 'm:f', kwargs: {id: x}}\n",
    "---\nrun:\n  func: m:f\n  kwargs:\n    id: a\nid: a\n---\nrun:\n  func: m:f\n  kwargs:\n    id: a\nid: b\n",
    "---\nid: a # note\n---\nid: b # note\n---\n# nothing\n---\nid: c\ntenant: t1\n",
    "priority: 60\nid: a\n---\npriority: 60\nid: b\n",
    '{"id": "a", "replicas": 2}\n{"id": "b", "replicas": 2}\n{"replicas": 2, "id": "c"}\n{"id": "d", "replicas": 1}\n',
    '{"id": "a", "run": {"func": "m:f", "kwargs": {"id": "a"}}}\n{"id": "b", "run": {"func": "m:f", "kwargs": {"id": "a"}}}\n',
    '{"run": {"func": "m:f", "kwargs": {"id": "a"}}, "id": "a"}\n{"run": {"func": "m:f", "kwargs": {"id": "b"}}, "id": "a"}\n',
    '{"run": {"func": "m:f", "kwargs": {"id": "a"}}, "id": "a"}\n{"run": {"func": "m:f", "kwargs": {"id": "b"}}, "id": "c"}\n',
])
def test_documents_alike_but_for_their_id_read_as_each_alone(text):
    assert as_read(read_specs(text)) == as_loaded(text)


@pytest.mark.parametrize("text, message", [
    ("---\nid: a\n---\nid: 123\n", r"^document 2: "),
    ("---\nid: a\n  b\n---\nid: c\n", r"^document 1: "),  # a plain value continued on the next line
    ("---\nid: c\n---\nid: a\n  b\n", r"^document 2: "),  # YAML reads 123 as a number
    ("---\nid: a\n---\nid: yes\n", r"^document 2: "),
    ("---\nid: a\n---\nid: 2001-12-14\n", r"^document 2: "),
    ('{"id": "a"}\n{"id": "b", "id": 7}\n', r"^document 2: "),
    ('{"id": "a", "replicas": 1}\n{"id": "b", "replicas": 1}\n{"id": "c", "replicas": 1,\n',
     r"^document 3 \(line 3\) is not valid JSON\.$"),
    ("---\nid: a\n---\nid: b\n---\nid: c\nreplicas: [1\n", r"at line \d+ \(document 3\)\.$"),
    ("---\nid: a\nreplicas: 2\n---\nid: b\nreplicas: 2\nbogus: 1\n", r"^document 2: job spec has unknown field"),
    ("# one document\n---\nid: -web\n", r"^job id '-web' is not valid"),  # one document: not numbered
])
def test_a_bad_document_among_alike_ones_is_named(text, message):
    with pytest.raises(SpecError, match=message):
        read_specs(text)


def test_bulk_submit_loads_the_script_again_if_redis_lost_it(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    client.submit_many([{"id": "before", "replicas": 1}, {"id": "before2", "replicas": 1}])
    app.client.script_flush()
    results = client.submit_many([{"id": f"after{i}", "replicas": 1} for i in range(3)])
    assert all(r["created"] for r in results)
    assert app.client.zcard(app.keys.active) == 5


def test_submit_writes_the_jobs_shares_entry_with_the_job(redis_url, namespace, app):
    client = Client(redis_url, namespace)
    client.submit({"id": "g", "replicas": 2, "gang": True, "tenant": "t1", "resources": {"cpu": 0.5}})
    assert app.client.hget(app.keys.job_shares, "g") == "t1|2|cpu=500"
    client.submit({"id": "g", "replicas": 3, "gang": True, "tenant": "t1", "resources": {"cpu": 0.5}})  # scaled
    assert app.client.hget(app.keys.job_shares, "g") == "t1|3|cpu=500"
    client.submit({"id": "g", "replicas": 3, "gang": True, "tenant": "t2", "resources": {"cpu": 0.5}})  # version 2
    assert app.client.hget(app.keys.job_shares, "g") == "t2|3|cpu=500"


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["redis_cluster", "redis_sentinel"])
def test_bulk_submit_on_a_cluster_and_under_sentinel(topology, request):
    url = request.getfixturevalue(topology).url
    client = Client(url, f"bulk-{topology[6:]}")
    specs = [{"id": f"j{i}", "replicas": 1 + i % 2, "resources": {"cpu": 0.1}} for i in range(2400)]
    client.store.client.script_flush()  # on a cluster: every master; the bulk calls load them again
    results = client.submit_many(specs)
    assert all(r["created"] for r in results)
    keys = client.app.keys
    assert client.store.client.zcard(keys.active) == sum(1 + i % 2 for i in range(2400))
    assert client.store.client.hget(keys.job("j7"), "spec") == orjson.dumps(parse_job(specs[7]).raw).decode()
    client.close()

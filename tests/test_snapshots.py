"""``sched snapshot save FILE`` and ``sched snapshot restore FILE [--namespace NEW]``: a
namespace's whole state, read as of one moment, written to a file and loaded back into an
empty namespace, on one server and on a Redis Cluster (and from one into the other).

A round trip keeps every key's content (renamed with the namespace), what ``sched
audit`` says and every state check of ``worker_harness.cluster_problems``, and the
restored namespace schedules on. Reads taken while workers place and users submit are
each consistent (each restores to a namespace whose invariants hold), and a read that a
change cuts across is detected. Bad files and non-empty targets are refused in one
sentence before anything is written; a restore cut short is finished by running it again.
"""

from __future__ import annotations

import gzip
import os
import stat
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from scheduler.state.layout import CURRENT
from scheduler import Client
from scheduler.control import reconcile, snapshot
from scheduler.model import make_node, parse_job
from scheduler.state import snapshots
from scheduler.state.app import App
from scheduler.tools.cli import main
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from worker_harness import cluster_problems, format_problems, run_worker_until_idle


_MADE: list[str] = []  # the namespaces this module's tests made, removed after each test


def fresh(prefix: str = "s") -> str:
    name = prefix + uuid.uuid4().hex[:10]
    _MADE.append(name)
    return name


@pytest.fixture(autouse=True)
def _remove_namespaces(redis_url):
    """Leave nothing behind on the session's server (a heartbeat's TTL would show up in
    other tests' views of the whole server)."""
    yield
    client = App(redis_url=redis_url).client
    for name in _MADE:
        for key in client.scan_iter(match=f"sched:{{{name}}}:*", count=1000):
            client.delete(key)
        client.srem("sched:namespaces", name)
    _MADE.clear()


def sched(url: str, namespace: str | None, *args, ok: bool = True):
    options = ["--redis-url", url] + (["--namespace", namespace] if namespace else [])
    result = CliRunner().invoke(main, [*options, *map(str, args)])
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def contents(app: App) -> dict[str, object]:
    """Every key of the namespace, by its name after the prefix, as (type, content, has a TTL)."""
    client, prefix = app.client, app.keys.prefix
    out = {}
    for key in client.scan_iter(match=prefix + "*", count=1000):
        kind = client.type(key)
        value = {"hash": lambda: client.hgetall(key), "set": lambda: sorted(client.smembers(key)),
                 "zset": lambda: client.zrange(key, 0, -1, withscores=True),
                 "list": lambda: client.lrange(key, 0, -1), "string": lambda: client.get(key),
                 "stream": lambda: (client.xrange(key), sorted((g["name"], g["last-delivered-id"], g["pending"])
                                                              for g in client.xinfo_groups(key)))}[kind]()
        out[key[len(prefix):]] = (kind, value, client.pttl(key) > 0)
    return out


def build(app: App) -> None:
    """A namespace with a bit of everything: static nodes and one run by an agent (a
    heartbeat with a TTL), placed, pending and failed tasks, a stopped job, a quota, a
    tenant, history, a drained node, a stream with a consumer group."""
    store = app.store
    client = Client(app=app)
    for i in range(3):
        store.put_node(make_node(f"n{i}", cpu="4", memory="8GiB", labels=[f"zone=z{i % 2}"]))
    store.put_node(make_node("a1", cpu="2", memory="4GiB"))
    store.beat("a1", 60_000)
    client.set_quota(cpu=40)
    client.set_tenant("team-a", 2)
    client.submit({"id": "web", "replicas": 5, "resources": {"cpu": "1", "memory": "1GiB"}, "ports": [8080],
                   "preferences": [{"spread": "node.labels.zone"}]})
    client.submit({"id": "big", "replicas": 1, "resources": {"cpu": "16"}})  # fits nowhere
    client.submit({"id": "batch", "type": "batch", "replicas": 2, "resources": {"cpu": "0.5"}})
    run_worker_until_idle(app)
    client.stop("batch")
    client.drain("n2")
    app.client.xgroup_create(app.keys.stream, "indexer", id="0-0")
    app.client.xreadgroup("indexer", "indexer-1", {app.keys.stream: ">"}, count=3)  # 3 pending


def audit_text(url: str, namespace: str) -> str:
    return sched(url, namespace, "audit", "--json").output


def check_round_trip(source: App, target: App, url_from: str, url_to: str) -> None:
    before = contents(source)
    assert contents(target) == before
    a, b = orjson.loads(audit_text(url_from, source.keys.namespace)), orjson.loads(audit_text(url_to, target.keys.namespace))
    assert a.pop("namespace") == source.keys.namespace and b.pop("namespace") == target.keys.namespace
    assert a == b and a["ok"], (a, b)
    # The state checks find the same in both (cluster_problems knows no stopped task: it
    # names those, alike on each side).
    assert cluster_problems(target, settled=False) == cluster_problems(source, settled=False)


# ----------------------------------------------------------------------------- one server
def test_save_then_restore_under_another_name_keeps_every_key_and_the_audit(redis_url, tmp_path):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    path = tmp_path / "state.snap"
    saved = sched(redis_url, source.keys.namespace, "snapshot", "save", path)
    count = len(contents(source))
    assert f"{count} keys" in saved.output and str(path) in saved.output
    copy = fresh("copy")
    restored = sched(redis_url, None, "snapshot", "restore", path, "--namespace", copy)
    assert copy in restored.output and f"{count} keys" in restored.output
    target = App(redis_url=redis_url, namespace=copy)
    check_round_trip(source, target, redis_url, redis_url)
    assert copy in target.store.namespaces()  # workers serving every namespace find it
    # No value names the namespace it came from.
    text = orjson.dumps({k: v[1] for k, v in contents(target).items()}, default=str).decode()
    assert source.keys.namespace not in text
    # The restored namespace schedules on: the drained node, made active again, takes the
    # web task that waited for a node with port 8080 free.
    assert sum(t.state == "assigned" for t in Client(app=target).tasks(job="web")) == 3
    Client(app=target).activate("n2")
    run_worker_until_idle(target)
    problems, _ = cluster_problems(target, settled=False)
    assert [p for p in problems if "unexpected state 'stopped'" not in p] == [], format_problems(problems)
    assert sum(t.state == "assigned" for t in Client(app=target).tasks(job="web")) == 4


def test_restore_with_no_namespace_loads_into_the_namespace_it_was_saved_from(redis_url, tmp_path):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    path = tmp_path / "state.snap.gz"  # gzip-compressed
    sched(redis_url, source.keys.namespace, "snapshot", "save", path)
    assert gzip.open(path).readline().startswith(b'{"sched_snapshot":1')
    before = contents(source)
    source.store.clear_namespace()
    sched(redis_url, None, "snapshot", "restore", path)
    assert contents(source) == before


def test_a_non_empty_namespace_is_refused_in_one_sentence_and_left_as_it_was(redis_url, tmp_path):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    path = tmp_path / "state.snap"
    sched(redis_url, source.keys.namespace, "snapshot", "save", path)
    busy = App(redis_url=redis_url, namespace=fresh())
    busy.store.put_node(make_node("x", cpu="1", memory="1GiB"))
    before = contents(busy)
    result = sched(redis_url, None, "snapshot", "restore", path, "--namespace", busy.keys.namespace, ok=False)
    assert result.exit_code == 2
    message = result.output.strip()
    assert message.startswith("Error: namespace") and "is not empty" in message and message.count(".") == 1, message
    assert contents(busy) == before


@pytest.mark.parametrize("damage, words", [
    (lambda lines: lines[:-1], "cut short"),
    (lambda lines: lines[:2] + lines[3:], "damaged"),
    (lambda lines: [lines[0], b'{"key": "task:x", "ttl": -1, "dump": "not base64!"}\n', *lines[1:]], "line 2"),
    (lambda lines: [b"hello\n"], "not a snapshot"),
    (lambda lines: [lines[0].replace(f'"layout":{CURRENT}'.encode(), b'"layout":99'), *lines[1:]], "key layout 99"),
])
def test_a_damaged_or_foreign_file_is_refused_before_anything_is_written(redis_url, tmp_path, damage, words):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    path = tmp_path / "state.snap"
    sched(redis_url, source.keys.namespace, "snapshot", "save", path)
    path.write_bytes(b"".join(damage(path.read_bytes().splitlines(keepends=True))))
    target = fresh()
    result = sched(redis_url, None, "snapshot", "restore", path, "--namespace", target, ok=False)
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output, result.output
    assert contents(App(redis_url=redis_url, namespace=target)) == {}


@pytest.mark.parametrize("where, words", [
    (lambda tmp: "/nonexistent/dir/x.snap", "folder /nonexistent/dir does not exist."),
    (lambda tmp: tmp, "it is a folder; name a file in it."),
])
def test_a_save_where_no_file_can_be_written_is_one_sentence(redis_url, tmp_path, where, words):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    target = where(tmp_path)
    result = sched(redis_url, source.keys.namespace, "snapshot", "save", target, ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr == f"Error: cannot write the snapshot to {target}: {words}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_restore_cut_short_is_finished_by_running_it_again_and_refuses_another(redis_url, tmp_path):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    path, other = tmp_path / "state.snap", tmp_path / "other.snap"
    sched(redis_url, source.keys.namespace, "snapshot", "save", path)
    reconcile.submit(source.store, parse_job({"id": "later", "resources": {"cpu": "1"}}))
    sched(redis_url, source.keys.namespace, "snapshot", "save", other)
    target = App(redis_url=redis_url, namespace=fresh())
    header, count = snapshot.read_header(path)
    # A restore that died after writing half of the keys.
    assert target.store.begin_restore(header.identity)
    target.store.restore_entries(list(snapshot.entries(path))[:count // 2])
    refused = sched(redis_url, None, "snapshot", "restore", other, "--namespace", target.keys.namespace, ok=False)
    assert refused.exit_code == 2 and "unfinished restore of another snapshot" in refused.output
    sched(redis_url, None, "snapshot", "restore", path, "--namespace", target.keys.namespace)
    assert target.store.restore_marker() is None
    restored = contents(target)
    assert "restoring" not in restored and len(restored) == count


def test_a_change_between_two_pages_makes_the_read_start_again(redis_url, monkeypatch):
    app = App(redis_url=redis_url, namespace=fresh())
    build(app)
    monkeypatch.setattr(snapshots, "PAGE_KEYS", 4)
    monkeypatch.setattr(snapshots, "PAGES_PER_TRIP", 1)
    changed = []

    def write(entry):
        if not changed:  # a submit lands after the first page
            changed.append(reconcile.submit(app.store, parse_job({"id": f"late{len(changed)}",
                                                                   "resources": {"cpu": "1"}})))

    with pytest.raises(snapshots.ChangedWhileRead):
        app.store.dump_namespace(write)
    # A claim announces nothing, yet moves the mark too.
    mark = app.store.change_mark()
    app.queue.claim(1)
    assert app.store.change_mark() != mark
    # Left alone, the same read is whole, and save says how many reads it took.
    assert Client(app=app).snapshot_save(Path("/dev/null"))["tries"] == 1
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # written into, not replaced by a file


def test_a_snapshot_saved_to_a_pipe_is_written_into_it(app, tmp_path):
    reconcile.submit(app.store, parse_job({"id": "web", "resources": {"cpu": "1"}}))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    summary = Client(app=app).snapshot_save(fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert summary["keys"] > 0 and read and read[0].count(b"\n") == summary["keys"] + 2  # header, keys, end


def test_a_namespace_without_a_stream_is_read_with_writes_paused(redis_url, tmp_path):
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    source.store.stream.set_maxlen(0)
    path = tmp_path / "quiet.snap"
    saved = orjson.loads(sched(redis_url, source.keys.namespace, "snapshot", "save", path, "--json").output)
    assert saved["tries"] == 1 and saved["paused_ms"] >= 1
    copy = App(redis_url=redis_url, namespace=fresh("copy"))
    sched(redis_url, None, "snapshot", "restore", path, "--namespace", copy.keys.namespace)
    assert contents(copy) == contents(source)
    refused = sched(redis_url, source.keys.namespace, "snapshot", "save", tmp_path / "no.snap", "--max-pause", "0",
                    ok=False)
    assert refused.exit_code == 2 and "keeps no event stream" in refused.output and not (tmp_path / "no.snap").exists()


@pytest.mark.slow
def test_snapshots_taken_while_workers_place_and_users_submit_each_restore_consistent(redis_url, tmp_path,
                                                                                      monkeypatch):
    """A worker places and a thread submits and scales all along; every snapshot save
    returns is of one moment: restored, its invariants hold (a read cut across a commit
    would hold tasks placed on nodes that do not count them, or the reverse). Pages of 8
    keys, one per round trip, so that each read spans many calls."""
    monkeypatch.setattr(snapshots, "PAGE_KEYS", 8)
    monkeypatch.setattr(snapshots, "PAGES_PER_TRIP", 1)
    app = App(redis_url=redis_url, namespace=fresh())
    for i in range(6):
        app.store.put_node(make_node(f"n{i}", cpu="8", memory="32GiB", labels=[f"zone=z{i % 3}"]))
    stop = threading.Event()
    client = Client(app=app)

    def users():
        i = 0
        while not stop.is_set():
            client.submit({"id": f"j{i % 40}", "replicas": 1 + i % 4, "resources": {"cpu": "0.25", "memory": "64MiB"}})
            i += 1
            time.sleep(0.005)

    placing = SchedulerWorker(App(redis_url=redis_url, namespace=app.keys.namespace), WorkerConfig())
    worker = threading.Thread(target=placing.run, daemon=True)
    submitter = threading.Thread(target=users, daemon=True)
    worker.start()
    submitter.start()
    saved = []
    try:
        while len(saved) < 4:
            path = tmp_path / f"s{len(saved)}.snap"
            saved.append((path, Client(app=app).snapshot_save(path)))  # never NamespaceBusy: it pauses writes
            time.sleep(0.1)
    finally:
        stop.set()
        submitter.join(30)
        placing.stop()
        worker.join(30)
    assert max(summary["keys"] for _, summary in saved) > 10 * 8  # reads of many pages
    for path, summary in saved:
        copy = fresh("copy")
        Client(app=app).snapshot_restore(path, namespace=copy)
        target = App(redis_url=redis_url, namespace=copy)
        problems, totals = cluster_problems(target, settled=False)
        assert not problems, format_problems(problems)
        target.store.clear_namespace()


# ----------------------------------------------------------------------------- Redis Cluster
@pytest.mark.slow
def test_one_server_to_a_cluster_and_back(redis_url, redis_cluster, tmp_path, monkeypatch):
    """Saved on one server, restored into a Redis Cluster (the namespace on the shard of its
    new hash tag), saved there (in pages, under the mark) and restored on the one server
    again: every key, the audit and the state checks the same at each step."""
    cluster_url = redis_cluster.url
    source = App(redis_url=redis_url, namespace=fresh())
    build(source)
    there = tmp_path / "there.snap.gz"
    sched(redis_url, source.keys.namespace, "snapshot", "save", there)
    on_cluster = App(redis_url=cluster_url, namespace=fresh("cl"))
    sched(cluster_url, None, "snapshot", "restore", there, "--namespace", on_cluster.keys.namespace)
    check_round_trip(source, on_cluster, redis_url, cluster_url)
    Client(app=on_cluster).activate("n2")  # it schedules on there
    run_worker_until_idle(on_cluster)
    assert sum(t.state == "assigned" for t in Client(app=on_cluster).tasks(job="web")) == 4
    back = tmp_path / "back.snap"
    monkeypatch.setattr(snapshots, "PAGE_KEYS", 4)  # many pages, under one mark
    with on_cluster.store.writes_paused(10_000):  # the read goes on while writes wait
        assert Client(app=on_cluster).snapshot_save(tmp_path / "paused.snap")["tries"] == 1
    saved = sched(cluster_url, on_cluster.keys.namespace, "snapshot", "save", back, "--json")
    assert orjson.loads(saved.output)["keys"] == len(contents(on_cluster))
    home = App(redis_url=redis_url, namespace=fresh("home"))
    sched(redis_url, None, "snapshot", "restore", back, "--namespace", home.keys.namespace)
    check_round_trip(on_cluster, home, cluster_url, redis_url)
    # A non-empty namespace on the cluster is refused as on one server.
    refused = sched(cluster_url, None, "snapshot", "restore", back, "--namespace", on_cluster.keys.namespace,
                    ok=False)
    assert refused.exit_code == 2 and "is not empty" in refused.output

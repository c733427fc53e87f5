"""The event stream ``sched:{ns}:stream``: every event published on the channel is appended
to it in the same script call, with the same JSON; job events; the bound; reading after
an id, in a consumer group, and watching a job (``Client.events``, ``Client.watch``,
``sched events``), with consumers that die."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from scheduler import Client, SpecError
from scheduler.control import reconcile
from scheduler.control.feed import after_id
from scheduler.model import make_node, parse_job
from scheduler.state.stream import STREAM_MAXLEN

from worker_harness import run_worker_until_idle, wait_until

SCHED = str(Path(sys.executable).parent / "sched")
F_SETPIPE_SZ = 1031  # fcntl: set a pipe's capacity (Linux)


def sid(entry_id: str) -> tuple[int, int]:
    """A stream id as a number pair, for comparing (as text, "5-10" sorts before "5-9")."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def stream_texts(app) -> list[tuple[str, str]]:
    """(id, event text) of every entry kept."""
    return [(entry_id, fields["event"]) for entry_id, fields in app.client.xrange(app.keys.stream)]


def channel_texts(pubsub, quiet_s: float = 0.3) -> list[str]:
    out, last = [], time.monotonic()
    while time.monotonic() - last < quiet_s:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is not None and message["type"] == "message":
            out.append(message["data"])
            last = time.monotonic()
    return out


def job(job_id: str, replicas: int, cpu: str = "1") -> dict:
    return {"id": job_id, "replicas": replicas, "resources": {"cpu": cpu, "memory": "64MiB"}}


def test_the_stream_holds_exactly_what_the_channel_carries(app):
    """Node changes, submits, placements, requeues, moves, preemption-free ends, scaling,
    a new version, a stop and a bulk submit: the channel's messages, in order, are the
    stream's entries, text for text."""
    pubsub = app.client.pubsub()
    pubsub.subscribe(app.keys.events)
    wait_until(lambda: app.client.pubsub_numsub(app.keys.events)[0][1] >= 1, 10, "the subscription")
    try:
        store = app.store
        store.put_node(make_node("n1", cpu="2", memory="4GiB"))
        store.put_node(make_node("n2", cpu="2", memory="4GiB"))
        reconcile.submit(store, parse_job(job("web", 5)))  # one more than fits: it waits unschedulable
        run_worker_until_idle(app)
        store.set_availability("n2", "pause")
        store.set_availability("n2", "active")  # a cluster event: the waiting task moves back
        app.queue.move_all_to_active()
        reconcile.scale(store, "web", 2)
        reconcile.submit(store, parse_job({**job("web", 2), "priority": 60}))  # a new version
        run_worker_until_idle(app)
        reconcile.submit_many(store, [("bulk-a", parse_job(job("bulk-a", 2))), ("bulk-b", parse_job(job("bulk-b", 1)))])
        reconcile.stop(store, "web")
        store.put_node(make_node("n3", cpu="1", memory="1GiB"))
        store.remove_node("n3")
        published = channel_texts(pubsub)
    finally:
        pubsub.close()
    kept = stream_texts(app)
    assert [text for _, text in kept] == published
    kinds = {(e["type"], e.get("state") or e.get("event")) for e in map(orjson.loads, published)}
    assert {("job", "submitted"), ("job", "updated"), ("job", "scaled"), ("job", "stopped"), ("task", "pending"),
            ("task", "assigned"), ("task", "stopped"), ("node", "added"), ("node", "removed")} <= kinds
    assert any(e.get("queue") == "backoff" and "reason" not in e for e in map(orjson.loads, published))


def test_job_events_say_what_happened_to_the_job(app):
    store = app.store
    after = store.stream.last_id()
    reconcile.submit(store, parse_job(job("api", 2)))
    reconcile.submit(store, parse_job(job("api", 3)))  # only replicas change: scaled
    reconcile.submit(store, parse_job({**job("api", 3), "priority": 70}))  # anything else: a new version
    reconcile.scale(store, "api", 1)
    reconcile.stop(store, "api")
    reconcile.stop(store, "api")  # stopped already: nothing new to say about the job
    reconcile.submit_many(store, [("many", parse_job(job("many", 2)))])
    global_spec = parse_job({"id": "everywhere", "type": "global", "resources": {"cpu": "0.1", "memory": "8MiB"}})
    reconcile.submit(store, global_spec)
    jobs = [{k: v for k, v in e.items() if k != "ts"} for _, e in store.stream.read(after, count=1000)[0]
            if e["type"] == "job"]
    assert jobs == [
        {"type": "job", "id": "api", "event": "submitted", "version": 1, "replicas": 2},
        {"type": "job", "id": "api", "event": "scaled", "version": 1, "replicas": 3},
        {"type": "job", "id": "api", "event": "updated", "version": 2, "replicas": 3},
        {"type": "job", "id": "api", "event": "scaled", "version": 2, "replicas": 1},
        {"type": "job", "id": "api", "event": "stopped", "version": 2},
        {"type": "job", "id": "many", "event": "submitted", "version": 1, "replicas": 2},
        {"type": "job", "id": "everywhere", "event": "submitted", "version": 1},
    ]
    # A job's event comes before its tasks' events of the same call.
    events = [e for _, e in store.stream.read(after, count=1000)[0]]
    submitted = next(i for i, e in enumerate(events) if e.get("event") == "submitted" and e["id"] == "many")
    assert [e.get("id") for e in events[submitted + 1:submitted + 3]] == ["many.0", "many.1"]


def test_moves_between_the_waiting_queues_are_announced(clocked_app, clock):
    app = clocked_app
    store, queue = app.store, app.queue
    store.put_node(make_node("n1", cpu="1", memory="1GiB"))
    reconcile.submit(store, parse_job(job("wide", 2)))
    claim = queue.claim(10)
    queue.fail(claim.token, [("wide.1", {"message": "no room"})])  # no event since the claim: unschedulable
    after = store.stream.last_id()
    store.put_node(make_node("n2", cpu="1", memory="1GiB"))  # a cluster event
    assert queue.move_all_to_active() == (0, 1)  # still inside its backoff window
    clock.advance(1_001)
    assert queue.flush_backoff() == 1
    moved = [(e["id"], e["state"], e["queue"]) for _, e in store.stream.read(after)[0] if e["type"] == "task"]
    assert moved == [("wide.1", "pending", "backoff"), ("wide.1", "pending", "active")]


def test_fields_for_every_event_of_a_store_are_carried_by_both(app):
    """What a Store's calls add to every event (who made the change, say) reaches the
    channel and the stream alike, before ``ts``."""
    store = app.store
    store.event_fields = {"by": "ops"}
    after = store.stream.last_id()
    store.put_node(make_node("n1", cpu="1", memory="1GiB"))
    reconcile.submit(store, parse_job(job("one", 1)))
    events = [e for _, e in store.stream.read(after)[0]]
    assert [e["by"] for e in events] == ["ops"] * 3
    assert all(list(e)[-2:] == ["by", "ts"] for e in events)


def test_the_stream_is_trimmed_at_its_bound(app):
    client = Client(app=app)
    assert client.stream_info()["maxlen"] == STREAM_MAXLEN
    client.keep_events(100)
    store = app.store
    store.put_node(make_node("n1", cpu="1", memory="1GiB"))
    for _ in range(600):  # 1200 events
        store.set_availability("n1", "pause")
        store.set_availability("n1", "active")
    node_size = int(app.client.config_get("stream-node-max-entries")["stream-node-max-entries"])
    info = client.stream_info()
    assert 100 <= info["entries"] <= 100 + node_size  # MAXLEN ~: whole nodes of entries are dropped
    assert info["memory_bytes"] > 0
    newest = orjson.loads(app.client.xrevrange(app.keys.stream, count=1)[0][1]["event"])
    assert newest == {"type": "node", "name": "n1", "availability": "active", "ts": newest["ts"]}
    client.keep_events(10)  # a smaller bound trims at once
    assert client.stream_info()["entries"] <= 10 + node_size


def test_a_bound_of_zero_keeps_no_stream_and_the_channel_still_carries_all(app, sched):
    client = Client(app=app)
    sched("events", "keep", "0")
    app.store.put_node(make_node("n1", cpu="1", memory="1GiB"))
    assert app.client.exists(app.keys.stream) == 0
    with pytest.raises(SpecError, match="stream of namespace .* is off"):
        client.events(since="start")
    assert "is off" in sched("events", "--since", "start", ok=False).output
    sched("events", "keep", "1000")
    app.store.set_availability("n1", "pause")
    assert app.client.xlen(app.keys.stream) == 1


def test_since_reads_ids_times_and_ages():
    now = 1_795_305_669_501
    assert after_id("start", now) == "0-0"
    assert after_id("1795305669501-3", now) == "1795305669501-3"
    assert after_id("10m", now) == f"{now - 600_000 - 1}-18446744073709551615"
    assert after_id("1.5s", now) == f"{now - 1500 - 1}-18446744073709551615"
    assert after_id("1970-01-01T00:00:01+00:00", now) == "999-18446744073709551615"
    for bad in ("yesterday", "12", "-5m", ""):
        with pytest.raises(SpecError):
            after_id(bad, now)


def test_events_since_an_id_give_every_later_event_once_and_filters_keep_their_part(app):
    client = Client(app=app)
    store = app.store
    store.put_node(make_node("n1", cpu="4", memory="4GiB"))
    reconcile.submit(store, parse_job(job("a", 2)))
    middle = store.stream.last_id()
    reconcile.submit(store, parse_job(job("b", 2)))
    run_worker_until_idle(app)
    everything = stream_texts(app)
    later = [(i, orjson.loads(t)) for i, t in everything if sid(i) > sid(middle)]
    assert list(client.events(since=middle, timeout=0.3)) == later
    assert list(client.events(since="start", timeout=0.3)) == [(i, orjson.loads(t)) for i, t in everything]
    about_a = list(client.events(since="start", job="a", timeout=0.3))
    assert [(e["type"], e.get("state") or e.get("event")) for _, e in about_a] == [
        ("job", "submitted"), ("task", "pending"), ("task", "pending"), ("task", "assigned"), ("task", "assigned")]
    assert {e["type"] for _, e in client.events(since="start", types="node", timeout=0.3)} == {"node"}
    on_n1 = list(client.events(since="start", node="n1", timeout=0.3))
    assert {e.get("node", e.get("name")) for _, e in on_n1} == {"n1"} and len(on_n1) == 5  # added, 4 placements


# ----------------------------------------------------------------------------- consumers that die
def _producer(app, jobs: int, replicas: int, pause_s: float, gate: threading.Event | None = None):
    """Submit jobs one by one in a thread (each ``replicas`` + 1 events); with ``gate``,
    the second half only once it is set."""
    def run():
        for i in range(jobs):
            if gate is not None and i == jobs // 2:
                gate.wait(60)
            reconcile.submit(app.store, parse_job(job(f"p{i}", replicas)))
            time.sleep(pause_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _events_process(redis_url: str, namespace: str, out, *args) -> subprocess.Popen:
    return subprocess.Popen([SCHED, "--redis-url", redis_url, "--namespace", namespace, "events", "--json", *args],
                            stdout=out, stderr=subprocess.PIPE)


def _complete_lines(path: Path) -> list[dict]:
    """The lines written whole (a process killed mid-write leaves a part of one last)."""
    text = path.read_text()
    return [orjson.loads(line) for line in text.split("\n")[:-1]]


def test_a_consumer_killed_mid_stream_resumes_from_its_last_id_and_sees_every_event_once(app, redis_url, namespace,
                                                                                         tmp_path):
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    start = app.store.stream.last_id()
    killed = threading.Event()
    producer = _producer(app, jobs=60, replicas=20, pause_s=0.01, gate=killed)  # 1260 events, half after the kill
    with first_out.open("wb") as out:
        first = _events_process(redis_url, namespace, out, "--since", start)
        wait_until(lambda: len(_complete_lines(first_out)) >= 200, 30, "the first consumer to print 200 events")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    killed.set()
    handled = _complete_lines(first_out)
    with second_out.open("wb") as out:
        second = _events_process(redis_url, namespace, out, "--since", handled[-1]["stream_id"])
        try:
            producer.join(60)
            last = app.store.stream.last_id()
            wait_until(lambda: (lines := _complete_lines(second_out)) and lines[-1]["stream_id"] == last, 30,
                       "the second consumer to catch up")
        finally:
            second.send_signal(signal.SIGINT)
            assert second.wait(10) == 0
    seen = [line["stream_id"] for line in handled + _complete_lines(second_out)]
    expected = [entry_id for entry_id, _ in stream_texts(app) if sid(entry_id) > sid(start)]
    assert len(expected) == 60 * 21
    assert seen == expected  # every event, once, in order
    # What was printed is the event itself, with its id first.
    line = handled[0]
    assert list(line)[:2] == ["stream_id", "type"] and line["type"] == "job"


def _pending_of(app, group: str, consumer: str) -> set[str]:
    return {p["message_id"] for p in app.client.xpending_range(app.keys.stream, group, "-", "+", 100_000, consumer)}


def test_two_consumers_of_a_group_split_the_events_and_a_dead_ones_are_claimed(app, redis_url, namespace, tmp_path):
    """Consumer a stops reading (its output is a pipe nobody reads: it blocks, holding the
    events it took), b handles the rest; a is killed; b, restarted with a short idle time,
    claims what a left pending. Every event is acknowledged by exactly one consumer."""
    start = app.store.stream.last_id()
    b_first, b_second = tmp_path / "b1.jsonl", tmp_path / "b2.jsonl"
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 16384)  # a blocks after about 130 events
    a = subprocess.Popen([SCHED, "--redis-url", redis_url, "--namespace", namespace, "events", "--json",
                          "--group", "g", "--consumer", "a", "--since", start], stdout=write_end,
                         stderr=subprocess.DEVNULL)
    os.close(write_end)
    try:
        wait_until(lambda: app.store.stream.groups(), 30, "the group to exist")
        with b_first.open("wb") as out:
            b = _events_process(redis_url, namespace, out, "--group", "g", "--consumer", "b")
            _producer(app, jobs=60, replicas=20, pause_s=0.01).join(60)
            last = app.store.stream.last_id()
            # Every event was delivered, and b printed (and acknowledged) all of its own;
            # a holds what it took and cannot print.
            wait_until(lambda: app.store.stream.groups()[0]["last_delivered"] == last
                       and not _pending_of(app, "g", "b"), 60, "the group to deliver every event")
            a.send_signal(signal.SIGKILL)
            a.wait(10)
            b.send_signal(signal.SIGINT)
            assert b.wait(10) == 0
    finally:
        os.close(read_end)
    left_by_a = _pending_of(app, "g", "a")
    assert left_by_a  # a died holding events
    by_b = [line["stream_id"] for line in _complete_lines(b_first)]
    everything = [entry_id for entry_id, _ in stream_texts(app) if sid(entry_id) > sid(start)]
    acked_by_a = set(everything) - set(by_b) - left_by_a
    assert by_b and acked_by_a  # the events were split between the two
    with b_second.open("wb") as out:
        b = _events_process(redis_url, namespace, out, "--group", "g", "--consumer", "b", "--claim-idle", "0.05",
                            "--count", str(len(left_by_a)))
        assert b.wait(30) == 0, b.stderr.read()
    claimed = [line["stream_id"] for line in _complete_lines(b_second)]
    assert set(claimed) == left_by_a
    assert app.store.stream.groups()[0]["pending"] == 0
    assert sorted([*acked_by_a, *by_b, *claimed], key=sid) == everything  # each acknowledged by exactly one consumer


# ----------------------------------------------------------------------------- watch
def test_watch_follows_a_burst_from_a_consistent_snapshot(app):
    """A watch opened in the middle of a burst (tasks created, placed, started, ended,
    replaced, scaled down) ends with the final state of every task of the job, and each
    task's changes after the snapshot are exactly those the stream recorded: none
    missed, none twice."""
    store = app.store
    for i in range(4):
        store.put_node(make_node(f"n{i}", cpu="8", memory="8GiB"))
    reconcile.submit(store, parse_job(job("burst", 30, cpu="0.5")))
    run_worker_until_idle(app)
    done = threading.Event()

    def burst():
        for task in store.tasks(store.job_task_ids("burst"))[:10]:
            store.start_task(task.id, task.node)
        for task in store.tasks(store.job_task_ids("burst"))[:5]:
            reconcile.task_ended(store, task, succeeded=False, message="boom")  # a service: replaced
        reconcile.scale(store, "burst", 20)
        run_worker_until_idle(app)
        done.set()

    thread = threading.Thread(target=burst, daemon=True)
    thread.start()  # the snapshot is taken while the burst goes on
    seen = list(Client(app=app).watch("burst", timeout=2.0))
    thread.join(30)
    assert done.is_set()
    final = {change.id: (change.state, change.node) for change in seen}
    actual = {t.id: (t.state, (t.node or "") if t.state != "pending" else "")
              for t in store.tasks(store.job_task_ids("burst"))}
    assert final == actual
    position = seen[0].stream_id
    recorded = {c.id: [(c.state, c.node)] for c in seen if c.stream_id == position}  # the snapshot
    for entry_id, text in stream_texts(app):
        event = orjson.loads(text)
        if sid(entry_id) <= sid(position) or event["type"] != "task" or not event["id"].startswith("burst."):
            continue
        now = (event["state"], event.get("node", ""))
        history = recorded.setdefault(event["id"], [])
        if not history or history[-1] != now:
            history.append(now)
    watched: dict[str, list] = {}
    for change in seen:
        watched.setdefault(change.id, []).append((change.state, change.node))
    assert watched == recorded
    assert any(len(history) > 1 for history in watched.values())  # changes were seen, not only the snapshot

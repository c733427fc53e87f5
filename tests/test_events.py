"""The events channel: one JSON message per state change, for anyone following over pub/sub.

The subscription is made before anything happens, so every event of the run must arrive:
the node being added, each task queued as pending, each placement (naming its node), and
the attempt that left a task unschedulable. ``sched events --count N`` prints them.
"""

from __future__ import annotations

import threading
import time

import orjson
from click.testing import CliRunner

from scheduler.control import reconcile
from scheduler.tools.cli import main
from scheduler.model import make_node, parse_job

from worker_harness import cluster_problems, format_problems, run_worker_until_idle, wait_until


def drain(pubsub, quiet_s: float = 0.3, limit_s: float = 10.0) -> list[bytes | str]:
    """Every message until none has come for ``quiet_s`` seconds."""
    messages = []
    deadline = time.monotonic() + limit_s
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is not None and message["type"] == "message":
            messages.append(message["data"])
            last = time.monotonic()
    return messages


def test_events_follow_node_task_and_placement_changes(app):
    pubsub = app.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(app.keys.events)
    wait_until(lambda: app.client.pubsub_numsub(app.keys.events)[0][1] >= 1, 10, "the subscription")
    try:
        app.store.put_node(make_node("n1", cpu="2", memory="4GiB", labels=["zone=eu-1"]))
        spec = parse_job({"id": "web", "replicas": 3, "resources": {"cpu": "1", "memory": "512MiB"}})
        task_ids = reconcile.submit(app.store, spec)["tasks"]
        stats = run_worker_until_idle(app)
        assert stats.placed == 2
        raw = drain(pubsub)
    finally:
        pubsub.close()

    events = [orjson.loads(data) for data in raw]  # every message is JSON...
    assert all(isinstance(e, dict) and isinstance(e.get("type"), str) for e in events), events  # ...with a type

    def index(predicate) -> list[int]:
        return [i for i, e in enumerate(events) if predicate(e)]

    added = index(lambda e: e["type"] == "node" and e.get("name") == "n1" and e.get("event") == "added")
    assert len(added) == 1, events
    tasks = {t.id: t for t in app.store.tasks(task_ids)}
    assigned_ids = {t for t, fields in tasks.items() if fields.state == "assigned"}
    assert len(assigned_ids) == 2
    for task_id in task_ids:
        queued = index(lambda e: e["type"] == "task" and e.get("id") == task_id and e.get("state") == "pending"
                       and e.get("job") == "web" and "queue" not in e)
        assert len(queued) == 1, (task_id, events)
        assert added[0] < queued[0]  # the events come in the order things happened
        placed = index(lambda e: e["type"] == "task" and e.get("id") == task_id and e.get("state") == "assigned")
        if task_id in assigned_ids:
            assert len(placed) == 1, (task_id, events)
            event = events[placed[0]]
            assert event["node"] == tasks[task_id].node == "n1"
            assert event["job"] == "web"
            assert queued[0] < placed[0]
        else:
            assert placed == [], (task_id, events)
            waiting = index(lambda e: e["type"] == "task" and e.get("id") == task_id
                            and e.get("state") == "pending" and e.get("queue") == "unschedulable")
            assert waiting and queued[0] < waiting[0], (task_id, events)
    problems, _ = cluster_problems(app, settled=True)
    assert not problems, format_problems(problems)


def test_sched_events_prints_json_lines(app, redis_url, namespace):
    runner = CliRunner()
    count = 5  # node added, job submitted, then three tasks pending
    result = {}
    start = app.store.stream.last_id()

    def follow():
        result["r"] = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace,
                                           "events", "--json", "--since", start, "--count", str(count)])

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    app.store.put_node(make_node("n1", cpu="2", memory="4GiB"))
    reconcile.submit(app.store, parse_job({"id": "batch1", "replicas": 3, "resources": {"cpu": "1", "memory": "1GiB"}}))
    thread.join(timeout=20)
    if thread.is_alive():  # unblock it before failing, so no thread is left reading
        for _ in range(count):
            app.store.set_availability("n1", "pause")
            app.store.set_availability("n1", "active")
        thread.join(timeout=5)
        raise AssertionError("sched events --count did not stop after the expected events")
    outcome = result["r"]
    assert outcome.exit_code == 0, (outcome.output, outcome.exception)
    lines = outcome.stdout.splitlines()
    assert len(lines) == count, lines
    events = [orjson.loads(line) for line in lines]
    ids = [e.pop("stream_id") for e in events]
    assert ids == [entry_id for entry_id, _ in app.client.xrange(app.keys.stream)]
    assert events[0] == {"type": "node", "name": "n1", "event": "added", "ts": events[0]["ts"]}
    assert events[1] == {"type": "job", "id": "batch1", "event": "submitted", "version": 1, "replicas": 3,
                         "ts": events[1]["ts"]}
    assert [(e["type"], e["id"], e["state"]) for e in events[2:]] == [
        ("task", f"batch1.{i}", "pending") for i in range(3)]


def test_sched_events_reads_the_channel_when_no_stream_is_kept(app, redis_url, namespace, sched):
    sched("events", "keep", "0")
    runner = CliRunner()
    result = {}

    def follow():
        result["r"] = runner.invoke(main, ["--redis-url", redis_url, "--namespace", namespace, "events", "--count", "1"])

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    wait_until(lambda: app.client.pubsub_numsub(app.keys.events)[0][1] >= 1, 10, "sched events to subscribe")
    app.store.put_node(make_node("n1", cpu="2", memory="4GiB"))
    thread.join(timeout=20)
    assert not thread.is_alive()
    outcome = result["r"]
    assert outcome.exit_code == 0, (outcome.output, outcome.exception)
    assert outcome.stdout.split("  ")[1].strip() == "node n1 added"  # the time, then the event in words

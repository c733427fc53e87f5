"""Readers of the event stream across a failover, with real servers (tests/redis_topologies.py).

On a 3-master Redis Cluster and under Sentinel, ``sched events`` (a process),
``Client.events`` (a thread), a consumer of a consumer group (a thread) and the
dashboard's live stream (server-sent events) follow a namespace; the master (of its
slot) is SIGKILLed and its replica promoted; events are made at once, while the readers
are still finding the new master. Each reader ends with every event the new master's
stream holds, once, in order: they resumed from the stream, where a channel subscriber
would have lost what was published while it was away (``sched events`` is stopped,
SIGSTOP, from before the kill until after the last event).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import orjson
import pytest

from scheduler import Client
from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.app import App
from scheduler.tools.web import Background
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from redis_topologies import wait_until

SCHED = str(Path(sys.executable).parent / "sched")
WAIT_S = 90  # deadlines only
END = "end-marker"  # the node whose registration is the last event


def job(job_id: str) -> dict:
    return {"id": job_id, "replicas": 3, "resources": {"cpu": "1", "memory": "1GiB"}}


def place(app: App, job_id: str) -> None:
    reconcile.submit(app.store, parse_job(job(job_id)))
    assert SchedulerWorker(app, WorkerConfig(until_idle=True)).run().placed == 3


class Reader(threading.Thread):
    """Collects (stream id, event) until the end marker, from ``read()``."""

    def __init__(self, read):
        super().__init__(daemon=True)
        self.read, self.seen, self.error = read, [], None

    def run(self):
        try:
            for entry_id, event in self.read():
                self.seen.append((entry_id, event))
                if event.get("type") == "node" and event.get("name") == END:
                    return
        except Exception as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc


def sse_entries(url: str, namespace: str):
    """The dashboard's live stream, as (id, event)."""
    with httpx2.Client(timeout=httpx2.Timeout(10, read=WAIT_S)) as client:
        with client.stream("GET", f"{url}/api/events", params={"ns": namespace}) as response:
            entry_id = None
            for line in response.iter_lines():
                if line.startswith("id: "):
                    entry_id = line[4:]
                elif line.startswith("data: {\"type\""):
                    yield entry_id, orjson.loads(line[6:])


def ids_of(lines: list[str]) -> list[str]:
    return [orjson.loads(line)["stream_id"] for line in lines if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
def test_readers_of_the_stream_carry_on_across_a_failover(topology, request, tmp_path):
    namespace = "fo-stream"
    key = f"sched:{{{namespace}}}:stream"
    if topology == "cluster":
        setup = request.getfixturevalue("cluster_factory")()
        fail_over = lambda: setup.kill_master_of(key)  # noqa: E731
    else:
        setup = request.getfixturevalue("sentinel_factory")()
        fail_over = setup.kill_master
    url = setup.url
    app = App(redis_url=url, namespace=namespace)
    for i in range(2):
        app.store.put_node(make_node(f"n{i}", cpu="8", memory="16GiB"))
    start = app.store.stream.last_id()
    out = tmp_path / "events.jsonl"
    with out.open("wb") as sink, Background(App(redis_url=url, namespace=namespace)) as web:
        cli = subprocess.Popen([SCHED, "--redis-url", url, "--namespace", namespace, "events", "--json",
                                "--since", start], stdout=sink, stderr=subprocess.PIPE)
        client = Client(app=App(redis_url=url, namespace=namespace))
        api = Reader(lambda: client.events(since=start, timeout=WAIT_S))
        group = Reader(lambda: Client(app=App(redis_url=url, namespace=namespace)).events(
            since=start, group="g", consumer="c1", timeout=WAIT_S))
        dashboard = Reader(lambda: sse_entries(web, namespace))
        try:
            api.start()
            group.start()
            dashboard.start()

            def page_is_live() -> bool:
                app.store.put_node(make_node("probe", cpu="1", memory="1GiB"))  # an event (added, then updated)
                return bool(dashboard.seen)

            wait_until(page_is_live, WAIT_S, "the dashboard's stream to be live", 0.5)
            place(app, "before")
            wait_until(lambda: len(ids_of(out.read_text().splitlines())) >= 8, WAIT_S, "sched events to print")

            cli.send_signal(signal.SIGSTOP)  # away through the failover and what follows it
            killed, promoted = fail_over()
            assert killed != promoted
            after = App(redis_url=url, namespace=namespace)
            place(after, "after")
            after.store.put_node(make_node(END, cpu="1", memory="1GiB"))
            cli.send_signal(signal.SIGCONT)  # its connection went with the old master: it must read the stream
            kept = [entry_id for entry_id, _ in after.client.xrange(key, min=f"({start}")]

            wait_until(lambda: kept[-1] in ids_of(out.read_text().splitlines()), WAIT_S,
                       "sched events to print the last event")
            api.join(WAIT_S)
            group.join(WAIT_S)
            dashboard.join(WAIT_S)
        finally:
            cli.send_signal(signal.SIGCONT)
            cli.terminate()
            cli.wait(10)
    assert api.error is None and group.error is None and dashboard.error is None, (api.error, group.error,
                                                                                   dashboard.error)
    placed_after = [e for _, e in api.seen if e.get("state") == "assigned" and e.get("job") == "after"]
    assert len(placed_after) == 3
    assert ids_of(out.read_text().splitlines()) == kept  # every event the new master kept, once, in order
    assert [entry_id for entry_id, _ in api.seen] == kept
    assert [entry_id for entry_id, _ in group.seen] == kept  # a consumer group's state fails over with the stream
    seen_by_page = [entry_id for entry_id, _ in dashboard.seen]
    assert seen_by_page == kept[kept.index(seen_by_page[0]):]  # from when the page connected: all, once
    assert kept.index(seen_by_page[0]) < kept.index(next(i for i, e in api.seen if e.get("job") == "before"))

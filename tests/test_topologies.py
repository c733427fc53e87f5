"""Scheduling on a Redis Cluster and under Sentinel, with real servers (tests/redis_topologies.py).

Each topology runs the whole path of one namespace: nodes registered, a job submitted,
a scheduler worker placing it, the audit finding nothing wrong. On the cluster, two
namespaces whose hash tags land on different masters are scheduled side by side, a
pipeline meets a node that has lost its scripts, and events reach subscribers. A wrong
password is one sentence with the password masked. Failovers (SIGKILL of a master)
are survived by a new App, and by a worker that keeps running through them.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
import redis
from redis.exceptions import NoScriptError

from scheduler.control import reconcile
from scheduler.control.audit import audit
from scheduler.model import ASSIGNED, make_node, parse_job
from scheduler.model.errors import RedisUnavailable, SpecError
from scheduler.state.app import App
from scheduler.state.connection import client_for, connect, mask_url
from scheduler.state.subscribe import Follower
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from redis_topologies import PASSWORD, cluster_nodes, plain_client, wait_until
from worker_harness import cluster_problems, format_problems

SCHED = str(Path(sys.executable).parent / "sched")
WAIT_S = 60  # deadlines only: a healthy run takes a fraction of this


def spread_job(job_id: str, replicas: int = 4) -> dict:
    return {"id": job_id, "replicas": replicas, "resources": {"cpu": "1", "memory": "1GiB"},
            "preferences": [{"spread": "node.labels.zone"}]}


def register_nodes(app: App, count: int = 3) -> None:
    for i in range(count):
        app.store.put_node(make_node(f"n{i}", cpu="4", memory="8GiB", labels=[f"zone=z{i % 2}"]))


def states(app: App, job_id: str) -> dict[str, str]:
    return {task.id: task.state for task in app.store.tasks(app.store.job_task_ids(job_id))}


def all_assigned(app: App, job_id: str, count: int) -> bool:
    found = states(app, job_id)
    return len(found) == count and set(found.values()) == {ASSIGNED}


def schedule_and_check(app: App, job_id: str = "web", replicas: int = 4) -> None:
    """Submit a job, run a worker until idle, check every task is placed and all is consistent."""
    reconcile.submit(app.store, parse_job(spread_job(job_id, replicas)))
    stats = SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    assert stats.placed == replicas
    assert all_assigned(app, job_id, replicas), states(app, job_id)
    report = audit(app.store)
    assert report.ok, report.problems
    problems, _ = cluster_problems(app)
    assert not problems, format_problems(problems)


class RunningWorker:
    """A scheduler worker running in a thread until stopped (not ``until_idle``)."""

    def __init__(self, app: App):
        self.worker = SchedulerWorker(app, WorkerConfig())
        self.thread = threading.Thread(target=self.worker.run, name="running-worker", daemon=True)
        self.thread.start()

    def stop(self):
        self.worker.stop()
        self.thread.join(timeout=WAIT_S)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.worker.stats


def one_sentence(message: str) -> None:
    assert "\n" not in message and message.endswith("."), message
    assert PASSWORD not in message and "Traceback" not in message, message


# ----------------------------------------------------------------------------- URLs (no server)
@pytest.mark.parametrize("url, masked", [
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://user:p%40ss@host", "redis://user:***@host"),
    ("rediss://user:pw@host:6380/1?ssl_cert_reqs=none", "rediss://user:***@host:6380/1?ssl_cert_reqs=none"),
    ("unix://:pw@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
    ("redis://host:6379", "redis://host:6379"),
    ("redis://user@host", "redis://user@host"),
    ("redis+cluster://:pw@a:7000,b:7001,c:7002", "redis+cluster://:***@a:7000,b:7001,c:7002"),
    ("rediss+cluster://u:a:b@c@a:7000/", "rediss+cluster://u:***@a:7000/"),
    ("redis+sentinel://:pw@a:26379,b:26379/mymaster?db=1&sentinel_password=spw",
     "redis+sentinel://:***@a:26379,b:26379/mymaster?db=1&sentinel_password=***"),
    ("not a url", "not a url"),
])
def test_mask_url_hides_every_password(url, masked):
    assert mask_url(url) == masked


@pytest.mark.parametrize("url, words", [
    ("memcached://:secret@host:11211", "use redis://"),
    ("redis+cluster://:secret@host:7000/3", "only database 0"),
    ("redis+sentinel://:secret@host:26379", "master-name"),
    ("redis+sentinel://:secret@host:26379/m?db=x", "is not a number"),
    ("redis+cluster://:secret@host:port", "is not a number"),
])
def test_a_bad_url_is_one_sentence_with_the_password_masked(url, words):
    with pytest.raises(SpecError) as caught:
        client_for(url)
    message = str(caught.value)
    assert words in message and "***" in message and "secret" not in message, message
    assert "\n" not in message and message.endswith("."), message


# ----------------------------------------------------------------------------- Redis Cluster
@pytest.mark.slow
def test_scheduling_on_a_redis_cluster(redis_cluster):
    app = App(redis_url=redis_cluster.url, namespace="cl-basic")
    assert isinstance(app.client, redis.RedisCluster)
    register_nodes(app)
    schedule_and_check(app)


@pytest.mark.slow
def test_two_namespaces_on_different_shards_are_both_scheduled(redis_cluster):
    client = connect(redis_cluster.url)

    def master(namespace: str) -> int:
        return client.get_node_from_key(f"sched:{{{namespace}}}:q:active").port

    first = "shard-a"
    second = next(f"shard-{i}" for i in range(1000) if master(f"shard-{i}") != master(first))
    apps = [App(redis_url=redis_cluster.url, namespace=ns) for ns in (first, second)]
    for app in apps:
        register_nodes(app)
    for app in apps:
        schedule_and_check(app, job_id=f"job-{app.keys.namespace}")
    # Each namespace's keys are on its own master, and only there.
    for app, other in (apps, apps[::-1]):
        key = app.keys.job(f"job-{app.keys.namespace}")
        assert plain_client(master(app.keys.namespace)).exists(key) == 1
        assert master(other.keys.namespace) != master(app.keys.namespace)


@pytest.mark.slow
def test_scripts_reload_on_a_cluster_node_that_lost_them(redis_cluster):
    """A promoted replica has none of its master's scripts; SCRIPT FLUSH is the same case."""
    app = App(redis_url=redis_cluster.url, namespace="cl-scripts")
    register_nodes(app, 1)
    client = app.client
    keys = [app.keys.tally_job("x"), app.keys.faults("x"), app.keys.job("x")]

    client.script_flush()
    with client.pipeline(transaction=False) as pipe:  # queued by SHA: the caller reloads
        app.scripts.queue(pipe, "tallies", keys, [0])
        with pytest.raises(NoScriptError):
            pipe.execute()
    app.scripts.load_all()
    with client.pipeline(transaction=False) as pipe:
        app.scripts.queue(pipe, "tallies", keys, [0])
        assert pipe.execute() == [[[], []]]

    client.script_flush()
    with client.pipeline(transaction=False) as pipe:  # a Script object on a cluster pipeline
        app.store.node_put(make_node("n9", cpu="1", memory="1GiB"), client=pipe)
        pipe.execute()
    client.script_flush()
    assert app.store.put_node(make_node("n8", cpu="1", memory="1GiB"))  # a direct call reloads
    assert {"n0", "n8", "n9"} <= set(app.store.node_names())


@pytest.mark.slow
def test_events_reach_subscribers_on_a_cluster(redis_cluster):
    """Scripts PUBLISH on the namespace's master; the cluster bus carries each message to
    every node, so a subscriber on another master hears it as well as one that
    a Follower put on the namespace's own node."""
    app = App(redis_url=redis_cluster.url, namespace="cl-events")
    home = app.client.get_node_from_key(app.keys.events).port
    elsewhere = next(port for port, node in cluster_nodes(plain_client(home)).items()
                     if node["role"] == "master" and port != home)
    remote = plain_client(elsewhere).pubsub(ignore_subscribe_messages=True)
    remote.subscribe(app.keys.events)
    heard, subscribed, done = [], threading.Event(), threading.Event()

    def listen():
        follower = Follower(connect(redis_cluster.url), app.keys.events, on_subscribed=subscribed.set)
        try:
            while not done.is_set():
                data = follower.next(0.1)
                if data is not None:
                    heard.append(orjson.loads(data))
        finally:
            follower.close()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        assert subscribed.wait(WAIT_S)
        register_nodes(app)
        schedule_and_check(app, replicas=2)
        placed = lambda events: {e["id"] for e in events if e.get("type") == "task" and e.get("state") == ASSIGNED}
        wait_until(lambda: placed(heard) == {"web.0", "web.1"}, WAIT_S, "the follower to hear both placements")
        remote_heard = []

        def remote_has_both():
            message = remote.get_message(timeout=0.1)
            if message is not None:
                remote_heard.append(orjson.loads(message["data"]))
            return placed(remote_heard) == {"web.0", "web.1"}

        wait_until(remote_has_both, WAIT_S, "a subscriber on another master to hear both placements")
    finally:
        done.set()
        thread.join(WAIT_S)
        remote.close()


# ----------------------------------------------------------------------------- Sentinel
@pytest.mark.slow
def test_scheduling_under_sentinel(redis_sentinel):
    app = App(redis_url=redis_sentinel.url, namespace="se-basic")
    register_nodes(app)
    schedule_and_check(app)


@pytest.mark.slow
def test_rq_runs_beside_sentinel_but_not_on_a_cluster(redis_sentinel, redis_cluster, monkeypatch):
    rq_client = App(redis_url=redis_sentinel.url, namespace="se-rq").rq_client
    rq_client.set("rq-probe", "x")
    assert rq_client.get("rq-probe") == b"x"  # undecoded, as RQ wants
    with pytest.raises(RedisUnavailable) as caught:
        App(redis_url=redis_cluster.url, namespace="cl-rq").rq_client
    one_sentence(str(caught.value))
    monkeypatch.setenv("SCHED_RQ_URL", redis_sentinel.url)
    assert App(redis_url=redis_cluster.url, namespace="cl-rq").rq_client.get("rq-probe") == b"x"


# ----------------------------------------------------------------------------- passwords
@pytest.mark.slow
@pytest.mark.parametrize("topology", ["redis_cluster", "redis_sentinel"])
def test_a_wrong_password_is_one_sentence_with_the_password_masked(topology, request):
    setup = request.getfixturevalue(topology)
    wrong = setup.url.replace(f":{PASSWORD}@", ":not-the-password@")
    for url in (wrong, setup.url.replace(f":{PASSWORD}@", "@")):
        with pytest.raises(RedisUnavailable) as caught:
            App(redis_url=url, namespace="pw").client
        message = str(caught.value)
        one_sentence(message)
        assert "not-the-password" not in message and message.startswith(f"cannot reach Redis at {mask_url(url)}: ")
    assert "invalid username-password pair" in str(caught.value) or "requires a password" in str(caught.value)
    # The command line says the same, on one line, with no traceback.
    done = subprocess.run([SCHED, "--redis-url", wrong, "--namespace", "pw", "node", "ls"],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 1 and done.stdout == ""
    one_sentence(done.stderr.strip())
    assert "not-the-password" not in done.stderr and "***" in done.stderr


@pytest.mark.slow
def test_the_password_may_come_from_the_environment(redis_cluster, redis_sentinel, monkeypatch):
    monkeypatch.setenv("SCHED_REDIS_PASSWORD", PASSWORD)
    for url in (redis_cluster.url, redis_sentinel.url):
        assert connect(url.replace(f":{PASSWORD}@", "")).ping()
    monkeypatch.setenv("SCHED_REDIS_PASSWORD", "not-the-password")
    with pytest.raises(RedisUnavailable) as caught:
        connect(redis_cluster.url.replace(f":{PASSWORD}@", ""))
    assert "not-the-password" not in str(caught.value)


# ----------------------------------------------------------------------------- failovers
def carry_on_after_failover(url: str, fail_over, namespace: str) -> None:
    """Place job a with a running worker; fail the master over (SIGKILL); submit job b
    through a new App: the same worker, reconnecting on its own, places it; then a new
    App and worker place job c; nothing placed before the failover is lost. An event
    subscription opened before the failover subscribes again on its own and hears c."""
    app = App(redis_url=url, namespace=namespace)
    register_nodes(app, 4)
    listener = Listener(app)
    reconcile.submit(app.store, parse_job(spread_job("a", 3)))
    running = RunningWorker(app)
    try:
        wait_until(lambda: all_assigned(app, "a", 3), WAIT_S, "the running worker to place job a")
        placed_before = {task.id: task.node for task in app.store.tasks(app.store.job_task_ids("a"))}
        wait_until(lambda: listener.placed("a") == 3, WAIT_S, "the subscription to hear job a placed")
        fail_over()
        after = App(redis_url=url, namespace=namespace)
        reconcile.submit(after.store, parse_job(spread_job("b", 3)))
        wait_until(lambda: all_assigned(after, "b", 3), WAIT_S, "the running worker to place job b after the failover")
    finally:
        stats = running.stop()
    assert stats.placed == 6
    fresh = App(redis_url=url, namespace=namespace)
    assert {t.id: t.node for t in fresh.store.tasks(fresh.store.job_task_ids("a"))} == placed_before
    try:
        # Pub/sub is at-most-once: what was published while the subscription was away is
        # gone. Once it hears a probe it is subscribed again, and hears what follows.
        wait_until(lambda: listener.hears_probe(fresh), WAIT_S, "the subscription to subscribe again")
        schedule_and_check(fresh, job_id="c", replicas=3)
        wait_until(lambda: listener.placed("c") == 3, WAIT_S, "the subscription to hear job c placed")
    finally:
        listener.stop()


class Listener:
    """`app.store.subscribe()` read in a thread, as `sched events` reads it."""

    def __init__(self, app: App):
        self.heard: list[dict] = []
        self.done = threading.Event()
        self.subscription = app.store.subscribe()
        self.channel = app.keys.events
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self):
        with self.subscription:
            while not self.done.is_set():
                for event in self.subscription.iter(timeout=0.2):
                    self.heard.append(event)

    def placed(self, job: str) -> int:
        return len({e["id"] for e in list(self.heard) if e.get("type") == "task" and e.get("job") == job
                    and e.get("state") == ASSIGNED})

    def hears_probe(self, app: App) -> bool:
        app.client.publish(self.channel, orjson.dumps({"type": "probe"}))
        time.sleep(0.2)
        return any(e.get("type") == "probe" for e in list(self.heard))

    def stop(self):
        self.done.set()
        self.thread.join(timeout=10)


@pytest.mark.slow
def test_sentinel_failover_is_survived(sentinel_factory):
    setup = sentinel_factory()
    before = setup.master_port()
    carry_on_after_failover(setup.url, setup.kill_master, "se-failover")
    assert setup.master_port() != before


@pytest.mark.slow
def test_cluster_failover_is_survived(cluster_factory):
    cluster = cluster_factory()
    namespace = "cl-failover"
    before = cluster.master_of(f"sched:{{{namespace}}}:q:active")
    carry_on_after_failover(cluster.url, lambda: cluster.kill_master_of(f"sched:{{{namespace}}}:q:active"), namespace)
    assert cluster.master_of(f"sched:{{{namespace}}}:q:active") != before

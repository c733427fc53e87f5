"""Deployments against real agents running real commands, driven by real scheduler workers.

A sampler thread reads the job's tasks from Redis throughout each rollout and keeps the
fewest healthy running tasks and the most live ones it saw: those are the promises of
docs/deployments.md (stop-first keeps at least replicas - max_parallel healthy,
start-first at least replicas healthy and at most replicas + max_parallel live). Waits
are liveness bounds, never speed thresholds.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from scheduler import Client
from scheduler.control import deployer, reconcile
from scheduler.model import LIVE_STATES, parse_job

from agent_cluster import Cluster, cluster, namespace_pids  # noqa: F401 (the fixture)

LIVENESS_S = 60.0  # a rollout of several groups on a shared machine: a bound, not a target
REPLICAS = 6


def service(seconds: str, *, health: list[str] | None = None, **update) -> dict:
    """A service of 6 commands sleeping ``seconds`` (which tells its versions apart)."""
    policy = {"max_parallel": 2, "min_healthy_time": 0.5, "healthy_deadline": 30, "progress_deadline": 40, **update}
    return {"id": "web", "replicas": REPLICAS, "resources": {"cpu": 0.5, "memory": "32MiB"}, "restart_delay": 0.2,
            "run": {"command": ["sleep", seconds]},
            "health": {"command": health or ["true"], "interval": 0.2, "timeout": 2, "failures": 2},
            "update": policy}


def start(cluster, nodes=("n1", "n2", "n3"), workers: int = 1):
    for name in nodes:
        cluster.agent(name, cpu="1.5", memory="1GiB", slots=3)
    return [cluster.worker() for _ in range(workers)]


def tasks(app):
    return [t for t in app.store.tasks(app.store.job_task_ids("web")) if not t.terminal]


def healthy(app, version: int | None = None):
    return [t for t in tasks(app) if t.state == "running" and t.health == "healthy"
            and (version is None or t.version == version)]


class Sampler:
    """Reads the job's tasks every few ms in a thread: the fewest healthy running tasks and
    the most live tasks seen."""

    def __init__(self, app):
        self.app, self.fewest_healthy, self.most_live, self.samples = app, 10 ** 9, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            now = tasks(self.app)
            self.fewest_healthy = min(self.fewest_healthy, sum(t.state == "running" and t.health == "healthy"
                                                               for t in now))
            self.most_live = max(self.most_live, sum(t.state in LIVE_STATES for t in now))
            self.samples += 1
            self._stop.wait(0.01)


def steady(cluster, app, version: int, count: int = REPLICAS):
    cluster.wait(lambda: len(healthy(app, version)) == count and len(tasks(app)) == count,
                 f"{count} healthy tasks of version {version}", LIVENESS_S)


def deployment_state(app, deployment: str) -> str:
    return app.store.get_deployment(deployment)["state"]


def submit(app, raw: dict) -> dict:
    return reconcile.submit(app.store, parse_job(raw))


# ----------------------------------------------------------------------------- rolling forward
def test_stop_first_keeps_replicas_less_max_parallel_healthy_and_ends_on_the_new_version(cluster, app):
    start(cluster)
    submit(app, service("600"))
    steady(cluster, app, 1)
    with Sampler(app) as sampler:
        result = submit(app, service("601"))
        assert result["deployment"] == "web@2" and result["tasks"] == []
        assert result["changes"]["action"] == "deployment"
        cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the deployment to succeed", LIVENESS_S)
    assert sampler.samples > 10
    assert sampler.fewest_healthy >= REPLICAS - 2
    assert sampler.most_live <= REPLICAS
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS
    record = app.store.get_deployment("web@2")
    assert record["to_counts"] == {"desired": 6, "placed": 6, "healthy": 6, "unhealthy": 0}
    assert app.store.job_fields("web")["stable"] == "2"


def test_start_first_keeps_every_replica_healthy_and_at_most_max_parallel_extra(cluster, app):
    start(cluster)
    submit(app, service("600", order="start-first"))
    steady(cluster, app, 1)
    with Sampler(app) as sampler:
        submit(app, service("601", order="start-first"))
        cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the deployment to succeed", LIVENESS_S)
    assert sampler.fewest_healthy >= REPLICAS
    assert sampler.most_live <= REPLICAS + 2
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS


# ----------------------------------------------------------------------------- failing and reverting
def test_a_failing_health_check_fails_the_deployment_and_auto_revert_brings_the_old_version_back(cluster, app):
    start(cluster)
    good = service("600", auto_revert=True, healthy_deadline=8, progress_deadline=8)
    submit(app, good)
    steady(cluster, app, 1)
    bad = service("601", health=["false"], auto_revert=True, healthy_deadline=8, progress_deadline=8)
    with Sampler(app) as sampler:
        submit(app, bad)
        cluster.wait(lambda: deployment_state(app, "web@2") == "reverted", "the deployment to fail and revert",
                     LIVENESS_S)
        record = app.store.get_deployment("web@2")
        assert "failed" in record["message"] and "reverted to version 1, as version 3" in record["message"]
        cluster.wait(lambda: deployment_state(app, "web@3") == "successful", "the revert to roll out", LIVENESS_S)
    assert sampler.fewest_healthy >= REPLICAS - 2
    assert len(healthy(app, 3)) == REPLICAS and len(tasks(app)) == REPLICAS
    assert app.store.job_spec("web", 3).raw == {**parse_job(good).raw}
    history = Client(app=app).job_history("web")
    assert [(v["version"], v["deployment_state"]) for v in history] == [(1, None), (2, "reverted"),
                                                                        (3, "successful")]


def test_a_canary_waits_for_promotion_beside_the_old_tasks_then_rolls(cluster, app):
    start(cluster)
    submit(app, service("600", canary=1))
    steady(cluster, app, 1)
    submit(app, service("601", canary=1))
    cluster.wait(lambda: deployment_state(app, "web@2") == "awaiting_promotion", "the canary to be healthy",
                 LIVENESS_S)
    assert len(healthy(app, 2)) == 1 and len(healthy(app, 1)) == REPLICAS
    client = Client(app=app)
    assert client.promote("web@2")["state"] == "running"
    cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the rollout after promotion", LIVENESS_S)
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS


def test_pause_holds_a_deployment_and_resume_finishes_it(cluster, app):
    start(cluster)
    submit(app, service("600", max_parallel=1))
    steady(cluster, app, 1)
    submit(app, service("601", max_parallel=1))
    client = Client(app=app)
    cluster.wait(lambda: len(healthy(app, 2)) >= 1, "a first new task", LIVENESS_S)
    assert client.pause_deployment("web@2")["state"] == "paused"
    held = {t.id for t in tasks(app)}
    cluster.wait(lambda: all(t.state == "running" for t in tasks(app)), "what was started to run", LIVENESS_S)
    assert {t.id for t in tasks(app)} == held  # nothing stopped or started while paused
    assert client.resume_deployment("web@2")["state"] == "running"
    cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the rollout after resuming", LIVENESS_S)


# ----------------------------------------------------------------------------- faults during a deployment
def test_a_worker_killed_mid_deployment_loses_nothing(cluster, app, namespace):
    first, second = start(cluster, workers=2)
    submit(app, service("600", max_parallel=1))
    steady(cluster, app, 1)
    submit(app, service("601", max_parallel=1))
    cluster.wait(lambda: len(healthy(app, 2)) >= 2, "the deployment to be under way", LIVENESS_S)
    for pid in namespace_pids(namespace, "worker"):
        if pid == first.pid:
            os.kill(pid, signal.SIGKILL)
    cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the other worker to finish it",
                 LIVENESS_S)
    assert first.poll() is not None and second.poll() is None
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS


def test_a_node_lost_mid_deployment_is_made_up_for(cluster, app, namespace):
    start(cluster, nodes=("n1", "n2"))
    lost = cluster.agent("n3", cpu="1.5", memory="1GiB", slots=3, heartbeat="0.2")
    cluster.agent("n4", cpu="1.5", memory="1GiB", slots=3)
    submit(app, service("600", max_parallel=1))
    steady(cluster, app, 1)
    submit(app, service("601", max_parallel=1))
    cluster.wait(lambda: len(healthy(app, 2)) >= 1, "the deployment to be under way", LIVENESS_S)
    for pid in namespace_pids(namespace, "agent", "n3"):
        os.kill(pid, signal.SIGKILL)
    lost.wait(timeout=10)
    cluster.wait(lambda: app.store.get_node("n3").status == "down", "n3 to go down", LIVENESS_S)
    cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the deployment to finish", LIVENESS_S)
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS
    assert all(t.node != "n3" for t in tasks(app))


def test_a_drain_and_a_preemption_during_a_deployment(cluster, app):
    start(cluster, nodes=("n1", "n2", "n3", "n4"))
    submit(app, service("600", max_parallel=1))
    steady(cluster, app, 1)
    submit(app, service("601", max_parallel=1))
    cluster.wait(lambda: len(healthy(app, 2)) >= 1, "the deployment to be under way", LIVENESS_S)
    client = Client(app=app)
    client.drain("n1")
    # A job of higher priority that needs most of the cluster evicts some of web's tasks.
    client.submit({"id": "urgent", "priority": 500, "replicas": 3, "resources": {"cpu": 1, "memory": "32MiB"}})
    cluster.wait(lambda: sum(t.state == "running" for t in client.tasks(job="urgent")) == 3,
                 "the urgent job to run", LIVENESS_S)
    client.stop("urgent")
    cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the deployment to finish", LIVENESS_S)
    assert len(healthy(app, 2)) == REPLICAS and len(tasks(app)) == REPLICAS
    assert all(t.node != "n1" for t in tasks(app))


# ----------------------------------------------------------------------------- global jobs
def test_a_global_job_rolls_node_by_node(cluster, app):
    start(cluster)
    spec = {"id": "web", "type": "global", "resources": {"cpu": 0.25, "memory": "32MiB"},
            "run": {"command": ["sleep", "600"]},
            "health": {"command": ["true"], "interval": 0.2},
            "update": {"max_parallel": 1, "min_healthy_time": 0.5, "healthy_deadline": 30}}
    submit(app, spec)
    steady(cluster, app, 1, count=3)
    with Sampler(app) as sampler:
        submit(app, {**spec, "run": {"command": ["sleep", "601"]}})
        cluster.wait(lambda: deployment_state(app, "web@2") == "successful", "the rollout", LIVENESS_S)
    assert sampler.fewest_healthy >= 2  # one node at a time
    assert sorted(t.pin for t in healthy(app, 2)) == ["n1", "n2", "n3"] and len(tasks(app)) == 3


def test_deployment_records_are_listed_newest_first(app):
    from scheduler.model import make_node

    app.store.put_node(make_node("n1", cpu="8", memory="1GiB"))
    submit(app, service("600"))
    submit(app, service("601"))
    submit(app, service("602"))
    listed = Client(app=app).deployments()
    assert [(d["id"], d["state"]) for d in listed] == [("web@3", "running"), ("web@2", "cancelled")]
    assert app.store.active_deployment_ids() == ["web@3"]
    with pytest.raises(Exception, match="cannot be paused"):
        deployer.pause(app.store, "web@2")


# ----------------------------------------------------------------------------- the command line
def test_cli_says_what_a_submit_changes_and_drives_the_deployment(sched, app):
    import json

    import yaml

    from scheduler.model import make_node

    app.store.put_node(make_node("n1", cpu="8", memory="1GiB"))
    one = yaml.safe_dump(service("600"))
    two = yaml.safe_dump(service("601"))
    assert sched("job", "submit", "-", input=one).stdout == "web\n"
    plan = json.loads(sched("job", "plan", "-", "--json", input=two).stdout)
    assert plan["changes"]["action"] == "deployment"
    assert plan["changes"]["fields"] == [{"field": "run.command", "old": ["sleep", "600"], "new": ["sleep", "601"]}]
    assert app.store.deployments() == []  # a plan changes nothing
    out = sched("job", "submit", "-", input=two).stdout.splitlines()
    assert out[0] == "web" and out[1] == "job web: version 1 -> 2: new version rolled out by a deployment"
    assert '  ~ run.command: ["sleep","600"] -> ["sleep","601"]' in out
    assert "follow it: sched deployment status -f web@2" in out[-1]
    listed = json.loads(sched("deployment", "ls", "--json").stdout)
    assert [(d["id"], d["state"], d["from"], d["to"]) for d in listed] == [("web@2", "running", 1, 2)]
    assert json.loads(sched("deployment", "pause", "web@2", "--json").stdout)["state"] == "paused"
    assert "deployment web@2: paused" in sched("deployment", "status", "web@2").stdout
    refused = sched("deployment", "promote", "web@2", ok=False)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert json.loads(sched("deployment", "resume", "web@2", "--json").stdout)["state"] == "running"
    failed = json.loads(sched("deployment", "fail", "web@2", "--json").stdout)
    assert failed["state"] == "failed" and failed["message"] == "failed by request"
    assert sched("deployment", "status", "-f", "web@2").stdout.startswith("deployment web@2: failed")
    history = json.loads(sched("job", "history", "web", "--json").stdout)
    assert [(v["version"], v["current"], v["deployment_state"]) for v in history] == [(1, False, None),
                                                                                      (2, True, "failed")]
    reverted = json.loads(sched("job", "revert", "web", "1", "--json").stdout)
    assert reverted["version"] == 3 and reverted["deployment"] == "web@3"
    assert app.store.job_spec("web", 3).raw == parse_job(service("600")).raw
    assert "version 3 (current)" in sched("job", "history", "web").stdout
    records = json.loads(sched("task", "ls", "--json", "--job", "web").stdout)
    assert {(r["version"], r["health"]) for r in records} == {(1, None)}
    bad = sched("job", "submit", "-", input=yaml.safe_dump({**service("602"), "update": {"order": "sideways"}}),
                ok=False)
    assert bad.exit_code == 2
    assert bad.stderr == "Error: job web: update.order must be stop-first or start-first, not 'sideways'.\n"
    assert app.store.job_fields("web")["version"] == "3"  # nothing half-written


# ----------------------------------------------------------------------------- the spec, and jobs without update
@pytest.mark.parametrize("fields, sentence", [
    ({"update": {"order": "sideways"}}, "job w: update.order must be stop-first or start-first, not 'sideways'."),
    ({"update": {"max_parallel": 0}}, "job w: update.max_parallel must be a whole number from 1 to 1000000, not 0."),
    ({"update": {"auto_promote": True}}, "job w: update.auto_promote needs canary tasks to promote (canary: 1 or more)."),
    ({"update": {"min_healthy_time": 30, "healthy_deadline": 20}},
     "job w: update.min_healthy_time (30 s) must be shorter than healthy_deadline (20 s)."),
    ({"update": {"surge": 1}}, "job w: update has unknown field 'surge'; known fields are auto_promote, auto_revert, "
                               "canary, delay, healthy_deadline, max_failure_ratio, max_parallel, min_healthy_time, "
                               "order, progress_deadline."),
    ({"type": "batch", "update": {}}, "job w: update applies to service and global jobs; a batch job keeps its "
                                      "running tasks when it changes."),
    ({"health": {"command": ["true"], "tcp": {"port": 80}}}, "job w: health needs exactly one of command, http or tcp."),
    ({"health": {"http": {"path": "/"}}}, "job w: health.http must be {port: 8080, path: /healthz} (path defaults to /)."),
    ({"health": {"tcp": {"port": 70000}}}, "job w: health.tcp.port must be a port number from 1 to 65535, not 70000."),
    ({"health": {"command": ["true"], "interval": 0}},
     "job w: health.interval must be a positive number of seconds up to 86400, not 0."),
])
def test_update_and_health_blocks_are_refused_in_one_sentence(fields, sentence):
    from scheduler.model import SpecError

    with pytest.raises(SpecError) as error:
        parse_job({"id": "w", **fields})
    assert str(error.value) == sentence


def test_a_changed_batch_job_keeps_its_running_tasks(app):
    from scheduler.model import make_node
    from workers.scheduler_worker import SchedulerWorker, WorkerConfig

    app.store.put_node(make_node("n1", cpu="2", memory="1GiB"))
    batch = {"id": "crunch", "type": "batch", "replicas": 3, "resources": {"cpu": 0.5}}
    submit(app, batch)
    SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
    app.store.finish_ids(["crunch.2"], "stopped", "test")  # one task ended; two still live
    result = submit(app, {**batch, "priority": 60})
    assert result["changes"]["action"] == "replace-all" and result["changes"]["kept"] == ["crunch.0", "crunch.1"]
    assert result["tasks"] == ["crunch.3"]  # replicas less the running ones
    assert {t.id: (t.version, t.state) for t in tasks_of(app, "crunch")} == {
        "crunch.0": (1, "assigned"), "crunch.1": (1, "assigned"), "crunch.3": (2, "pending")}


def tasks_of(app, job_id):
    return [t for t in app.store.tasks(app.store.job_task_ids(job_id)) if not t.terminal]


# ----------------------------------------------------------------------------- max_failure_ratio
def _running_and_healthy(app, job_id: str = "web") -> None:
    """Start every placed task and mark it healthy, as its node's agent would."""
    for task in tasks_of(app, job_id):
        if task.state == "assigned":
            assert app.store.start_task(task.id, task.node)
        if app.store.get_task(task.id).state == "running":
            app.store.set_task_health(task.id, task.node, "healthy")


@pytest.mark.parametrize("ratio, failures_tolerated", [(0, 0), (0.34, 2)])
def test_max_failure_ratio_tolerates_that_share_of_failed_new_tasks(app, ratio, failures_tolerated):
    """SwarmKit's rule: the deployment fails once failed new tasks / desired is above the
    ratio; the tolerated failures are replaced as any failed task is."""
    from scheduler.model import make_node
    from workers.scheduler_worker import SchedulerWorker, WorkerConfig

    app.store.put_node(make_node("n1", cpu="16", memory="4GiB"))
    place = SchedulerWorker(app, WorkerConfig(until_idle=True)).run
    submit(app, service("600", max_failure_ratio=ratio))
    place()
    _running_and_healthy(app)
    submit(app, service("601", max_failure_ratio=ratio))
    assert deployer.advance(app.store, "web@2") == "running"  # stops 2 old tasks, queues 2 new ones
    failed = []
    for attempt in range(failures_tolerated + 1):
        app.queue.move_all_to_active()  # replacements wait out restart_delay in backoff
        place()
        _running_and_healthy(app)
        victim = next(t for t in tasks_of(app, "web") if t.version == 2 and t.state == "running")
        reconcile.task_ended(app.store, victim, False, "exited with code 1")
        failed.append(victim.id)
        state = deployer.advance(app.store, "web@2")
        record = app.store.get_deployment("web@2")
        assert record["to_counts"]["unhealthy"] == len(failed)
        if attempt < failures_tolerated:
            assert state == "running", record["message"]
    assert state == "failed"
    message = app.store.get_deployment("web@2")["message"]
    if ratio:
        assert message == (f"3 of 6 task(s) of version 2 failed, more than max_failure_ratio 0.34 allows; the last: "
                           f"task {failed[-1]} of version 2 failed: exited with code 1")
    else:
        assert message == f"task {failed[0]} of version 2 failed: exited with code 1"


def test_max_failure_ratio_is_a_share_from_0_to_1():
    from scheduler.model import SpecError

    assert parse_job({"id": "w", "update": {"max_failure_ratio": 0.25}}).update.max_failure_ratio == 0.25
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(SpecError) as error:
            parse_job({"id": "w", "update": {"max_failure_ratio": bad}})
        assert str(error.value) == f"job w: update.max_failure_ratio must be a number from 0 to 1, not {bad!r}."

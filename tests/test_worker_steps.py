"""One worker's steps: a deep queue is claimed one batch ahead (and handed back if the
worker stops before working on it); a Redis that lost its scripts is served again; no
commit carries more than a chunk of placements, but a gang goes in one."""

from __future__ import annotations

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from workers.scheduler_worker import SchedulerWorker, WorkerConfig

from worker_harness import wait_until


def setup(app, replicas):
    app.store.put_node(make_node("n1", cpu="16", memory="16GiB"))
    reconcile.submit(app.store, parse_job({"id": "web", "replicas": replicas, "resources": {"cpu": 0.5}}))


def queue_becomes(app, **expected) -> dict:
    """The queue counts once they match ``expected`` (the claim ahead runs on the worker's
    committer thread)."""
    def matching():
        counts = app.queue.counts()
        return counts if all(counts[name] == value for name, value in expected.items()) else None

    return wait_until(matching, 5.0, f"queue counts {expected}", detail=app.queue.counts)


def test_a_deep_queue_is_claimed_one_batch_ahead_and_handed_back_on_stop(app):
    setup(app, replicas=10)
    worker = SchedulerWorker(app, WorkerConfig(batch_size=2))
    assert worker.step() == 2
    # Placed two; the next two are leased already; six wait for anyone.
    assert queue_becomes(app, active=6, inflight=2) == {"active": 6, "backoff": 0, "unschedulable": 0, "inflight": 2, "waiting": 0}
    assert worker.step() == 2  # works on the batch it claimed ahead, and claims the next
    assert worker.stats.placed == 4
    assert queue_becomes(app, active=4, inflight=2) == {"active": 4, "backoff": 0, "unschedulable": 0, "inflight": 2, "waiting": 0}
    worker.stop()
    worker.run()  # stopping: nothing more is placed, the batch claimed ahead goes back
    assert app.queue.counts() == {"active": 6, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert app.client.hlen(app.keys.leases) == 0


def test_a_short_queue_is_left_to_other_workers(app):
    setup(app, replicas=5)
    worker = SchedulerWorker(app, WorkerConfig(batch_size=2))
    assert worker.step() == 2
    # Three were waiting: fewer than two more batches, so none is claimed ahead.
    assert app.queue.counts() == {"active": 3, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}


def test_a_redis_that_lost_its_scripts_is_served_again(app):
    setup(app, replicas=3)
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 3
    app.client.script_flush()  # as after a restart without persistence of scripts
    reconcile.scale(app.store, "web", 5)
    assert worker.step() == 2
    assert worker.stats.placed == 5


def test_tasks_whose_job_is_gone_are_stopped_with_a_reason(app):
    setup(app, replicas=2)
    app.client.delete(app.keys.job("web"))  # removed behind the scheduler's back
    worker = SchedulerWorker(app, WorkerConfig())
    assert worker.step() == 2
    assert worker.stats.placed == 0
    for task_id in ("web.0", "web.1"):
        task = app.store.get_task(task_id)
        assert task.state == "stopped" and "its job no longer exists" in task.message, task
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}


def test_a_worker_loads_the_script_its_refreshes_queue_before_its_first_batch(app):
    """tallies.lua goes by its SHA on the refresh's pipeline: loaded at start, the first
    refresh does not fail with NOSCRIPT and go again."""
    setup(app, replicas=3)
    app.client.script_flush()
    worker = SchedulerWorker(app, WorkerConfig())
    worker._load_nodes()
    assert app.client.script_exists(app.scripts.tallies.sha) == [True]
    assert worker.step() == 3


def commits_of(worker) -> list[list[str]]:
    """Record the task ids of each commit call the worker makes (its own method, wrapped:
    the calls still go to Redis)."""
    calls: list[list[str]] = []
    commit = worker._commit

    def recording(token, plans):
        calls.append([plan.task_id for plan in plans])
        return commit(token, plans)

    worker._commit = recording
    return calls


def test_one_task_jobs_of_one_shape_are_committed_a_chunk_at_a_time(app):
    """Placed as one group of the whole batch, committed in calls of at most commit_chunk
    placements (a long script call would hold Redis for every other client)."""
    app.store.put_node(make_node("n1", cpu="16", memory="16GiB"))
    for i in range(10):
        reconcile.submit(app.store, parse_job({"id": f"one{i}", "replicas": 1, "resources": {"cpu": 0.5}}))
    worker = SchedulerWorker(app, WorkerConfig(batch_size=10, commit_chunk=4))
    calls = commits_of(worker)
    assert worker.step() == 10
    assert sorted(len(call) for call in calls) == [2, 4, 4]  # the last from the worker's own thread
    assert sorted(task for call in calls for task in call) == sorted(f"one{i}.0" for i in range(10))
    assert all(app.store.get_task(f"one{i}.0").state == "assigned" for i in range(10))


def test_a_gang_larger_than_a_chunk_is_committed_in_one_call(app):
    app.store.put_node(make_node("n1", cpu="16", memory="16GiB"))
    reconcile.submit(app.store, parse_job({"id": "one", "replicas": 1, "resources": {"cpu": 0.5}}))
    reconcile.submit(app.store, parse_job({"id": "train", "replicas": 6, "gang": True, "resources": {"cpu": 0.5}}))
    worker = SchedulerWorker(app, WorkerConfig(batch_size=7, commit_chunk=4))
    calls = commits_of(worker)
    assert worker.step() == 7
    gang = {f"train.{i}" for i in range(6)}
    assert [call for call in calls if gang & set(call)] == [call for call in calls if gang <= set(call)]
    assert sum(1 for call in calls if gang & set(call)) == 1
    assert worker.stats.placed == 7

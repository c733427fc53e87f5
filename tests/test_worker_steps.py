"""One worker's steps: a deep queue is claimed one batch ahead (and handed back if the
worker stops before working on it); a Redis that lost its scripts is served again."""

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
    assert queue_becomes(app, active=6, inflight=2) == {"active": 6, "backoff": 0, "unschedulable": 0, "inflight": 2}
    assert worker.step() == 2  # works on the batch it claimed ahead, and claims the next
    assert worker.stats.placed == 4
    assert queue_becomes(app, active=4, inflight=2) == {"active": 4, "backoff": 0, "unschedulable": 0, "inflight": 2}
    worker.stop()
    worker.run()  # stopping: nothing more is placed, the batch claimed ahead goes back
    assert app.queue.counts() == {"active": 6, "backoff": 0, "unschedulable": 0, "inflight": 0}
    assert app.client.hlen(app.keys.leases) == 0


def test_a_short_queue_is_left_to_other_workers(app):
    setup(app, replicas=5)
    worker = SchedulerWorker(app, WorkerConfig(batch_size=2))
    assert worker.step() == 2
    # Three were waiting: fewer than two more batches, so none is claimed ahead.
    assert app.queue.counts() == {"active": 3, "backoff": 0, "unschedulable": 0, "inflight": 0}


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
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0}


def test_a_worker_loads_the_script_its_refreshes_queue_before_its_first_batch(app):
    """tallies.lua goes by its SHA on the refresh's pipeline: loaded at start, the first
    refresh does not fail with NOSCRIPT and go again."""
    setup(app, replicas=3)
    app.client.script_flush()
    worker = SchedulerWorker(app, WorkerConfig())
    worker._load_nodes()
    assert app.client.script_exists(app.scripts.tallies.sha) == [True]
    assert worker.step() == 3

"""A given clock reaches every script that stamps a time (the simulator's virtual clock),
while leases stay on Redis TIME; with no clock, the scripts use Redis TIME as before."""

from __future__ import annotations

from scheduler.client import Client
from scheduler.state.commit import Planned, commit
from scheduler.control import reconcile


def _submit(client: Client, job: str, **fields) -> list[str]:
    spec = {"id": job, "type": "batch", "replicas": 1, "resources": {"cpu": 1, "memory": "1GiB"}, **fields}
    return client.submit(spec)["tasks"]


def test_a_given_clock_stamps_enqueue_claim_commit_finish_and_replace(clocked_app, clock):
    app = clocked_app
    client = Client(app=app)
    client.add_node("n0", cpu=2, memory="4GiB")
    clock.advance(1_000)
    (task,) = _submit(client, "web")
    assert int(app.client.hget(app.keys.task(task), "created")) == clock.now
    clock.advance(5_000)
    claim = app.queue.claim(10)
    assert claim.now_ms == clock.now
    lease = app.client.zscore(app.keys.inflight, task)
    assert abs(lease - (app.store.now_ms() + 30_000)) < 5_000  # Redis TIME + lease, not the clock
    clock.advance(2_000)
    outcome = commit(app.scripts, app.keys, claim.token, [Planned(task, "n0", app.store.job_spec("web"))])
    assert [plan.task_id for plan in outcome.accepted] == [task]
    assert outcome.now_ms == clock.now
    assert int(app.client.hget(app.keys.task(task), "assigned_at")) == clock.now
    clock.advance(3_000)
    reconcile.task_ended(app.store, app.store.get_task(task), False, "exit 1")
    assert int(app.client.hget(app.keys.task(task), "ended_at")) == clock.now
    # The failed batch task is retried (max_retries) at once; its failure counts from now.
    assert app.client.zrange(app.keys.faults("web"), 0, -1, withscores=True)[0][1] == clock.now


def test_a_service_replacement_backs_off_from_the_given_clock(clocked_app, clock):
    app = clocked_app
    client = Client(app=app)
    client.add_node("n0", cpu=2, memory="4GiB")
    (task,) = _submit(client, "api", type="service", restart_delay=7)
    claim = app.queue.claim(10)
    commit(app.scripts, app.keys, claim.token, [Planned(task, "n0", app.store.job_spec("api"))])
    clock.advance(60_000)
    ended = reconcile.task_ended(app.store, app.store.get_task(task), True, "exit 0")
    (replacement,) = ended["replacement"]
    assert app.client.zscore(app.keys.backoff, replacement) == clock.now + 7_000


def test_a_nomination_expires_by_the_given_clock(clocked_app, clock):
    app = clocked_app
    client = Client(app=app)
    client.add_node("n0", cpu=1, memory="4GiB")
    (low,) = _submit(client, "low", priority=10)
    claim = app.queue.claim(10)
    commit(app.scripts, app.keys, claim.token, [Planned(low, "n0", app.store.job_spec("low"))])
    (high,) = _submit(client, "high", priority=500)
    claim = app.queue.claim(10)
    clock.advance(10_000)
    result = app.store.preempt(claim.token, high, "n0", 30_000, "500|high|cpu=1000|",
                               [(low, "low", {"cpu": 1000})])
    assert result == "ok"
    held = app.client.hget(app.keys.node("n0"), f"nom:{high}")
    assert int(held.split("|")[1]) == clock.now + 30_000

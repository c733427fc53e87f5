"""The scheduling queue against a real Redis: order, leases, backoff, the moveRequestCycle
rule, and the fencing token that makes a stale worker harmless.

Backoff and flush times come from the injectable clock (``clocked_app``/``clock``); leases
always use Redis TIME, so the lease tests wait a few tens of milliseconds of real time.
"""

from __future__ import annotations

import time

import pytest

from scheduler.control import reconcile
from scheduler.model import make_node, parse_job
from scheduler.state.queue import MAX_PRIORITY, QueueConfig, SchedulingQueue, queue_score

from commits import commit_one

GiB = 2**30


# ----------------------------------------------------------------------------- helpers
def submit(app, job_id, replicas=1, priority=50, cpu="1", **extra):
    spec = parse_job({"id": job_id, "replicas": replicas, "priority": priority,
                      "resources": {"cpu": cpu, "memory": "256MiB"}, **extra})
    return reconcile.submit(app.store, spec)["tasks"]


def add_node(app, name="n1", cpu="4", memory="8GiB"):
    return app.store.put_node(make_node(name, cpu=cpu, memory=memory))


def where(app, task_id) -> list[str]:
    """Every queue the task is in (the contract: exactly one while it is pending)."""
    k = app.keys
    found = [name for name, key in (("active", k.active), ("backoff", k.backoff),
                                    ("unschedulable", k.unschedulable), ("inflight", k.inflight))
             if app.client.zscore(key, task_id) is not None]
    return found


def explanation(reason="insufficient cpu"):
    return {"nodes_evaluated": 1, "reasons": {reason: 1}, "message": f"0/1 nodes available: 1 {reason}."}


def redis_ms(app) -> int:
    seconds, micros = app.client.time()
    return seconds * 1000 + micros // 1000


def wait_for_lease_expiry(app, lease_deadline_ms: int) -> None:
    """Sleep until Redis TIME has passed a lease deadline (Redis's clock, not ours, decides)."""
    for _ in range(500):
        if redis_ms(app) > lease_deadline_ms:
            return
        time.sleep(0.01)
    raise AssertionError("Redis TIME never passed the lease deadline")


def move_cycle(app) -> int:
    return int(app.client.get(app.keys.move_cycle) or 0)


# ----------------------------------------------------------------------------- order
def test_queue_score_orders_priority_then_age():
    seq = 10_000
    assert queue_score(900, seq + 5_000) < queue_score(50, seq)       # higher priority first, even if newer
    assert queue_score(50, seq) < queue_score(50, seq + 1)             # then older first
    assert queue_score(MAX_PRIORITY, seq) < queue_score(MAX_PRIORITY - 1, seq)
    # The largest score stays exact as a double (Redis keeps ZSET scores as doubles).
    biggest = queue_score(0, 10**12 - 1)
    assert int(float(biggest)) == biggest


def test_active_queue_is_the_schedule_order(app):
    submit(app, "low", replicas=2, priority=10)
    submit(app, "midold", priority=50)
    submit(app, "high", priority=900)                    # newer, but higher priority
    submit(app, "midnew", priority=50)
    submit(app, "top", priority=1000)

    order = app.client.zrange(app.keys.active, 0, -1)
    assert order == ["top.0", "high.0", "midold.0", "midnew.0", "low.0", "low.1"]
    assert app.client.zrange(app.keys.active, 0, 0) == ["top.0"]

    first = app.queue.claim(3)
    assert first.task_ids == ["top.0", "high.0", "midold.0"]
    second = app.queue.claim(10)
    assert second.task_ids == ["midnew.0", "low.0", "low.1"]
    assert int(second.token) == int(first.token) + 1
    assert app.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 6, "waiting": 0}


def test_tasks_of_one_job_are_claimed_in_index_order(app):
    submit(app, "big", replicas=12)
    order = app.client.zrange(app.keys.active, 0, -1)
    assert order == [f"big.{i}" for i in range(12)]      # big.2 before big.10, not alphabetical


def test_claim_on_an_empty_queue_takes_no_cycle(app):
    claim = app.queue.claim(5)
    assert claim.task_ids == [] and claim.token == ""
    assert app.client.get(app.keys.cycle) is None


def test_claim_moves_tasks_to_inflight_with_a_lease_from_redis_time(clocked_app, clock):
    app = clocked_app
    (task,) = submit(app, "web")
    before = redis_ms(app)
    claim = app.queue.claim(1, lease_ms=5_000)
    after = redis_ms(app)
    assert claim.task_ids == [task]
    # The claim reports the clock the queue was given (what backoffs and fault windows are
    # measured by), but the lease is Redis TIME + lease_ms, never that clock.
    assert claim.now_ms == clock.now
    assert before + 5_000 <= app.client.zscore(app.keys.inflight, task) <= after + 5_000
    assert app.client.hget(app.keys.leases, task) == claim.token
    assert where(app, task) == ["inflight"]


def test_a_claim_ending_inside_a_job_takes_the_rest_of_it_up_to_the_tail(app):
    a = submit(app, "a", replicas=5)
    b = submit(app, "b", replicas=5)
    assert app.queue.claim(3, job_tail=10).task_ids == a  # a's last two come along, not b's
    assert app.queue.claim(2, job_tail=1).task_ids == b[:3]  # at most one more
    assert app.queue.claim(2).task_ids == b[3:]  # no tail: exactly what was asked
    c = submit(app, "c", replicas=2)
    d = submit(app, "d", replicas=2)
    assert app.queue.claim(2, job_tail=10).task_ids == c  # ends at c's end: d stays
    assert app.queue.counts()["active"] == len(d)


# ----------------------------------------------------------------------------- leases
def test_expired_lease_returns_the_task_with_its_original_score(app):
    tasks = submit(app, "web", replicas=3)
    scores = {t: app.client.zscore(app.keys.active, t) for t in tasks}
    claim = app.queue.claim(2, lease_ms=50)
    assert claim.task_ids == tasks[:2]
    wait_for_lease_expiry(app, claim.now_ms + 50)

    returned = app.queue.reclaim_expired()
    assert sorted(returned) == sorted(tasks[:2])
    for t in tasks:
        assert where(app, t) == ["active"]
        assert app.client.zscore(app.keys.active, t) == scores[t]
    assert app.client.hlen(app.keys.leases) == 0
    # Back in the original order: the reclaimed tasks come first again.
    assert app.client.zrange(app.keys.active, 0, -1) == tasks


def test_live_lease_is_not_reclaimed(app):
    (task,) = submit(app, "web")
    app.queue.claim(1, lease_ms=30_000)
    assert app.queue.reclaim_expired() == []
    assert where(app, task) == ["inflight"]


def test_maintain_reclaims_expired_leases(app):
    (task,) = submit(app, "web")
    claim = app.queue.claim(1, lease_ms=50)
    wait_for_lease_expiry(app, claim.now_ms + 50)
    done = app.queue.maintain()
    assert done["reclaimed"] == 1
    assert where(app, task) == ["active"]


# ----------------------------------------------------------------------------- waking idle workers
def wake_tokens(app) -> int:
    return app.client.llen(app.keys.wake)


def test_what_queues_tasks_wakes_a_waiting_worker_and_the_tokens_stay_few(app):
    assert not app.queue.wait_for_work(0.01)  # nothing queued: the wait times out
    submit(app, "web", replicas=3)
    assert wake_tokens(app) == 1  # one per call that queued tasks, not one per task
    assert app.queue.wait_for_work(5) and wake_tokens(app) == 0
    for i in range(20):
        submit(app, f"job{i}")
    assert wake_tokens(app) == 8  # nobody waited: the list is kept short


def test_leases_handed_back_and_moves_to_active_wake_a_waiting_worker(app):
    tasks = submit(app, "web", replicas=2)
    claim = app.queue.claim(2, lease_ms=50)
    app.client.delete(app.keys.wake)
    wait_for_lease_expiry(app, claim.now_ms + 50)
    assert sorted(app.queue.reclaim_expired()) == sorted(tasks)
    assert wake_tokens(app) == 1
    app.client.delete(app.keys.wake)
    queue = SchedulingQueue(app.client, app.keys, app.scripts, QueueConfig(initial_backoff_ms=1, max_backoff_ms=1))
    claim = queue.claim(2)
    queue.fail(claim.token, [(t, explanation()) for t in tasks])
    assert wake_tokens(app) == 0  # waiting for a cluster event: nothing to claim yet
    time.sleep(0.01)  # past the 1 ms backoff
    assert queue.move_all_to_active()[0] == 2
    assert wake_tokens(app) == 1


def test_release_hands_tasks_back_untouched(app):
    tasks = submit(app, "web", replicas=2)
    score = app.client.zscore(app.keys.active, tasks[0])
    claim = app.queue.claim(2)
    assert sorted(app.queue.release(claim.token, tasks)) == sorted(tasks)
    assert [where(app, t) for t in tasks] == [["active"], ["active"]]
    assert app.client.zscore(app.keys.active, tasks[0]) == score
    assert app.client.hget(app.keys.task(tasks[0]), "attempts") == "0"
    assert app.client.hlen(app.keys.leases) == 0


def test_release_with_another_claims_token_does_nothing(app):
    a, b = submit(app, "web", replicas=2)
    first = app.queue.claim(1)
    second = app.queue.claim(1)
    assert (first.task_ids, second.task_ids) == ([a], [b])
    assert app.queue.release(first.token, [b]) == []
    assert where(app, b) == ["inflight"]
    assert app.client.hget(app.keys.leases, b) == second.token


# ----------------------------------------------------------------------------- stale tokens
def snapshot(app) -> dict:
    """Every key of the namespace with its type, serialised value and expiry."""
    client = app.client
    return {key: (client.type(key), client.dump(key), client.pttl(key))
            for key in sorted(client.scan_iter(match=f"{app.keys.prefix}*", count=1000))}


def test_stale_token_after_reclaim_cannot_fail_or_release(app):
    (task,) = submit(app, "web")
    stale = app.queue.claim(1, lease_ms=50)
    wait_for_lease_expiry(app, stale.now_ms + 50)
    assert app.queue.reclaim_expired() == [task]

    before = snapshot(app)
    assert app.queue.fail(stale.token, [(task, explanation())]) == ["lease expired"]
    assert app.queue.release(stale.token, [task]) == []
    assert snapshot(app) == before
    assert where(app, task) == ["active"]
    assert app.client.hget(app.keys.task(task), "attempts") == "0"
    assert app.client.hget(app.keys.task(task), "explanation") is None


def test_stale_token_cannot_touch_a_task_another_worker_now_holds(app):
    (task,) = submit(app, "web")
    stale = app.queue.claim(1, lease_ms=50)
    wait_for_lease_expiry(app, stale.now_ms + 50)
    app.queue.reclaim_expired()
    fresh = app.queue.claim(1)
    assert fresh.task_ids == [task] and fresh.token != stale.token

    before = snapshot(app)
    assert app.queue.fail(stale.token, [(task, explanation())]) == ["lease expired"]
    assert app.queue.release(stale.token, [task]) == []
    assert snapshot(app) == before
    # The current holder still can.
    assert app.queue.fail(fresh.token, [(task, explanation())]) == ["unschedulable"]


def test_commit_refuses_a_stale_token_and_accepts_the_current_one(app):
    add_node(app, "n1", cpu="4")
    (task,) = submit(app, "web", cpu="1")
    stale = app.queue.claim(1, lease_ms=50)
    wait_for_lease_expiry(app, stale.now_ms + 50)
    app.queue.reclaim_expired()
    fresh = app.queue.claim(1)

    before = snapshot(app)
    assert commit_one(app, stale.token, task, "n1", "web", {"cpu": 1000}) == "lease expired"
    assert snapshot(app) == before

    assert commit_one(app, fresh.token, task, "n1", "web", {"cpu": 1000}) == 1
    assert app.client.hget(app.keys.task(task), "state") == "assigned"
    assert app.client.hget(app.keys.node("n1"), "alloc:cpu") == "1000"
    assert app.store.get_node("n1").free("cpu") == 3000
    assert where(app, task) == []
    # Committed once; the same token cannot commit it again (the lease is gone).
    assert commit_one(app, fresh.token, task, "n1", "web", {"cpu": 1000}) == "lease expired"
    assert app.client.hget(app.keys.node("n1"), "alloc:cpu") == "1000"


def test_commit_after_release_is_refused(app):
    add_node(app)
    (task,) = submit(app, "web")
    claim = app.queue.claim(1)
    app.queue.release(claim.token, [task])
    assert commit_one(app, claim.token, task, "n1", "web", {"cpu": 1000}) == "lease expired"
    assert where(app, task) == ["active"]


# ----------------------------------------------------------------------------- backoff
def force_backoff(app, task_id) -> list[str]:
    """One failed attempt after a cluster event, so the task backs off."""
    claim = app.queue.claim(1)
    assert claim.task_ids == [task_id]
    app.queue.cluster_event()
    return app.queue.fail(claim.token, [(task_id, explanation())])


def test_backoff_doubles_from_one_second_to_a_ten_second_cap(clocked_app, clock):
    app = clocked_app
    (task,) = submit(app, "web")
    score = app.client.zscore(app.keys.active, task)
    delays = []
    for attempt in range(1, 8):
        assert force_backoff(app, task) == ["backoff"]
        expiry = app.client.zscore(app.keys.backoff, task)
        delays.append(int(expiry) - clock.now)
        fields = app.client.hgetall(app.keys.task(task))
        assert int(fields["attempts"]) == attempt
        assert int(fields["backoff_until"]) == int(expiry)
        assert fields["state"] == "pending"
        assert where(app, task) == ["backoff"]
        clock.advance(delays[-1])
        assert app.queue.flush_backoff() == 1
        assert where(app, task) == ["active"]
        assert app.client.zscore(app.keys.active, task) == score
    assert delays == [1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]


def test_backoff_honours_a_custom_config(redis_url, namespace, clock):
    from scheduler.state.app import App

    app = App(redis_url=redis_url, namespace=namespace, clock=clock,
              queue_config=QueueConfig(initial_backoff_ms=300, max_backoff_ms=1000))
    try:
        (task,) = submit(app, "web")
        delays = []
        for _ in range(4):
            force_backoff(app, task)
            delays.append(int(app.client.zscore(app.keys.backoff, task)) - clock.now)
            clock.advance(delays[-1])
            app.queue.flush_backoff()
        assert delays == [300, 600, 1000, 1000]
    finally:
        for key in app.client.scan_iter(match=f"{app.keys.prefix}*"):
            app.client.delete(key)
        app.client.close()


def test_only_due_backoff_entries_move_to_active(clocked_app, clock):
    app = clocked_app
    early, late = submit(app, "web", replicas=2)
    assert force_backoff(app, early) == ["backoff"]     # due at +1000
    clock.advance(500)
    assert force_backoff(app, late) == ["backoff"]      # due at +1500

    clock.advance(499)                                   # +999: nothing due yet
    assert app.queue.flush_backoff() == 0
    assert (where(app, early), where(app, late)) == (["backoff"], ["backoff"])

    clock.advance(1)                                     # +1000: the first is due
    assert app.queue.flush_backoff() == 1
    assert (where(app, early), where(app, late)) == (["active"], ["backoff"])

    clock.advance(500)                                   # +1500: the second is due too
    assert app.queue.maintain()["from_backoff"] == 1
    assert (where(app, early), where(app, late)) == (["active"], ["active"])


def test_failure_records_the_explanation(clocked_app):
    app = clocked_app
    (task,) = submit(app, "web")
    claim = app.queue.claim(1)
    app.queue.fail(claim.token, [(task, explanation("node paused"))])
    stored = app.client.hget(app.keys.task(task), "explanation")
    assert '"node paused":1' in stored
    assert app.client.hget(app.keys.task(task), "last_cycle") == claim.token


# ----------------------------------------------------------------------------- moveRequestCycle
def setup_cluster(app):
    """One node, a job to schedule and another job that can occupy the node."""
    add_node(app, "n1", cpu="4")
    (task,) = submit(app, "web", cpu="1")
    submit(app, "other", cpu="1", priority=10)
    app.queue.maintain()  # the queue now knows the current move_cycle
    return task


def _finish_a_live_task(app, claim):
    assert commit_one(app, claim.token, "other.0", "n1", "other", {"cpu": 1000}) == 1
    assert app.store.finish_ids(["other.0"], "completed") == {"other.0": "assigned"}


# Each entry: (what happens before the claim, what happens between the claim and the failure).
CLUSTER_EVENTS = {
    "node added": (None, lambda app, claim: add_node(app, "n2")),
    "node updated": (None, lambda app, claim: add_node(app, "n1", cpu="8")),
    "node activated": (lambda app: app.store.set_availability("n1", "pause"),
                       lambda app, claim: app.store.set_availability("n1", "active")),
    "node ready again": (lambda app: app.store.set_status("n1", "down"),
                         lambda app, claim: app.store.set_status("n1", "ready")),
    "task finished": (None, _finish_a_live_task),
    "explicit event": (None, lambda app, claim: app.queue.cluster_event()),
}

NOT_CLUSTER_EVENTS = {
    "nothing": (None, lambda app, claim: None),
    "node paused": (None, lambda app, claim: app.store.set_availability("n1", "pause")),
    "node drained": (None, lambda app, claim: app.store.set_availability("n1", "drain")),
    "node down": (None, lambda app, claim: app.store.set_status("n1", "down")),
    "node removed": (None, lambda app, claim: app.store.remove_node("n1")),
    "pending task stopped": (None, lambda app, claim: reconcile.stop(app.store, "other")),
    "event before the claim": (lambda app: add_node(app, "n2"), lambda app, claim: None),
}


def attempt(app, task, before, between):
    if before:
        before(app)
    claim = app.queue.claim(2)
    assert claim.task_ids == [task, "other.0"]
    between(app, claim)
    result = app.queue.fail(claim.token, [(task, explanation())])
    if app.client.zscore(app.keys.inflight, "other.0") is not None:
        app.queue.release(claim.token, ["other.0"])
    return result


@pytest.mark.parametrize("event", list(CLUSTER_EVENTS))
def test_failure_after_a_cluster_event_backs_off(clocked_app, clock, event):
    app = clocked_app
    task = setup_cluster(app)
    cycle_before = move_cycle(app)
    assert attempt(app, task, *CLUSTER_EVENTS[event]) == ["backoff"]
    assert move_cycle(app) > cycle_before
    assert where(app, task) == ["backoff"]
    assert app.client.zscore(app.keys.backoff, task) == clock.now + 1000


@pytest.mark.parametrize("event", list(NOT_CLUSTER_EVENTS))
def test_failure_with_no_event_since_the_claim_is_unschedulable(clocked_app, clock, event):
    app = clocked_app
    task = setup_cluster(app)
    assert attempt(app, task, *NOT_CLUSTER_EVENTS[event]) == ["unschedulable"]
    assert where(app, task) == ["unschedulable"]
    assert app.client.zscore(app.keys.unschedulable, task) == clock.now
    # It waits there: no cluster event has happened, so maintenance leaves it alone.
    clock.advance(5_000)
    app.queue.maintain()
    assert where(app, task) == ["unschedulable"]


@pytest.mark.parametrize("event", list(CLUSTER_EVENTS))
def test_cluster_event_moves_unschedulable_tasks_back(clocked_app, clock, event):
    app = clocked_app
    task = setup_cluster(app)
    score = app.client.zscore(app.keys.active, task)
    assert attempt(app, task, None, lambda app, claim: None) == ["unschedulable"]
    clock.advance(1_000)                  # past its one-second backoff window
    before, between = CLUSTER_EVENTS[event]
    if before:
        before(app)
    claim = app.queue.claim(1)            # "other.0" (when it is still pending)
    between(app, claim)
    if app.client.zscore(app.keys.inflight, "other.0") is not None:
        app.queue.release(claim.token, ["other.0"])

    done = app.queue.maintain()
    assert done["after_event"] == 1
    assert where(app, task) == ["active"]
    assert app.client.zscore(app.keys.active, task) == score


def test_event_inside_the_backoff_window_moves_to_backoff_first(clocked_app, clock):
    app = clocked_app
    task = setup_cluster(app)
    assert attempt(app, task, None, lambda app, claim: None) == ["unschedulable"]
    clock.advance(400)
    add_node(app, "n2")
    assert app.queue.move_all_to_active() == (0, 1)
    assert where(app, task) == ["backoff"]
    assert app.client.zscore(app.keys.backoff, task) == clock.now - 400 + 1000   # its original expiry
    clock.advance(599)
    assert app.queue.flush_backoff() == 0
    clock.advance(1)
    assert app.queue.flush_backoff() == 1
    assert where(app, task) == ["active"]


def test_move_all_to_active_splits_by_backoff_window(clocked_app, clock):
    app = clocked_app
    add_node(app)
    a, b = submit(app, "web", replicas=2)
    claim = app.queue.claim(1)
    app.queue.fail(claim.token, [(a, explanation())])       # window ends at t+1000
    clock.advance(1_000)
    claim = app.queue.claim(1)
    app.queue.fail(claim.token, [(b, explanation())])       # window ends at t+2000
    assert app.queue.counts()["unschedulable"] == 2
    assert app.queue.move_all_to_active() == (1, 1)
    assert (where(app, a), where(app, b)) == (["active"], ["backoff"])


def test_leftovers_flush_after_sixty_seconds(clocked_app, clock):
    app = clocked_app
    task = setup_cluster(app)
    score = app.client.zscore(app.keys.active, task)
    assert attempt(app, task, None, lambda app, claim: None) == ["unschedulable"]
    clock.advance(59_999)
    assert app.queue.flush_unschedulable() == (0, 0)
    assert app.queue.maintain()["leftover"] == 0
    assert where(app, task) == ["unschedulable"]
    clock.advance(1)
    assert app.queue.flush_unschedulable() == (1, 0)
    assert where(app, task) == ["active"]
    assert app.client.zscore(app.keys.active, task) == score


def test_many_tasks_move_in_chunks(clocked_app, clock):
    # More than one Lua call's worth (CHUNK = 500) goes through fail and move intact.
    app = clocked_app
    tasks = submit(app, "big", replicas=1_203, cpu="10m")
    claim = app.queue.claim(2_000)
    assert len(claim.task_ids) == 1_203
    results = app.queue.fail(claim.token, [(t, explanation()) for t in claim.task_ids])
    assert results == ["unschedulable"] * 1_203
    clock.advance(1_000)
    app.queue.cluster_event()
    assert app.queue.move_all_to_active() == (1_203, 0)
    assert app.queue.counts() == {"active": 1_203, "backoff": 0, "unschedulable": 0, "inflight": 0, "waiting": 0}
    assert set(app.client.zrange(app.keys.active, 0, -1)) == set(tasks)


def test_every_pending_task_is_in_exactly_one_queue(clocked_app, clock):
    app = clocked_app
    add_node(app)
    tasks = submit(app, "web", replicas=6)
    claim = app.queue.claim(4)
    app.queue.fail(claim.token, [(claim.task_ids[0], explanation())])
    app.queue.cluster_event()
    app.queue.fail(claim.token, [(claim.task_ids[1], explanation())])
    app.queue.release(claim.token, [claim.task_ids[2]])
    for t in tasks:
        assert len(where(app, t)) == 1, t
    assert app.queue.counts() == {"active": 3, "backoff": 1, "unschedulable": 1, "inflight": 1, "waiting": 0}


def test_a_commit_conflict_backs_off_even_without_a_cluster_event(clocked_app, clock):
    app = clocked_app
    a, b = submit(app, "web", replicas=2)
    claim = app.queue.claim(2)
    results = app.queue.fail(claim.token, [(a, explanation()), (b, explanation())], conflicts={a})
    assert results == ["backoff", "unschedulable"]
    assert where(app, a) == ["backoff"] and where(app, b) == ["unschedulable"]
    clock.advance(1000)
    assert app.queue.flush_backoff() == 1
    assert where(app, a) == ["active"]


def test_workers_move_unschedulable_tasks_once_per_event_not_once_per_start(app):
    (task,) = submit(app, "web")
    claim = app.queue.claim(1)
    app.queue.fail(claim.token, [(task, explanation())])
    assert where(app, task) == ["unschedulable"]
    app.queue.maintain()                       # no event has happened since the record began
    first = where(app, task)
    from scheduler.state.queue import SchedulingQueue
    fresh = SchedulingQueue(app.client, app.keys, app.scripts)
    fresh.maintain()                           # a worker starting up is not a cluster event
    assert where(app, task) == first == ["unschedulable"]
    app.queue.cluster_event()
    fresh.maintain()
    assert where(app, task) == ["backoff"]          # moved back; still inside its 1 s backoff


def test_a_fair_claim_over_one_tenant_takes_the_queue_in_order(app):
    """With every waiting task of one tenant there is nothing to weigh: the claim is the
    head of the queue, as without fairness."""
    for job_id, priority in (("low", 10), ("high", 90), ("mid", 50)):
        submit(app, job_id, replicas=3, priority=priority, tenant="acme")
    head = app.client.zrange(app.keys.active, 0, 4)
    claim = app.queue.claim(5, share_from=None, job_tail=0, capacity={"cpu": 64000}, window=100)
    assert claim.task_ids == head
    assert head[:3] == ["high.0", "high.1", "high.2"]


# ----------------------------------------------------------------------------- attempts history
def test_each_failed_attempt_is_recorded_with_its_outcome_and_repeats_share_an_entry(clocked_app, clock):
    app = clocked_app
    task = submit(app, "web")[0]
    start = clock.now

    def attempt(reason: str, conflict: bool = False) -> str:
        claim = app.queue.claim(1)
        assert claim.task_ids == [task]
        result = app.queue.fail(claim.token, [(task, explanation(reason))], conflicts={task} if conflict else set())
        clock.advance(20_000)  # past any backoff
        app.queue.move_all_to_active()
        app.queue.flush_backoff()
        return result[0]

    assert app.queue.attempts(task) == []  # never attempted
    assert attempt("insufficient cpu") == "unschedulable"
    assert attempt("insufficient cpu") == "unschedulable"  # the same outcome again: one entry spans both
    assert attempt("node paused") == "unschedulable"
    assert attempt("node paused", conflict=True) == "backoff"
    entries = app.queue.attempts(task)
    assert entries == [
        {"first": 1, "last": 2, "since": start, "at": start + 20_000, "queue": "unschedulable",
         "message": "0/1 nodes available: 1 insufficient cpu."},
        {"first": 3, "last": 3, "since": start + 40_000, "at": start + 40_000, "queue": "unschedulable",
         "message": "0/1 nodes available: 1 node paused."},
        {"first": 4, "last": 4, "since": start + 60_000, "at": start + 60_000, "queue": "backoff",
         "message": "0/1 nodes available: 1 node paused.", "conflict": True},
    ]
    assert app.store.get_task(task).attempts == 4


def test_the_attempts_list_is_bounded_and_a_stale_claim_writes_none(app):
    from scheduler.state.queue import ATTEMPTS_KEPT

    task = submit(app, "web")[0]
    queue = SchedulingQueue(app.client, app.keys, app.scripts, QueueConfig(initial_backoff_ms=0, max_backoff_ms=0))
    for n in range(ATTEMPTS_KEPT + 3):
        claim = queue.claim(1)
        assert claim.task_ids == [task]
        queue.fail(claim.token, [(task, explanation(f"constraint node.labels.n=={n} not met"))])
        queue.move_all_to_active()
    entries = app.queue.attempts(task)
    assert len(entries) == ATTEMPTS_KEPT
    assert [e["first"] for e in entries] == list(range(4, ATTEMPTS_KEPT + 4))  # the newest kept
    stale = app.queue.claim(1, lease_ms=20)
    wait_for_lease_expiry(app, stale.now_ms + 20)
    app.queue.reclaim_expired()
    assert app.queue.fail(stale.token, [(task, explanation("other"))]) == ["lease expired"]
    assert app.queue.attempts(task) == entries

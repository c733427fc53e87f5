"""Random sequences of what users, agents, workers and time do, against a real Redis, with
every promise checked after every step: a hypothesis state machine.

Each example has a namespace of its own and an App on a clock the machine moves (the
scripts take it as their last ARGV, the queue's backoffs and the evictions follow it), and
one in-process scheduler worker, stepped: a "worker pass" is its upkeep (evictions, global
jobs, dependencies, retention, launches) and then every batch it finds. The steps:

- nodes: add (a plain node, or an agent's node with 1 to 3 task slots), remove (drained
  first, forced, when it runs tasks), taint (NoSchedule, PreferNoSchedule, NoExecute),
  untaint, drain (as the jobs' disruption budgets allow, with a deadline or none, or
  forced), pause, activate; an agent that stops beating (its node goes down and its tasks
  are lost) and comes back;
- jobs: submit with random rules and types (service, batch, global, sysbatch, periodic,
  parameterized, ``after`` dependencies, disruption budgets, constraints, ``distinct_property``,
  ``topology_spread``, job affinity and anti-affinity, tolerations with random
  ``toleration_seconds``, ports, ``max_per_node``, ``parallelism``, priorities; periodic
  jobs ticking yearly or every minute), submit again as a new version, scale, stop,
  launch a periodic job, suspend or resume it, dispatch a parameterized one;
- ``sched rebalance`` (a random strategy, ``--max-moves``, ``--job``; a dry run at times;
  at times just after an agent's node joined), its moves carried out by the worker's
  upkeep (``rebalance_deadline`` 5 minutes or 20 s); among the first jobs, a service
  that runs wherever there is room, so that there are tasks to move;
  ``sched task evict`` of a random live task; ``sched capacity`` (a random threshold and
  ``max_remove``);
- agents start what is placed on their nodes (up to their slots) and report tasks' ends;
- worker passes; time moving on; retention passes; a worker restarted. In three examples
  of four the workers (and agents) are in the background: they make a round after every
  step of a user or an agent, as they would in a cluster; in the others only the steps
  that say so move them, so that several changes meet one batch.

After every step (the invariants): the audit holds (no overcommit, tallies equal tasks,
every pending task in one queue...); every placement met every hard rule of its job on its
node when it was committed, checked from the event stream by ``placement_ledger.py``
(its own rules, not the engine's); no voluntary disruption through the gate (a drain's
eviction, a move's stop of its old task, ``task evict``) beyond the job's disruption
budget (``budget_ledger.py``); no eviction by a NoExecute taint before the task's
``toleration_seconds``; after a worker pass, no task left on a node whose NoExecute taint
should have evicted it; a task placed on an agent's node is started within a bound or
``task explain`` says why; an agent's node holds no more live tasks than its slots; no key
of a removed job, task or node is left; and what a user expects: a running service has its
replicas open (and one more for each move under way whose new task is open: make before
break), a stopped job none, a global job one task on each node it wants, a suspended
periodic job no launch but by hand. Of the steps themselves: a dry run of ``rebalance``
and ``capacity`` write nothing (every key of the namespace and its value, before and
after); a plan moves only running tasks of services, at most ``--max-moves``, of
``--job``; an eviction either stops its task or leaves it live and says what it waits
on; every node ``capacity`` says can go has each of its tasks moved to a ready, active
node it does not remove before or with it, with room there (cpu, memory, slots, ports,
as the answer leaves them), and no job moved beyond what its budget allows now
(``stateful_moves.py``).

The bounded run is in the default suite (a few seconds per example). The deep run, many
more and longer sequences, is opt-in:

    SCHED_STATEFUL_DEEP=1 .venv/bin/pytest tests/test_stateful.py -m stateful_deep

(``SCHED_STATEFUL_DEEP=N`` runs N examples; the default is 300 of up to 80 steps.)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple,
                                 precondition, rule, run_state_machine_as_test)

from scheduler import Client
from scheduler.control import dependencies, heartbeat, reconcile
from scheduler.control.audit import audit
from scheduler.control.outcomes import Outcomes
from scheduler.control.retention import collect
from scheduler.control.worker_config import WorkerConfig
from scheduler.engine.placement import PlacementOptions
from scheduler.control.rebalance import MAX_MOVES
from scheduler.model import DOWN, READY, make_node
from scheduler.model.errors import NotFound, SchedError
from scheduler.model.retention import Retention
from scheduler.state.app import App
from scheduler.state.connection import time_ms
from workers.scheduler_worker import SchedulerWorker

from budget_ledger import EVICT_REASON
from placement_ledger import Ledger, meets, tolerance
from stateful_jobs import job_spec, plain_service
from stateful_leftovers import leftovers
from stateful_moves import changed, moving_extra, scale_down_problems, snapshot

START_BOUND_MS = 5_000  # a task placed on an agent's node is started within this, or explained
ZONES, RACKS = ("a", "b", "c"), ("r1", "r2")


TOTALS: Counter = Counter()  # what the examples of a run did, summed


def one_sentence(exc: BaseException) -> bool:
    text = str(exc)
    return text.endswith(".") and "\n" not in text and "Traceback" not in text


class Clock:
    """Milliseconds that move only when the machine says so."""

    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


def then_workers(action):
    """A step of a user or an agent; with workers in the background, they do their round
    after it (the agents start what was placed, the worker makes a pass)."""

    @functools.wraps(action)
    def step(self, *args, **kwargs):
        result = action(self, *args, **kwargs)
        self.done[action.__name__] += 1
        if self.background:
            self.agents_start()
            self.work()
        return result

    return step


class Cluster(RuleBasedStateMachine):
    url = ""
    nodes = Bundle("nodes")
    jobs = Bundle("jobs")

    def __init__(self):
        super().__init__()
        namespace = "st" + uuid.uuid4().hex[:12]
        plain = App(redis_url=self.url, namespace=namespace)
        self.clock = Clock(time_ms(plain.client.time()))  # near Redis TIME, which leases follow
        plain.close()
        self.app = App(redis_url=self.url, namespace=namespace, clock=self.clock)
        self.client = Client(app=self.app)
        self.store = self.app.store
        self.worker = self._new_worker()
        self.ledger = Ledger(self.app)
        self.background = False
        self.count = 0
        self.agents: set[str] = set()  # nodes an agent runs (and has not left)
        self.launched: set[str] = set()  # launches of periodic jobs made by hand
        self.suspended: dict[str, set[str]] = {}  # periodic job suspended -> its launches then
        self.done: Counter = Counter()

    def _new_worker(self) -> SchedulerWorker:
        return SchedulerWorker(self.app, WorkerConfig(placement=PlacementOptions(seed=0)), name="stateful")

    def teardown(self):
        TOTALS.update(self.done)
        TOTALS.update({"examples": 1, "placements checked": self.ledger.placements,
                       **{f"{kind} disruptions judged": n for kind, n in self.ledger.budgets.checked.items()},
                       "evictions checked": self.ledger.checked_evictions, "tasks": len(self.ledger.seen["tasks"]),
                       **{f"{what} removed": len(gone) for what, gone in self._removed().items()}})
        self.worker._committer.shutdown(wait=True)
        self.store.clear_namespace()
        self.app.close()

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    @initialize(background=st.sampled_from([True, True, True, False]), deadline=st.sampled_from([None, "20s"]))
    def workers(self, background, deadline):
        """Workers (and agents) in the background make a round after every step; otherwise
        only the steps that say so make one. A move waits for its new task to run for
        ``rebalance_deadline``: 5 minutes, or 20 s."""
        self.background = background
        if deadline:
            self.client.set_config(rebalance_deadline=deadline)

    # Nodes.
    @initialize(target=nodes)
    def first_nodes(self):
        """One plain node and two agents' nodes, in three zones."""
        return multiple(*(self._add(self._name("n"), 4, {"zone": ZONES[i], "rack": RACKS[i % 2]}, agent_slots=slots)
                          for i, slots in enumerate((0, 3, 3))))

    @initialize(target=jobs, data=st.data())
    def first_jobs(self, data):
        """Two random jobs, and a service that runs wherever there is room (tasks to move)."""
        service = data.draw(plain_service(self._name("j")))
        self.client.submit(service)
        return multiple(*(self._submit(data) for _ in range(2)), service["id"])

    def _add(self, name: str, cpu: int, labels: dict, agent_slots: int = 0) -> str:
        node = make_node(name, cpu=cpu, memory="8GiB", labels=labels)
        if agent_slots:  # as an agent registers its node: its task slots are the node's capacity for tasks
            self.store.put_node(dataclasses.replace(node, slots=agent_slots))
            heartbeat.beat(self.store, name, interval_s=600)  # a TTL no test outlives: its loss is a rule
            self.agents.add(name)
        else:
            assert self.client.put_node(node) is True
        return name

    @rule(target=nodes, cpu=st.sampled_from([1, 2, 4]), zone=st.sampled_from((*ZONES, None)),
          rack=st.sampled_from((*RACKS, None)), agent_slots=st.sampled_from([0, 0, 1, 2, 3]))
    @then_workers
    def add_node(self, cpu, zone, rack, agent_slots):
        labels = {k: v for k, v in (("zone", zone), ("rack", rack)) if v}
        return self._add(self._name("n"), cpu, labels, agent_slots)

    @rule(name=consumes(nodes))
    @then_workers
    def remove_node(self, name):
        if self.store.node_task_ids(name):  # as a user must: drain it first (now: whatever the budgets)
            self.client.drain(name, force=True)
        self.client.remove_node(name)
        self.agents.discard(name)

    @rule(name=nodes, key=st.sampled_from(["k1", "k2"]), value=st.sampled_from(["", "x", "y"]),
          effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    @then_workers
    def taint(self, name, key, value, effect):
        self.client.taint(name, f"{key}={value}:{effect}" if value else f"{key}:{effect}")

    @rule(name=nodes, key=st.sampled_from(["k1", "k2"]), effect=st.sampled_from(["", "NoSchedule", "NoExecute"]))
    @then_workers
    def untaint(self, name, key, effect):
        def matching():
            return [t for t in self.store.get_node(name).taints if t.key == key and effect in ("", t.effect)]

        had = matching()
        try:
            self.client.untaint(name, key, effect)
        except NotFound as exc:  # none to remove: said in one sentence, nothing written
            assert not had and one_sentence(exc), exc
            return
        assert had and not matching()

    @rule(name=nodes, how=st.sampled_from(["pause", "activate"]))
    @then_workers
    def availability(self, name, how):
        getattr(self.client, how)(name)

    @rule(name=nodes, deadline=st.sampled_from(["1h", "30s", None]), force=st.sampled_from([False, False, True]))
    @then_workers
    def drain(self, name, deadline, force):
        """A drain: its tasks move as their jobs' budgets allow (the workers carry it on),
        all at once past its deadline or forced."""
        self.client.drain(name, deadline=deadline, force=force)

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    @then_workers
    def agent_lost(self, data):
        """The agent stops beating: its node goes down, as a worker's heartbeat check does it."""
        name = data.draw(st.sampled_from(sorted(self.agents)))
        if self.store.set_status(name, DOWN) == READY:
            reconcile.node_lost(self.store, name)

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    @then_workers
    def agent_back(self, data):
        heartbeat.beat(self.store, data.draw(st.sampled_from(sorted(self.agents))), interval_s=600)

    # Jobs.
    @rule(target=jobs, data=st.data())
    @then_workers
    def submit(self, data):
        return self._submit(data)

    def _submit(self, data) -> str:
        names = sorted(self.store.node_names())
        existing = sorted(self.store.job_ids())
        spec = data.draw(job_spec(self._name("j"), names, existing))
        self.client.submit(spec)
        return spec["id"]

    @rule(job=jobs, priority=st.sampled_from([10, 50, 90]), cpu=st.sampled_from(["0", "250m", "1"]))
    @then_workers
    def submit_again(self, job, priority, cpu):
        """A new version of a job as it is stored, with another priority or cpu."""
        try:
            current = self.client.job(job)["spec"]
        except NotFound:
            return
        try:
            self.client.submit({**current, "priority": priority, "resources": {**current["resources"], "cpu": cpu}})
        except SchedError as exc:  # a launch (sched makes those), or an `after` naming a removed job
            assert one_sentence(exc) and ("names a launch" in str(exc) or "does not exist" in str(exc)), exc

    @rule(job=jobs, replicas=st.integers(0, 4))
    @then_workers
    def scale(self, job, replicas):
        try:
            self.client.scale(job, replicas)
        except SchedError as exc:  # not scalable, stopped or removed: said in one sentence
            assert one_sentence(exc), exc

    @rule(job=jobs)
    @then_workers
    def stop(self, job):
        try:
            self.client.stop(job)
        except NotFound:  # removed by retention
            assert job not in self.store.job_ids()

    @rule(target=jobs, job=jobs)
    @then_workers
    def launch(self, job):
        try:
            launched = self.client.launch(job)["launched"]
        except SchedError:  # not periodic, stopped, removed, or forbid with a launch running
            return multiple()
        self.launched.add(launched)
        return launched

    @rule(job=jobs, suspend=st.booleans())
    @then_workers
    def suspend(self, job, suspend):
        """``sched job suspend`` or ``resume``: no tick of a suspended periodic job is launched."""
        was = self.store.job_fields(job).get("suspended") == "1"
        try:
            done = self.client.suspend(job) if suspend else self.client.resume(job)
        except SchedError as exc:  # not periodic, or removed: said in one sentence
            assert one_sentence(exc), exc
            return
        assert done["suspended"] == suspend and done["changed"] == (was != suspend), done
        assert (done["next_launch"] is None) == suspend, done  # (the machine's crons tick at least yearly)
        if suspend and not was:
            self.suspended[job] = {child for child, _ in self.store.children(job)}

    # Moves, evictions, capacity.
    @rule(strategy=st.sampled_from(["spread", "spread", "pack", "pack", "job-spread", "node-taints",
                                    "topology-spread", "duplicates"]),
          max_moves=st.sampled_from([None, 1, 3]), dry_run=st.sampled_from([False, False, True]),
          grown=st.sampled_from([None, None, *ZONES]), target=nodes, data=st.data())
    @then_workers
    def rebalance(self, strategy, max_moves, dry_run, grown, data):
        """``sched rebalance``: moves planned and applied (the workers' upkeep carries them
        out, make before break, through the budgets' gate), of every service or one; a dry
        run writes nothing. At times an agent's node joined just before (in ``grown``'s
        zone), the reason to rebalance."""
        added = self._add(self._name("n"), 4, {"zone": grown}, agent_slots=3) if grown else None
        services = sorted(j for j in self.store.job_ids() if self.store.job_spec(j).raw["type"] == "service")
        job = data.draw(st.sampled_from([None, None, *services]))
        before = snapshot(self.app) if dry_run else None
        done = self.client.rebalance(strategy, max_moves, job, dry_run=dry_run)
        if dry_run:
            assert not changed(before, snapshot(self.app)), changed(before, snapshot(self.app))
        moves = done["moves"]
        self.done.update({f"rebalance held: {why}": n for why, n in done["held"].items()})
        assert len(moves) <= (max_moves or MAX_MOVES) and all(job in (None, m["job"]) for m in moves), moves
        for move in moves:  # a running task of a service, moved to another node; nothing stopped yet
            task = self.store.get_task(move["task"])
            assert task.state == "running" and task.node == move["from"] != move["to"], (move, task)
            assert self.store.job_spec(move["job"]).raw["type"] == "service", move
        if not dry_run:
            assert len(done["applied"]["moves"]) == len(moves), done["applied"]
            self.done["moves"] += len(moves)
        return added or multiple()

    @rule(data=st.data())
    @then_workers
    def evict(self, data):
        """``sched task evict`` of a live task: stopped and replaced if its job's budget
        allows it now, else left as it was, saying what it waits on."""
        live = sorted(t.id for t in self.store.tasks(self.store.all_task_ids()) if t.live)
        if not live:
            return
        done = self.client.evict(data.draw(st.sampled_from(live)), EVICT_REASON)
        task = self.store.get_task(done["task"])
        if done["evicted"]:
            assert task.state == "stopped" and task.message == EVICT_REASON, (done, task)
            self.done["evicted"] += 1
        else:
            assert task.live and done["waiting"] and done["verdict"] == "refused", (done, task)

    @rule(threshold=st.sampled_from([0.0, 0.5, 1.0]), max_remove=st.sampled_from([None, None, 1]))
    def capacity(self, threshold, max_remove):
        """``sched capacity``: an answer worked out on a copy, which writes nothing; each
        node it says can go has room elsewhere for its tasks, within their budgets."""
        self.done["capacity"] += 1
        before = snapshot(self.app)
        answer = self.client.capacity(threshold=threshold, max_remove=max_remove)
        assert not changed(before, snapshot(self.app)), changed(before, snapshot(self.app))
        removed = answer["scale_down"]["remove"]
        assert max_remove is None or len(removed) <= max_remove, removed
        problems = scale_down_problems(self.store, self.ledger, answer)
        assert not problems, problems
        self.done["nodes capacity removes"] += len(removed)

    @rule(target=jobs, job=jobs, token=st.sampled_from([None, "t1"]))
    @then_workers
    def dispatch(self, job, token):
        try:
            return self.client.dispatch(job, {}, idempotency_token=token)["dispatched"]
        except SchedError:  # not parameterized, stopped or removed
            return multiple()

    # Agents, workers, time.
    @rule()
    def agents_start(self):
        """Each agent starts what is placed on its node, as many at once as it has slots."""
        for name in sorted(self.agents):
            node = self.store.get_node(name)
            if node.status != READY:
                continue
            tasks = sorted(self.store.tasks(self.store.node_task_ids(name)), key=lambda t: t.assigned_ms)
            running = sum(1 for t in tasks if t.state == "running")
            for task in tasks:
                if task.state == "assigned" and running < node.slots:
                    assert self.store.start_task(task.id, name)
                    running += 1

    @precondition(lambda self: self.agents)
    @rule(data=st.data(), succeeded=st.booleans())
    @then_workers
    def task_ends(self, data, succeeded):
        """An agent reports a run's end."""
        running = [t for t in self.client.tasks(state="running") if t.node in self.agents]
        if running:
            task = data.draw(st.sampled_from(sorted(running, key=lambda t: t.id)))
            reconcile.task_ended(self.store, task, succeeded, "exited 0" if succeeded else "exited 1")

    @rule()
    def work(self):
        """A worker pass: its upkeep, then every batch it finds."""
        self.done["worker passes"] += 1
        self.worker.maintain(force=True)
        while self.worker.step():
            pass
        problems = self.ledger.take()
        problems += self.ledger.overdue(self.clock.now, {n.name: n for n in self.store.nodes()})
        assert not problems, problems
        self._global_jobs_cover_their_nodes()
        self._waiting_says_why()
        self._suspended_jobs_launch_nothing()

    def _suspended_jobs_launch_nothing(self):
        """After a worker pass: a suspended periodic job launched nothing but by hand."""
        for job in list(self.suspended):
            if self.store.job_fields(job).get("suspended") != "1":  # resumed, a new version, or removed
                del self.suspended[job]
                continue
            ticked = {child for child, _ in self.store.children(job)} - self.suspended[job] - self.launched
            assert not ticked, f"suspended job {job} launched {sorted(ticked)}"

    def _waiting_says_why(self):
        """After a worker pass: a job still held by its dependencies waits for one that has
        not come to an end yet (one that held, or never can, was dealt with); a task that
        waits for a cluster event says why it does not fit."""
        outcomes = Outcomes()
        for job_id in self.store.held_job_ids():
            fields = self.store.job_fields(job_id)
            if fields.get("held") != "1" or fields.get("status") != "running":
                continue
            verdicts = {a.job: dependencies.holds(outcomes.of(self.store, a.job), a)
                        for a in self.store.job_spec(job_id).after}
            assert None in verdicts.values(), f"job {job_id} still waits, its dependencies decided: {verdicts}"
        for task_id in self.app.client.zrange(self.app.keys.unschedulable, 0, -1):
            why = self.client.explain(task_id)
            assert why["message"] and (why["reasons"] or not why["nodes_evaluated"]), \
                f"{task_id} waits unschedulable without a reason: {why}"

    @rule(ms=st.sampled_from([100, 1_000, 3_000, 7_000, 20_000, 61_000]), passes=st.integers(0, 3))
    def time_passes(self, ms, passes):
        """Time moves on while the agents and the worker do their rounds (``passes`` worker
        passes, evenly spread; none: the workers stood still meanwhile). The agents run
        throughout: they start what was placed on their nodes."""
        for _ in range(passes):
            self.clock.now += ms // passes
            self.agents_start()
            self.work()
        self.clock.now += ms - passes * (ms // passes) if passes else ms
        self.agents_start()

    @rule(task_s=st.sampled_from([0, 30]), per_job=st.integers(0, 2), job_s=st.sampled_from([0, 30]))
    @then_workers
    def retention(self, task_s, per_job, job_s):
        collect(self.store, now_ms=self.clock.now,
                retention=Retention(task_retention=task_s, ended_tasks_per_job=per_job, job_retention=job_s))

    @rule()
    def worker_restarts(self):
        self.worker._committer.shutdown(wait=True)
        self.worker = self._new_worker()

    # The promises.
    @invariant()
    def audit_holds(self):
        report = audit(self.store)
        assert report.ok and not report.overcommits, report.problems

    @invariant()
    def every_placement_met_its_rules(self):
        problems = self.ledger.take()
        problems += self.ledger.agrees(self.store.tasks(self.store.all_task_ids()))
        assert not problems, problems

    @invariant()
    def agents_start_or_explain(self):
        for name in sorted(self.agents):
            node = self.store.get_node(name)
            tasks = self.store.tasks(self.store.node_task_ids(name))
            assert len(tasks) <= node.slots, f"{name}: {len(tasks)} live tasks for {node.slots} task slots"
            for task in tasks:
                if task.state == "assigned" and self.clock.now - task.assigned_ms > START_BOUND_MS:
                    why = self.client.explain(task.id)
                    assert why["reasons"], f"{task.id} assigned to {name} for " \
                                           f"{self.clock.now - task.assigned_ms} ms: {why['message']}"

    @invariant()
    def nothing_left_of_what_was_removed(self):
        self.ledger.follow()
        removed = self._removed()
        found = leftovers(self.app, removed["jobs"], removed["tasks"], removed["nodes"])
        assert not found, found

    @invariant()
    def a_drained_node_runs_nothing(self):
        """A drain that says it is complete left nothing on its node (and nothing new goes there)."""
        for node in self.store.nodes():
            if node.availability == "drain" and self.client.drain_status(node.name)["state"] == "complete":
                assert not self.store.node_task_ids(node.name), f"{node.name} drained with tasks left"

    def _removed(self) -> dict[str, set[str]]:
        """What the event stream named and is gone: jobs and tasks retention removed, nodes removed."""
        now = {"jobs": set(self.store.job_ids()), "tasks": set(self.store.all_task_ids()),
               "nodes": set(self.store.node_names())}
        return {what: self.ledger.seen[what] - now[what] for what in now}

    @invariant()
    def jobs_have_what_users_expect(self):
        """A running service has its replicas open, one more for each move under way whose
        new task is open (make before break); a stopped job none..."""
        extra = moving_extra(self.store)
        for record in self.client.jobs():
            spec = self.store.get_job(record["id"])["spec"]
            open_ = sum(n for state, n in record["tasks"].items() if state in ("pending", "assigned", "running"))
            if record["status"] == "stopped":
                assert open_ == 0, f"stopped job {record['id']} has {record['tasks']}"
            elif "periodic" in spec or "parameterized" in spec:
                assert open_ == 0, f"{record['id']} runs no task itself, has {record['tasks']}"
            elif spec["type"] == "service" and record["status"] == "running":
                assert spec["replicas"] <= open_ <= spec["replicas"] + extra[record["id"]], \
                    f"service {record['id']}: {record['tasks']}, replicas {spec['replicas']}, " \
                    f"{extra[record['id']]} new task(s) of moves open"
            elif spec["type"] == "batch":
                assert open_ <= spec["replicas"], f"batch {record['id']}: {record['tasks']}"

    def _global_jobs_cover_their_nodes(self):
        """After a worker pass: a running global job has one open task on every node it
        wants (ready, active, meeting its constraints, no refusing taint it does not
        tolerate); a sysbatch job too, unless its task there has run to its end."""
        nodes = self.store.nodes()
        for job_id in self.store.global_job_ids():
            job = self.store.get_job(job_id)
            spec = job["spec"]
            if job["status"] != "running" or "periodic" in spec or "parameterized" in spec:
                continue
            tasks = self.store.tasks(self.store.job_task_ids(job_id))
            open_on = [t.pin for t in tasks if not t.terminal]
            assert len(open_on) == len(set(open_on)), f"{job_id} has two open tasks on a node: {sorted(open_on)}"
            done = {t.pin for t in tasks if t.version == job["version"] and t.state in ("completed", "failed")}
            for node in nodes:
                if node.status != READY or node.availability != "active":
                    continue
                if not all(meets(node, c) for c in spec.get("constraints") or ()):
                    continue
                # Not wanted: a refusing taint not tolerated. Not asked either: a NoExecute taint
                # tolerated for a while, whose eviction puts no task back until nodes change.
                if any(t.effect != "PreferNoSchedule" and tolerance(t, spec.get("tolerations") or []) != math.inf
                       for t in node.taints):
                    continue
                if spec["type"] == "sysbatch" and node.name in done:
                    continue
                assert node.name in open_on, f"{spec['type']} job {job_id} has no task on {node.name}"


def run(redis_url: str, examples: int, steps: int) -> None:
    Cluster.url = redis_url
    TOTALS.clear()
    run_state_machine_as_test(Cluster, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    print(dict(TOTALS))


@pytest.mark.slow
def test_random_sequences_keep_every_promise(redis_url):
    run(redis_url, examples=60, steps=40)


DEEP = os.environ.get("SCHED_STATEFUL_DEEP", "")


@pytest.mark.stateful_deep  # collected only with SCHED_STATEFUL_DEEP set (tests/conftest.py)
def test_random_sequences_keep_every_promise_deep(redis_url):
    run(redis_url, examples=300 if DEEP == "1" else int(DEEP), steps=80)

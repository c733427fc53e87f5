"""``sched simulate``: replays through the scheduler worker on a virtual clock, checked on
small traces whose answers are known, and the trace readers on small samples of each
public format (tests/data/simulate/)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.model import SpecError
from scheduler.tools.cli import main
from scheduler.tools.simulate import Settings, Simulator
from scheduler.tools.simulate.bounds import lower_bound
from scheduler.tools.simulate.compact import compact
from scheduler.tools.simulate.formats import detect, events_of, load
from scheduler.tools.simulate.generate import GOOGLE_2011_MACHINES, generate
from scheduler.tools.simulate.replay import Replay
from scheduler.tools.simulate.report import summarise
from scheduler.tools.simulate.trace import read_jsonl

DATA = Path(__file__).parent / "data" / "simulate"


def trace_of(*events: dict):
    return read_jsonl(io.StringIO("\n".join(json.dumps(e) for e in events)), "test trace")


def node(name: str, cpu, memory: str, **more) -> dict:
    return {"kind": "node", "time": 0, "name": name, "cpu": cpu, "memory": memory, **more}


def task(time: float, job: str, count: int, duration, cpu, memory: str, **more) -> dict:
    return {"kind": "task", "time": time, "job": job, "count": count, "duration": duration,
            "resources": {"cpu": cpu, "memory": memory}, **more}


@pytest.fixture
def simulator(redis_url, namespace):
    return Simulator(redis_url, namespace)


def test_a_trace_that_fits_exactly_fills_the_cluster_with_no_wait(simulator):
    trace = trace_of(node("n0", 4, "8GiB"), node("n1", 4, "8GiB"),
                     task(0, "a", 8, 100, 1, "2GiB"),
                     task(100, "b", 4, 50, 2, "4GiB"))
    report = simulator.replay(trace, Settings())
    assert (report["tasks"], report["placed"], report["pending_at_end"]) == (12, 12, 0)
    assert report["utilisation"] == {"cpu": 1.0, "memory": 1.0}  # full from 0 to 150, when the last ends
    assert report["stranded"] == {"cpu": 0.0, "memory": 0.0}
    assert report["queueing_delay_s"] == {"50": {"tasks": 12, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}}
    assert report["simulated_s"] == 150.0 and report["preemptions"] == 0
    assert lower_bound(trace)["nodes"] == 2


def test_utilisation_is_reported_over_the_whole_replay_and_over_the_arrival_window(simulator):
    trace = trace_of(node("n0", 4, "8GiB"),
                     task(0, "half", 1, 50, 2, "1GiB"),
                     task(100, "whole", 1, 100, 4, "1GiB"))
    report = simulator.replay(trace, Settings())
    # Half the cpu for 50 s, nothing for 50 s, all of it for 100 s: 62.5 % over the
    # replay's 200 s, 25 % over the 100 s in which tasks arrived.
    assert report["utilisation"]["cpu"] == 0.625
    assert report["arrival_window_s"] == [0.0, 100.0]
    assert report["utilisation_arrival_window"]["cpu"] == 0.25


@pytest.mark.parametrize("more, tasks", [({"ttl_after_finished": 200}, ["a.0", "a.1", "a.2", "b.0"]),
                                         ({"ttl_after_finished": 10}, ["a.0", "a.1", "b.0"]),
                                         ({}, ["a.0", "a.1", "b.0"])])
def test_a_job_whose_tasks_arrive_again_after_it_finished_replays(redis_url, namespace, more, tasks):
    # Retention follows the replay's clock (Redis TIME is years past it): a finished job
    # is kept for its ttl_after_finished, so later tasks join it; one removed (after its
    # ttl, or at once: the replay's job_retention is 0) is submitted anew, its tasks
    # numbered from 0 again.
    trace = trace_of(node("n0", 4, "8GiB"),
                     task(0, "a", 1, 5, 1, "1GiB", **more),
                     task(50, "b", 1, 5, 1, "1GiB"),
                     {"kind": "task", "time": 100, "job": "a", "count": 2, "duration": 5})
    replay = Replay(trace, Settings(), redis_url, namespace)
    try:
        replay.run()
        report = summarise(replay)
        assert sorted(replay.recorder.created_ms) == tasks
    finally:
        replay.store.clear_namespace()
    assert (report["tasks"], report["placed"], report["pending_at_end"]) == (4, 4, 0)
    assert report["simulated_s"] == 105.0


def test_a_job_submitted_anew_has_its_replacements_counted(simulator):
    # The first "a" (a.0-a.2) is removed at 50 (its ttl passed); the second is a.0, which
    # "urgent" preempts at 101: its replacement is a.1 again, a task of this replay's.
    trace = trace_of(node("n0", 2, "4GiB"),
                     task(0, "a", 3, 5, "500m", "1GiB", ttl_after_finished=10, priority=10),
                     task(50, "b", 1, 5, "500m", "1GiB"),
                     {"kind": "task", "time": 100, "job": "a", "count": 1, "duration": 5},
                     task(101, "urgent", 1, 10, 2, "1GiB", priority=500))
    report = simulator.replay(trace, Settings())
    assert report["preemptions"] == 1
    assert (report["tasks"], report["placed"], report["pending_at_end"]) == (7, 7, 0)
    assert report["queueing_delay_s"]["10"]["max"] == 10.0  # a.1 waits for "urgent" to end at 111


def test_memory_full_strands_cpu_and_the_next_task_waits_for_memory(simulator):
    trace = trace_of(node("n0", 4, "4GiB"),
                     task(0, "mem", 2, 100, 1, "2GiB"),
                     task(10, "more", 1, 10, 1, "1GiB"))
    report = simulator.replay(trace, Settings())
    # Memory is full from 0 to 100 while 2 of 4 cores are free: stranded. The last task
    # waits for memory until 100 and runs to 110.
    assert report["stranded_peak"] == {"cpu": 0.5, "memory": 0.0}
    assert report["stranded"]["cpu"] == round(0.5 * 100 / 110, 4)
    assert report["queueing_delay_s"]["50"]["max"] == 90.0
    assert report["pending_reasons"] and max(report["pending_reasons"], key=report["pending_reasons"].get) \
        == "insufficient memory"
    assert report["simulated_s"] == 110.0


def test_a_high_priority_task_preempts_and_its_victim_runs_again_after_it(simulator):
    trace = trace_of(node("n0", 2, "4GiB"),
                     task(0, "low", 2, 1000, 1, "1GiB", priority=10),
                     task(50, "high", 1, 100, 1, "1GiB", priority=500))
    report = simulator.replay(trace, Settings())
    assert report["preemptions"] == 1
    assert report["queueing_delay_s"]["500"]["max"] == 0.0  # placed as it arrived, on the victim's room
    # The victim's replacement waits for the high task to end (at 150), then runs its whole 1000 s.
    assert report["queueing_delay_s"]["10"] == {"tasks": 3, "p50": 0.0, "p95": 100.0, "p99": 100.0, "max": 100.0}
    assert report["simulated_s"] == 1150.0 and report["placed"] == 4 and report["pending_at_end"] == 0


def test_a_job_after_another_waits_for_it_to_complete_on_the_replays_clock(simulator):
    trace = trace_of(node("n0", 4, "4GiB"),
                     task(0, "first", 2, 10, 1, "1GiB"),
                     task(1, "then", 1, 5, 1, "1GiB", after=["first"]))
    report = simulator.replay(trace, Settings())
    # Room for all three from 0, but "then" waits for "first" to complete at 10.
    assert report["queueing_delay_s"]["50"]["max"] == 9.0
    assert report["simulated_s"] == 15.0 and report["placed"] == 3 and report["pending_at_end"] == 0


def test_job_spec_rules_quotas_and_node_events_replay_through_the_commit(simulator):
    zone_a, zone_b = ["node.labels.zone==a"], ["node.labels.zone==b"]
    trace = trace_of(node("n0", 8, "8GiB", labels={"zone": "a"}), node("n1", 8, "8GiB", labels={"zone": "b"}),
                     {"kind": "quota", "time": 0, "cpu": 5},
                     task(0, "one-each", 3, None, 1, "1GiB", max_per_node=1),
                     task(0, "zoned", 3, None, 1, "1GiB", constraints=zone_a),
                     task(10, "capped", 1, None, 1, "1GiB"),
                     {"kind": "node_down", "time": 30, "name": "n1"})
    report = simulator.replay(trace, Settings())
    # At 0: one task of one-each per node (max_per_node: the third waits), three zoned on n0:
    # the quota's 5 cpu are used. At 10 capped waits for the quota though both nodes have
    # room. At 30 n1 goes down: its task is lost, which gives back a cpu of the quota, and
    # capped is placed (on n0: n1 is down); the lost task's replacement waits (max_per_node).
    assert report["lost"] == 1
    assert report["placed"] == 6 and report["pending_at_end"] == 2 and report["tasks"] == 8
    assert report["queueing_delay_s"]["50"]["max"] == 20.0
    assert "max_per_node" in " ".join(report["pending_reasons"]) or "quota" in " ".join(report["pending_reasons"])


def test_compaction_finds_the_fewest_nodes_of_the_inventorys_shape(simulator):
    trace = trace_of(node("n0", 4, "8GiB"),
                     task(0, "a", 10, 100, 1, "1GiB"),
                     task(0, "b", 2, 100, 2, "1GiB"))
    found = compact(simulator.replay, trace, Settings(), max_wait_s=0)
    assert found["lower_bound"] == 4  # 14 cores at once, 4 a node
    assert found["nodes_needed"] == 4
    # The bound is sound: the search starts there, and its first probe places.
    assert [(t["nodes"], t["places"]) for t in found["tries"]] == [(4, True)]
    assert found["tries"][0]["stopped_at_s"] == 0  # settled at once: every task placed as it arrived
    three = simulator.replay(trace, Settings(nodes=3))
    assert three["pending_at_end"] == 0 and three["longest_wait_s"] > 0  # 3 nodes: the last ones wait
    patient = compact(simulator.replay, trace, Settings(), max_wait_s=100)
    # Waiting up to 100 s: 2 nodes run 8 cores from 0 and the other 6 from 100; 1 node would
    # make the last wait 300 s.
    assert patient["nodes_needed"] == 2


def test_trace_errors_are_one_sentence_with_the_line():
    with pytest.raises(SpecError, match=r"line 1: kind 'nod' is not one of .*did you mean 'node'"):
        trace_of({"kind": "nod", "time": 0})
    with pytest.raises(SpecError, match="line 2: node_down names node 'x', which no earlier node event adds"):
        trace_of(node("n0", 1, "1GiB"), {"kind": "node_down", "time": 1, "name": "x"})
    with pytest.raises(SpecError, match="line 2: job a's tasks must share one spec"):
        trace_of(task(0, "a", 1, 1, 1, "1GiB"), task(1, "a", 1, 1, 2, "1GiB"))
    with pytest.raises(SpecError, match="line 1: a task event has no field 'druation'|unknown field 'druation'"):
        trace_of({"kind": "task", "time": 0, "job": "a", "druation": 3})
    with pytest.raises(SpecError, match="line 1: time must be a number of seconds"):
        trace_of({"kind": "task", "time": -1, "job": "a"})


@pytest.mark.parametrize("field, value, named", [
    ("periodic", {"cron": "*/5 * * * *"}, '"periodic"'),
    ("parameterized", {}, '"parameterized"'),
    ("deadline", 60, '"deadline"'),
    ("tolerations", [{"key": "gpu", "effect": "NoExecute", "toleration_seconds": 30}], '"toleration_seconds"'),
])
def test_a_trace_that_needs_redis_time_is_refused_naming_the_field(field, value, named):
    # These run on Redis's clock, which barely moves during a replay: refused, not ignored.
    with pytest.raises(SpecError, match=f"line 2: job a's {named} is not replayed: it runs on Redis's clock"):
        trace_of(node("n0", 1, "1GiB"), {**task(1, "a", 1, 1, 1, "1GiB"), field: value})
    # Without the time, the same toleration replays.
    trace_of(node("n0", 1, "1GiB"), {**task(1, "a", 1, 1, 1, "1GiB"),
                                     "tolerations": [{"key": "gpu", "effect": "NoExecute"}]})


def test_google_2011_task_and_machine_events_become_tasks_and_nodes():
    tasks = [r for _, _, _, r in events_of([DATA / "google_2011_task_events.csv"], "auto")]
    assert detect(DATA / "google_2011_task_events.csv") == "google-2011"
    by_job = {}
    for record in tasks:
        by_job.setdefault(record["job"], []).append(record)
    # Task 0 ran 600 -> 900 s; task 1 never ended in the trace: it runs to the end.
    assert [r["duration"] for r in by_job["g6251812952"]] == [300.0, None]
    assert by_job["g6251812952"][0]["priority"] == 450
    assert by_job["g6251812952"][0]["resources"] == {"cpu": "2000m", "memory": "4168MiB"}  # 0.0318 of 128 GiB
    assert [(r["time"], r["duration"], r["max_per_node"]) for r in by_job["g515042969"]] == \
        [(605.0, 60.0, 1), (605.0, 100.0, 1)]
    assert by_job["g515042969-2"][0]["resources"]["cpu"] == "8000m"  # another request: another job
    assert "g900000001" not in by_job  # killed before it ever ran
    machines = [r for _, _, _, r in events_of([DATA / "google_2011_machine_events.csv"], "auto")]
    assert [(r["kind"], r["name"]) for r in machines] == [
        ("node", "m4155527081"), ("node", "m329150663"), ("node_down", "m329150663"), ("node_up", "m329150663")]
    assert machines[0]["cpu"] == "16000m"


def test_a_google_2011_sample_replays_with_its_machines(simulator):
    trace = load([DATA / "google_2011_task_events.csv"], nodes=[DATA / "google_2011_machine_events.csv"])
    report = simulator.replay(trace, Settings())
    assert report["trace_tasks"] == 5 and report["lost"] >= 1  # m329150663 goes down at 700 s
    assert report["placed"] == report["tasks"]


def test_google_2019_and_alibaba_2018_samples_are_read():
    assert detect(DATA / "google_2019_instance_events.json") == "google-2019"
    records = [r for _, _, _, r in events_of([DATA / "google_2019_instance_events.json"], "auto")]
    assert [(r["job"], r["time"], r["duration"], r["priority"]) for r in records] == [
        ("g373150940", 0.0, 3600.0, 200), ("g4005911473", 300.0, 120.0, 0)]
    assert detect(DATA / "alibaba_2018_batch_task.csv") == "alibaba-2018"
    rows = [r for _, _, _, r in events_of([DATA / "alibaba_2018_batch_task.csv"], "auto")]
    assert [(r["job"], r["time"], r["count"], r["duration"]) for r in rows] == [
        ("j_1-M1", 0.0, 10, 82.0), ("j_2-M1", 37.0, 4, 150.0), ("j_1-R2_1", 84.0, 1, 25.0), ("j_3-M1", 87.0, 2, None)]
    assert rows[0]["resources"] == {"cpu": "1000m", "memory": "2045MiB"}


def test_generated_traces_follow_the_seed_the_kind_and_the_machine_mix():
    first = list(generate("batch", 3000, 400, seed=7))
    assert first == list(generate("batch", 3000, 400, seed=7))
    assert first != list(generate("batch", 3000, 400, seed=8))
    tasks = [r for r in first if r["kind"] == "task"]
    assert sum(r["count"] for r in tasks) == 3000
    nodes = [r for r in first if r["kind"] == "node"]
    share = sum(1 for r in nodes if (r["cpu"], r["memory"]) == (16, "64GiB")) / len(nodes)
    assert abs(share - GOOGLE_2011_MACHINES[0][0]) < 0.08  # 53.47 % of Google's 2011 machines
    service = [r for r in generate("service", 3000, 400, seed=7) if r["kind"] == "task"]
    assert sum(r["count"] for r in service if r.get("type") == "service") > \
        sum(r["count"] for r in tasks if r.get("type") == "service")


def test_a_generated_trace_spread_over_a_day_keeps_its_jobs_and_stretches_their_arrivals():
    made = CliRunner().invoke(main, ["simulate", "generate", "--kind", "batch", "--tasks", "3000", "--nodes", "40",
                                     "--seed", "5", "--span", "86400"])
    assert made.exit_code == 0, made.output
    day = [json.loads(line) for line in made.output.splitlines()]
    plain = list(generate("batch", 3000, 40, seed=5))
    same = ("kind", "job", "count", "resources", "priority", "tenant")
    assert [{k: r.get(k) for k in same} for r in day] == [{k: r.get(k) for k in same} for r in plain]
    times = [r["time"] for r in day if r["kind"] == "task"]
    plain_times = [r["time"] for r in plain if r["kind"] == "task"]
    assert times == sorted(times) and 0.8 * 86_400 < times[-1] < 1.2 * 86_400  # Poisson: about the span
    stretch = times[-1] / plain_times[-1]
    assert all(abs(t - p * stretch) <= 0.001 * (stretch + 1) for t, p in zip(times, plain_times))  # the draws, scaled
    services = [r for r in day if r.get("type") == "service"]
    assert services and all(r["time"] + r["duration"] >= 86_400 - 0.1 for r in services)  # to the window's end
    refused = CliRunner().invoke(main, ["simulate", "generate", "--kind", "batch", "--tasks", "10", "--nodes", "2",
                                        "--span", "0"])
    assert refused.exit_code == 2 and "--span" in refused.output


def test_the_command_replays_compares_and_writes_the_page(tmp_path):
    runner = CliRunner()
    made = runner.invoke(main, ["simulate", "generate", "--kind", "batch", "--tasks", "60", "--nodes", "4",
                                "--seed", "3"])
    assert made.exit_code == 0, made.output
    trace = tmp_path / "trace.jsonl"
    trace.write_text(made.output)
    result = runner.invoke(main, ["simulate", str(trace), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    for field in ("tasks", "placed", "pending_at_end", "utilisation", "stranded", "queueing_delay_s",
                  "preemptions", "wall_s"):
        assert field in report
    assert report["trace_tasks"] == 60
    out = tmp_path / "report"
    both = runner.invoke(main, ["simulate", str(trace), "--compare", "strategy=binpack", "--compact", "--json",
                                "--out", str(out)])
    assert both.exit_code == 0, both.output
    runs = json.loads(both.output)["runs"]
    assert [r["settings"] for r in runs] == ["as traced", "strategy=binpack"]
    assert all(r["nodes_needed"] >= 1 and r["lower_bound"] >= 1 for r in runs)
    assert {p.name for p in out.iterdir()} >= {"index.html", "report.json", "utilisation.png", "pending.png",
                                               "stranded.png", "delay.png", "tenants.png", "compaction.png"}
    bad = runner.invoke(main, ["simulate", str(trace), "--compare", "strategy=tight"])
    assert bad.exit_code == 2 and "strategy is binpack or spread" in bad.output


def test_any_job_spec_field_replays_a_gang_waits_whole_until_it_fits(simulator):
    trace = trace_of(node("n0", 2, "4GiB"), node("n1", 2, "4GiB"),
                     task(0, "filler", 2, 100, 1, "1GiB", max_per_node=1),
                     task(10, "train", 3, 50, 1, "1GiB", gang=True))
    report = simulator.replay(trace, Settings())
    # 2 of the gang's 3 tasks could be placed at 10, but a gang is placed whole: it waits
    # for the filler to end at 100, then all three go at once.
    assert report["queueing_delay_s"]["50"]["max"] == 90.0
    assert report["placed"] == 5 and report["simulated_s"] == 150.0
    assert any("gang" in reason for reason in report["pending_reasons"])


def test_the_strategy_setting_changes_where_tasks_go(simulator):
    trace = trace_of(node("n0", 2, "4GiB"), node("n1", 2, "4GiB"),
                     task(0, "small", 2, None, 1, "1GiB"),
                     task(1, "big", 1, 10, 2, "1GiB"))
    spread = simulator.replay(trace, Settings())
    binpack = simulator.replay(trace, Settings(strategy="binpack"))
    # Spread puts one small task on each node and the big one finds no node with 2 cores;
    # bin-packing puts both on one node and leaves the other whole.
    assert (spread["pending_at_end"], binpack["pending_at_end"]) == (1, 0)
    assert binpack["settings"] == "strategy=binpack" and binpack["placed"] == 3


def test_taints_tolerations_and_job_anti_affinity_replay_through_the_commit(simulator):
    cache = {"labels": {"app": "cache"},
             "job_anti_affinity": [{"match": {"app": "cache"}, "attribute": "node.hostname", "required": True}]}
    trace = trace_of(node("n0", 4, "8GiB", taints=["dedicated=gpu:NoSchedule"]), node("n1", 4, "8GiB"),
                     node("n2", 4, "8GiB"),
                     task(0, "cache", 3, None, 1, "1GiB", **cache),
                     task(0, "gpu", 1, None, 4, "1GiB",
                          tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                        "effect": "NoSchedule"}]))
    report = simulator.replay(trace, Settings())
    # One cache task per node, and n0's taint keeps them off it: the third waits. The gpu
    # job tolerates the taint and takes n0 whole.
    assert (report["placed"], report["pending_at_end"]) == (3, 1)
    assert report["utilisation"]["cpu"] == 0.5  # 6 of 12 cores, all along

"""``sched simulate`` repeats: the same trace, settings and seed give the same report, byte
for byte but for its wall times, in one process and across processes (each with its own
redis-server and Python's hash seed); another seed may place otherwise. Also the form of
the command a user types (``sched simulate TRACE``, its options in ``--help``) and a
trace that starts with a comment."""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from scheduler.tools.cli import main
from scheduler.tools.simulate import Settings, Simulator
from scheduler.tools.simulate.trace import read_jsonl

SCHED = str(Path(sys.executable).parent / "sched")
WALL = ("wall_s", "tasks_per_wall_s")


def busy_events() -> list[dict]:
    """Six nodes, two tenants, three priorities arriving in bursts (so that tasks preempt
    and the worker's claims overlap its commits in production), a node lost and back, a
    drain, and a quota for a while."""
    rng = random.Random(3)
    events = [{"kind": "node", "time": 0, "name": f"n{i}", "cpu": 4, "memory": "8GiB", "labels": {"zone": "ab"[i % 2]}}
              for i in range(6)]
    events += [{"kind": "tenant", "time": 0, "name": name, "weight": weight}
               for name, weight in (("red", 1), ("blue", 2))]
    for j in range(60):
        events.append({"kind": "task", "time": rng.choice([0, 0, 1, 3, 8]), "job": f"j{j}",
                       "count": rng.randint(1, 8), "duration": rng.choice([2, 5, 15]),
                       "priority": rng.choice([10, 50, 100]), "tenant": rng.choice(["red", "blue"]),
                       "resources": {"cpu": rng.choice(["250m", "500m", "1"]),
                                     "memory": rng.choice(["256MiB", "1GiB"])}})
    events += [{"kind": "quota", "time": 2, "cpu": 16}, {"kind": "node_down", "time": 4, "name": "n1"},
               {"kind": "drain", "time": 6, "name": "n2"}, {"kind": "quota", "time": 7},
               {"kind": "node_up", "time": 9, "name": "n1"}]
    return events


def tie_events() -> list[dict]:
    """Two empty nodes that score the same: where the first task goes is the seed's
    tie-break, and decides whether the zoned task after it waits."""
    return [{"kind": "node", "time": 0, "name": "a0", "cpu": 2, "memory": "4GiB", "labels": {"zone": "a"}},
            {"kind": "node", "time": 0, "name": "b0", "cpu": 2, "memory": "4GiB", "labels": {"zone": "b"}},
            {"kind": "task", "time": 0, "job": "free", "duration": 100, "resources": {"cpu": 2, "memory": "1GiB"}},
            {"kind": "task", "time": 1, "job": "zoned", "duration": 10, "constraints": ["node.labels.zone==a"],
             "resources": {"cpu": 2, "memory": "1GiB"}}]


def trace_of(events: list[dict]):
    return read_jsonl(io.StringIO("\n".join(json.dumps(e) for e in events)), "test trace")


def write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def without_wall(report: dict) -> bytes:
    return orjson.dumps({k: v for k, v in report.items() if k not in WALL}, option=orjson.OPT_SORT_KEYS)


@pytest.fixture
def simulator(redis_url, namespace):
    return Simulator(redis_url, namespace)


def test_a_busy_trace_with_preemptions_replays_the_same_every_time(simulator):
    trace = trace_of(busy_events())
    # Small batches: claims follow one another while commits are in flight, as in a busy
    # production worker (where a claim ahead and a commit race; a replay runs them in turn).
    reports = [simulator.replay(trace, Settings(batch_size=16)) for _ in range(3)]
    first = reports[0]
    assert first["preemptions"] > 0 and first["lost"] > 0  # the trace exercises what it should
    assert first["placed"] == first["tasks"] > first["trace_tasks"]  # replacements, all placed
    assert [without_wall(r) for r in reports[1:]] == [without_wall(first)] * 2


def test_the_seed_decides_tie_breaks_and_each_seed_repeats(simulator):
    trace = trace_of(tie_events())
    waits = {}
    for seed in range(8):
        once, again = (simulator.replay(trace, Settings(seed=seed)) for _ in range(2))
        assert without_wall(once) == without_wall(again)
        waits[seed] = once["queueing_delay_s"]["50"]["max"]
    # The first task took a0 (the zoned one waits for it) for some seeds, b0 for others.
    assert set(waits.values()) == {0.0, 99.0}
    assert Settings(seed=3).label() == "seed=3" and Settings().label() == "as traced"


def _run(args: list[str], hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([SCHED, "simulate", *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _wall_removed(text: str) -> str:
    text = re.sub(r'"(wall_s|tasks_per_wall_s)": [0-9.e+-]+', r'"\1": -', text)
    return re.sub(r"(?m)^simulated \(s\) / wall \(s\).*$", "simulated / wall: -", text)


@pytest.mark.slow
def test_the_command_repeats_across_processes_byte_for_byte(tmp_path):
    trace = str(write(tmp_path / "busy.jsonl", busy_events()))
    # As a user types it first: two runs, each its own process, redis-server and hash seed.
    tables = [_run([trace], seed) for seed in ("1", "2")]
    assert "preemptions" in tables[0]
    assert _wall_removed(tables[0]) == _wall_removed(tables[1])
    reports = [_run([trace, "--json", "--seed", "5"], seed) for seed in ("3", "4")]
    assert json.loads(reports[0])["preemptions"] > 0
    assert _wall_removed(reports[0]) == _wall_removed(reports[1])


def test_another_seed_on_the_command_line_may_place_otherwise(tmp_path):
    trace = str(write(tmp_path / "tie.jsonl", tie_events()))
    runs = json.loads(_run([trace, "--json", "--compare", "seed=1", "--compare", "seed=2", "--compare", "seed=3"], "0"))
    waits = [r["queueing_delay_s"]["50"]["max"] for r in runs["runs"]]
    assert [r["settings"] for r in runs["runs"]] == ["as traced", "seed=1", "seed=2", "seed=3"]
    assert len(set(waits)) == 2  # the same trace, placed two ways by four seeds


def test_the_replay_options_are_in_the_commands_help():
    runner = CliRunner()
    shown = runner.invoke(main, ["simulate", "--help"], prog_name="sched")
    assert shown.exit_code == 0
    assert "Usage: sched simulate TRACE... [OPTIONS]" in shown.output
    for option in ("--seed", "--compact", "--max-wait", "--compare", "--node-count", "--strategy", "--tick",
                   "--until", "--out", "--json"):
        assert option in shown.output, option
    assert "generate" in shown.output and "convert" in shown.output
    bad = runner.invoke(main, ["simulate", "trace.jsonl", "--sede", "1"], prog_name="sched")
    assert bad.exit_code == 2 and "--seed" in bad.output and "sched simulate run" not in bad.output


def test_the_older_form_with_run_still_replays(tmp_path):
    trace = str(write(tmp_path / "tie.jsonl", tie_events()))
    result = CliRunner().invoke(main, ["simulate", "run", trace, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["placed"] == 2


def test_a_trace_that_starts_with_a_comment_is_read_by_format_auto(tmp_path):
    path = tmp_path / "commented.jsonl"
    path.write_text("# two nodes and two tasks\n\n" + "".join(json.dumps(e) + "\n" for e in tie_events()))
    result = CliRunner().invoke(main, ["simulate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["trace_tasks"] == 2
    only = tmp_path / "only-comments.jsonl"
    only.write_text("# nothing yet\n")
    refused = CliRunner().invoke(main, ["simulate", str(only)])
    assert refused.exit_code == 2
    assert f"{only} has no events; see docs/simulate.md" in refused.output

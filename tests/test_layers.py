"""The package's layers stay layers: import-linter checks the contracts in pyproject.toml
(model <- engine | state <- control <- client <- tools <- workers, and no import cycle
among the modules of workers or of any package of the scheduler), no module of
scheduler/, workers/ or tests/ is over 650 lines, and only the state layer talks to Redis."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 650


def test_import_layers_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout


def test_no_module_is_over_650_lines():
    """One idea per file: a module that grows past 650 lines holds more than one, and is
    split by its ideas (a noun of its own), not cut in half."""
    long = []
    for path in sorted(p for folder in ("scheduler", "workers", "tests") for p in ROOT.joinpath(folder).rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == [], f"over {MAX_LINES} lines"


def test_only_the_state_layer_calls_redis():
    calls = re.compile(r"(?<!scheduler)\.client\.|\.pipeline\(|\.pubsub\(|redis\.Redis\b")  # not the package scheduler.client
    outside = []
    for path in sorted([*ROOT.joinpath("scheduler").rglob("*.py"), *ROOT.joinpath("workers").glob("*.py")]):
        if path.parent.name == "state":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if calls.search(line):
                outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert outside == []


def test_lua_scripts_ship_inside_the_scheduler_package():
    from importlib.resources import files

    names = {p.name for p in files("scheduler.lua").iterdir()}
    assert {"commit.lua", "claim.lua", "_lib.lua"} <= names
    top_level = subprocess.run([sys.executable, "-c", "import lua"], cwd="/", capture_output=True)
    assert top_level.returncode != 0  # no top-level module named lua is installed


def test_each_lua_script_has_one_python_wrapper_in_the_state_layer():
    """One place lays out each script's KEYS and ARGV: a direct call (``scripts.commit(``)
    or a call queued on a pipeline (``scripts.queue(pipe, "tallies"``). scripts.py, which
    loads them, is not a wrapper."""
    from scheduler.state.scripts import SCRIPT_NAMES

    calls = re.compile(r"scripts\.queue\([^,]+,\s*\"(\w+)\"|scripts\.(\w+)\(")
    wrappers: dict[str, list[str]] = {name: [] for name in SCRIPT_NAMES}
    for path in sorted([*ROOT.joinpath("scheduler").rglob("*.py"), *ROOT.joinpath("workers").glob("*.py")]):
        if path.name == "scripts.py" and path.parent.name == "state":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in calls.finditer(line):
                name = match.group(1) or match.group(2)
                if name in wrappers:
                    wrappers[name].append(f"{path.relative_to(ROOT)}:{number}")
    assert {name: places for name, places in wrappers.items() if len(places) != 1} == {}
    assert all(place.startswith("scheduler/state/") for places in wrappers.values() for place in places)

"""scheduler/native.py: the compiled hot path runs only when it is current; SCHED_PURE=1,
no build or a source changed since the build run the .py files, the last with one line
saying so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scheduler import native

CURRENT = {"suffix": ".cpython-311-x86_64-linux-gnu.so",
           "sources": {module: "a" * 64 for module in native.COMPILED}}


def test_a_current_build_runs_compiled():
    assert native.decide(CURRENT, CURRENT, forced_pure=False) == "compiled"


def test_sched_pure_wins_over_a_current_build():
    assert native.decide(CURRENT, CURRENT, forced_pure=True) == "pure: SCHED_PURE=1"


@pytest.mark.parametrize("manifest", [None, {**CURRENT, "suffix": ".cpython-312-x86_64-linux-gnu.so"}])
def test_no_build_for_this_interpreter_runs_pure(manifest):
    assert native.decide(manifest, CURRENT, forced_pure=False) == "pure: not built"


def test_a_changed_source_makes_the_build_stale_and_says_which():
    changed = {**CURRENT, "sources": {**CURRENT["sources"], "scheduler.engine.fit": "b" * 64}}
    assert native.decide(CURRENT, changed, forced_pure=False) == \
        "pure: stale (scheduler/engine/fit.py changed since the build)"


def imported_files(env: dict) -> list[str]:
    code = ("import importlib, scheduler.native as n; "
            "print(n.STATE); [print(importlib.import_module(m).__file__) for m in n.COMPILED]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_sched_pure_imports_every_compiled_module_from_its_source():
    state, *files = imported_files({**os.environ, "SCHED_PURE": "1"})
    assert state == "pure:"  # "pure: SCHED_PURE=1", split
    assert files[-len(native.COMPILED):] == [str(native.source(m)) for m in native.COMPILED]


@pytest.mark.skipif(native.STATE != "compiled", reason="the hot path is not compiled here")
def test_a_current_build_imports_the_extension_modules():
    state, *files = imported_files({k: v for k, v in os.environ.items() if k != native.PURE_ENV})
    assert state == "compiled"
    assert all(not name.endswith(".py") for name in files), files

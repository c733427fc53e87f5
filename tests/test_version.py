"""``sched version``: the version, the Python, whether the hot path runs compiled, and the
redis-py and RQ versions, without Redis (tests/test_install.py runs it from a wheel)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib.metadata import version as installed_version

from click.testing import CliRunner

from scheduler import native
from scheduler.tools.cli import main
from scheduler.tools.cli.version import hot_path

NO_REDIS = ["--redis-url", "redis://127.0.0.1:1/0"]  # nothing listens there: the command must not connect


def test_version_says_what_is_installed_and_how_it_runs():
    done = CliRunner().invoke(main, [*NO_REDIS, "version"])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"sched     {installed_version('redis-sched')}",
        f"python    {platform.python_version()} ({platform.python_implementation()}, {sys.executable})",
        f"hot path  {hot_path(native.STATE)}",
        f"redis-py  {installed_version('redis')}",
        f"rq        {installed_version('rq')}"]


def test_version_json():
    done = CliRunner().invoke(main, [*NO_REDIS, "version", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {
        "version": installed_version("redis-sched"), "python": platform.python_version(),
        "python_implementation": platform.python_implementation(), "executable": sys.executable,
        "hot_path": native.STATE, "compiled": native.STATE == "compiled",
        "redis": installed_version("redis"), "rq": installed_version("rq")}


def test_the_hot_path_says_why_it_is_pure():
    assert hot_path("compiled") == "compiled (mypyc)"
    assert hot_path("pure: not built") == "pure Python, not built"
    assert hot_path("pure: stale (scheduler/engine/fit.py changed since the build)") == \
        "pure Python, stale (scheduler/engine/fit.py changed since the build)"


def test_sched_pure_shows_in_a_process_of_its_own():
    done = subprocess.run([sys.executable, "-m", "scheduler", *NO_REDIS, "version", "--json"], capture_output=True,
                          text=True, env={**os.environ, native.PURE_ENV: "1"}, timeout=60)
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)
    assert (reported["hot_path"], reported["compiled"]) == ("pure: SCHED_PURE=1", False)


def test_dash_dash_version_prints_the_version_alone():
    done = CliRunner().invoke(main, ["--version"])
    assert done.exit_code == 0 and done.stdout == f"sched {installed_version('redis-sched')}\n"

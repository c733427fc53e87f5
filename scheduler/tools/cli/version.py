"""``sched version``: what is installed and how it runs: sched's version, the Python, whether
the hot path runs compiled or pure (``scheduler/native.py``), and the Redis and RQ libraries."""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version as installed_version

import click

from scheduler import native
from scheduler.tools.cli.common import json_option
from scheduler.tools.render import print_json

DISTRIBUTION = "redis-sched"  # pyproject.toml's project name


def _version(distribution: str) -> str | None:
    try:
        return installed_version(distribution)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return None


def versions() -> dict:
    return {"version": _version(DISTRIBUTION), "python": platform.python_version(),
            "python_implementation": platform.python_implementation(), "executable": sys.executable,
            "hot_path": native.STATE, "compiled": native.compiled(),
            "redis": _version("redis"), "rq": _version("rq")}


def hot_path(state: str) -> str:
    """``compiled (mypyc)``, or ``pure Python, `` and why (``not built``, ``SCHED_PURE=1``, ``stale (...)``)."""
    return "compiled (mypyc)" if state == "compiled" else "pure Python, " + state.removeprefix("pure: ")


@click.command()
@json_option
def version(as_json):
    """Say sched's version, the Python it runs on, whether its hot path runs compiled
    (built with mypyc where the install had a C compiler) or as pure Python and why, and
    the versions of redis-py and RQ. Needs no Redis.

    \b
    sched version
    sched version --json
    """
    found = versions()
    if as_json:
        return print_json(found)
    for name, value in (("sched", found["version"] or "unknown (not installed)"),
                        ("python", f"{found['python']} ({found['python_implementation']}, {found['executable']})"),
                        ("hot path", hot_path(found["hot_path"])),
                        ("redis-py", found["redis"]), ("rq", found["rq"])):
        click.echo(f"{name:<10}{value}")

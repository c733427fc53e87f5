"""The compiled hot path: which modules may run compiled, and whether they do.

The tests' setup (``scripts/setup.sh``, through ``scripts/build_native.py``) compiles the
modules in :data:`COMPILED` with mypyc: the same ``.py`` files, built into extension
modules beside them, which Python then imports in their place. The ``.py`` files stay the
source of truth and run as they are (pure Python) when

- ``SCHED_PURE=1`` is set;
- nothing was built for this interpreter (``scripts/setup.sh --demo``, a build that failed);
- a source changed since the build: one line on stderr says so, until ``scripts/setup.sh``
  builds again.

Imported first thing by ``scheduler/__init__.py``, so the choice is made before any of
those modules is.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path

COMPILED = (
    "scheduler.engine.fit",
    "scheduler.engine.topology",
    "scheduler.engine.fewest",
    "scheduler.engine.node_table",
    "scheduler.engine.scoring",
    "scheduler.engine.pipeline",
    "scheduler.engine.filters",
    "scheduler.engine.fill",
    "scheduler.engine.domains",
    "scheduler.engine.rule_classes",
    "scheduler.state.node_cache",
    "scheduler.model.node",
)
GROUP = "scheduler._native"  # the build's shared library: scheduler/_native__mypyc.*.so
# How both builds (setup.py's and scripts/build_native.py's) run mypyc over them.
MYPYC_OPTIONS = ("--follow-imports=silent", "--ignore-missing-imports", "--disable-error-code=annotation-unchecked")
MYPYC_OPT_LEVEL = "3"
PURE_ENV = "SCHED_PURE"
ROOT = Path(__file__).resolve().parent.parent  # the folder holding the scheduler package
MANIFEST = ROOT / "scheduler" / "_native.json"  # written by the build, last


def source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def fingerprint() -> dict:
    """What a build is valid for: this interpreter's extension suffix and each source's hash."""
    return {"suffix": sysconfig.get_config_var("EXT_SUFFIX"),
            "sources": {module: hashlib.sha256(source(module).read_bytes()).hexdigest() for module in COMPILED}}


def decide(manifest: dict | None, current: dict, forced_pure: bool) -> str:
    """``compiled``, or why not: ``pure: SCHED_PURE=1``, ``pure: not built``, or
    ``pure: stale (...)`` naming the sources changed since the build."""
    if forced_pure:
        return f"pure: {PURE_ENV}=1"
    if not manifest or manifest.get("suffix") != current["suffix"]:
        return "pure: not built"
    changed = [module for module, digest in current["sources"].items() if manifest["sources"].get(module) != digest]
    if changed:
        return f"pure: stale ({', '.join(source(m).relative_to(ROOT).as_posix() for m in changed)} changed since the build)"
    return "compiled"


class _Sources(importlib.abc.MetaPathFinder):
    """Imports the modules of :data:`COMPILED` from their ``.py`` files, whatever lies beside them."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


def _manifest() -> dict | None:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None


def _choose() -> str:
    forced = os.environ.get(PURE_ENV, "") not in ("", "0")
    manifest = None if forced else _manifest()
    state = decide(manifest, fingerprint(), forced) if manifest or forced else "pure: not built"
    if state != "compiled":
        sys.meta_path.insert(0, _Sources())
        if state.startswith("pure: stale"):
            print(f"sched: running pure Python, the compiled modules are {state[6:]}; "
                  f"scripts/setup.sh compiles them again", file=sys.stderr)
    return state


STATE = _choose()


def compiled() -> bool:
    """Whether the hot path runs compiled in this process."""
    return STATE == "compiled"

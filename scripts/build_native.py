"""Compile the hot path (``scheduler.native.COMPILED``) with mypyc, beside its sources.

Run by ``scripts/setup.sh`` (not by ``--demo``). Does nothing when the build in place is
current (the manifest, ``scheduler/_native.json``, matches the sources and the
interpreter). Otherwise it removes the old build, compiles, and writes the manifest last,
so an interrupted build leaves pure Python, never a stale module. A build that fails
says so in one line and leaves pure Python (exit status 0: the project works without it).

    python scripts/build_native.py [--force]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["SCHED_PURE"] = "1"  # this process imports the sources, never an old build
from scheduler import native  # noqa: E402

SETUP = """
import sys
from mypyc.build import mypycify
from setuptools import setup

from scheduler import native

sources, target = sys.argv[1].split(","), sys.argv[2]
setup(name="sched-native", script_args=["build_ext", "--inplace", "--parallel", "2", "--build-temp", target],
      packages=[],  # only the extensions: no package discovery
      ext_modules=mypycify([*native.MYPYC_OPTIONS, *sources], opt_level=native.MYPYC_OPT_LEVEL,
                           group_name=native.GROUP, target_dir=target))
"""


def built_files() -> list[Path]:
    """Extension modules of a build: each compiled module's, and the group's shared one."""
    suffixes = (".so", ".pyd")
    found = [path for module in native.COMPILED for path in native.source(module).parent.glob(
        native.source(module).stem + ".*") if path.suffix in suffixes]
    group = native.ROOT.joinpath(*native.GROUP.split("."))
    return found + [path for path in group.parent.glob(group.name + "__mypyc.*") if path.suffix in suffixes]


def clean() -> None:
    native.MANIFEST.unlink(missing_ok=True)
    for path in built_files():
        path.unlink()


def main() -> int:
    current = native.fingerprint()
    try:
        manifest = json.loads(native.MANIFEST.read_text())
    except (OSError, ValueError):
        manifest = None
    if "--force" not in sys.argv and native.decide(manifest, current, False) == "compiled" and built_files():
        return 0
    clean()
    started = time.monotonic()
    target = ROOT / "build" / "native"  # the generated C and objects (build/ is not in git)
    shutil.rmtree(target, ignore_errors=True)
    sources = [str(native.source(module).relative_to(ROOT)) for module in native.COMPILED]
    result = subprocess.run([sys.executable, "-c", SETUP, ",".join(sources), str(target.relative_to(ROOT))],
                            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "SCHED_PURE": "1"})
    shutil.rmtree(target, ignore_errors=True)
    if result.returncode != 0:
        clean()
        log = Path(tempfile.gettempdir()) / "sched-native-build.log"
        log.write_text(result.stdout + result.stderr + f"\nexit status {result.returncode}\n")
        print(f"setup: compiling the hot path failed ({log}); sched runs as pure Python", file=sys.stderr)
        return 0
    native.MANIFEST.write_text(json.dumps(current, indent=1) + "\n")
    print(f"setup: compiled the hot path with mypyc in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

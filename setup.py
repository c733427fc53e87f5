"""The build (``pip install .``, ``python -m build``): the packages found, not listed, and the
hot path compiled with mypyc where it can be, as mypy builds itself.

``pyproject.toml`` declares the project; this file adds what a declaration cannot say:

- **Packages**: every folder under ``scheduler/`` and ``workers/``, found by setuptools, and
  ``scheduler.lua``, the Lua scripts of ``lua/``. Package data is every file in them but
  Python's and the build's own (``MANIFEST.in``): the scripts, the dashboard's templates
  and static files, whatever else is read through ``importlib.resources``.
- **The compiled hot path** (the modules of ``scheduler.native.COMPILED``): built when mypy
  (a build requirement) is importable and this Python's C compiler builds against its
  headers; otherwise, with ``SCHED_MYPYC=0``, or when the compile fails, the build is pure
  Python and runs the same. A compiled build writes ``scheduler/_native.json`` after its
  extension modules, so that the installed ``sched`` runs them (``scheduler/native.py``;
  ``sched version`` says which). The editable install of ``scripts/setup.sh`` is pure, and
  ``scripts/build_native.py`` compiles beside the sources when they change.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
MYPYC_ENV = "SCHED_MYPYC"
# The Lua scripts live at the top of the repository and ship as a package of their own.
PACKAGE_DIR = {"scheduler.lua": "lua"}


def _native():
    """``scheduler/native.py`` of this tree, imported without choosing a build (its sources only)."""
    sys.path.insert(0, str(HERE))
    before = os.environ.get("SCHED_PURE")
    os.environ["SCHED_PURE"] = "1"
    try:
        from scheduler import native
    finally:
        if before is None:
            del os.environ["SCHED_PURE"]
        else:
            os.environ["SCHED_PURE"] = before
    return native


native = _native()


def say(message: str) -> None:
    print(f"sched build: {message}", file=sys.stderr)


def compiler_works() -> bool:
    """Whether the C compiler Python builds extensions with compiles against its headers."""
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder, "probe.c")
        probe.write_text("#include <Python.h>\nint main(void) { return 0; }\n")
        try:
            done = subprocess.run([*compiler, "-c", str(probe), "-o", str(probe.with_suffix(".o")),
                                   "-I" + sysconfig.get_paths()["include"]], capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
    return done.returncode == 0


BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist", "bdist_egg"}


def builds() -> bool:
    """Whether setuptools was asked to build (a wheel, an install), not only for the metadata
    or the sdist: mypycify type-checks and writes the C when called, which takes a while."""
    return not BUILD_COMMANDS.isdisjoint(sys.argv[1:])


def native_extensions() -> list:
    if not builds():
        return []
    if os.environ.get(MYPYC_ENV, "") == "0":
        say(f"{MYPYC_ENV}=0: the hot path stays pure Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        say("no mypy in the build environment: the hot path stays pure Python")
        return []
    if not compiler_works():
        say("no working C compiler (or no Python headers): the hot path stays pure Python")
        return []
    sources = [native.source(module).relative_to(HERE).as_posix() for module in native.COMPILED]
    try:
        return mypycify([*native.MYPYC_OPTIONS, *sources], opt_level=native.MYPYC_OPT_LEVEL, group_name=native.GROUP)
    except (Exception, SystemExit) as exc:  # mypyc prints what it refused, then exits
        say(f"mypyc could not translate the hot path ({exc!r}): it stays pure Python")
        return []


def built_in(folder: Path) -> list[Path]:
    """The compiled hot path's files in a tree rooted at ``folder``: its extension modules and manifest."""
    found = [folder / native.MANIFEST.relative_to(HERE)]
    for module in (*native.COMPILED, native.GROUP + "__mypyc"):
        path = folder.joinpath(*module.split("."))
        found += [p for p in path.parent.glob(path.name + ".*") if p.suffix in (".so", ".pyd")]
    return found


class BuildPy(build_py):
    """Clears the build folder of an earlier build's compiled modules: setuptools reuses
    ``build/lib``, and a pure build must not ship them."""

    def run(self):
        for path in built_in(Path(self.build_lib)):
            path.unlink(missing_ok=True)
        super().run()


class BuildExt(build_ext):
    """Builds the extension modules, then writes the manifest beside them; a compile that
    fails leaves a pure build (one line says so)."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # the compiler's own output has been printed above
            for path in built_in(Path(self.build_lib)):
                path.unlink(missing_ok=True)
            self.extensions = []
            self.distribution.ext_modules = []
            say(f"compiling the hot path failed ({exc}): it stays pure Python")
            return
        folder = HERE if self.inplace else Path(self.build_lib)
        manifest = folder / native.MANIFEST.relative_to(HERE)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(native.fingerprint(), indent=1) + "\n")
        say(f"compiled the hot path with mypyc ({len(native.COMPILED)} modules)")


setup(
    # Namespace packages too: the folders of package data (the dashboard's templates/, static/).
    packages=[*find_namespace_packages(include=["scheduler", "scheduler.*", "workers", "workers.*"],
                                       exclude=["*.__pycache__"]), *PACKAGE_DIR],
    package_dir=PACKAGE_DIR,
    ext_modules=native_extensions(),
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
)

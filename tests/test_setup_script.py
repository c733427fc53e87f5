"""scripts/setup.sh: quiet when nothing needs doing; one "setup: ..." line per step it
takes; python3-venv installed with apt-get when ``python3 -m venv`` is unavailable; with
``--demo`` only what the demo needs (redis-server, the package), without it also what
only the tests need (redis-sentinel, chromium, the test extras) and the compiled hot path.

The other tests run a copy of the script in a scratch folder with stand-ins for python3,
apt-get, sudo and redis-server first on PATH (apt-get "installs" a package by adding a
stand-in command of its name), so that nothing is installed on the machine and the real
.venv is not touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = r"""#!/bin/sh
case "$*" in
  *sys.version_info*) exit 0 ;;
  *"import ensurepip, venv"*) [ -f "$STUBS/venv-installed" ] ;;
  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && touch "$3/bin/sched" && chmod +x "$3/bin/sched" ;;
  "-m pip "*) echo "pip $* SCHED_MYPYC=${SCHED_MYPYC-unset}" >> "$STUBS/calls"
              case "$*" in *"[test]"*) touch "$(dirname "$0")/pytest" && chmod +x "$(dirname "$0")/pytest" ;; esac ;;
  -V) echo "Python 3.11.2" ;;
  *Python.h*) exit 0 ;;
  *build_native.py*) echo "build $*" >> "$STUBS/calls" ;;
  *purelib*) echo "$STUBS/site-packages" ;;
  "-m compileall "*) echo "compileall ${*##* }" >> "$STUBS/calls" ;;
  *) exit 1 ;;
esac
"""
FAKE_APT = r"""#!/bin/sh
echo "apt-get $*" >> "$STUBS/calls"
case "$*" in
  *"install -y python3-venv"*) touch "$STUBS/venv-installed" ;;
  *"install -y "*) package="${*##* }"; printf '#!/bin/sh\n' > "$STUBS/$package"; chmod +x "$STUBS/$package" ;;
esac
"""
FAKE_SUDO = r"""#!/bin/sh
[ "$1" = "-n" ] && shift
exec "$@"
"""


def test_setup_is_silent_when_nothing_needs_doing():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
    demo = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--demo"], capture_output=True, text=True,
                          timeout=300)
    assert demo.returncode == 0 and demo.stdout == "" and demo.stderr == "", demo


def scratch(tmp_path) -> tuple[Path, Path, dict]:
    """A copy of setup.sh in a scratch project, and stand-ins for what it runs."""
    project, stubs = tmp_path / "project", tmp_path / "stubs"
    (project / "scripts").mkdir(parents=True)
    stubs.mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", project / "scripts" / "setup.sh")
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for name, text in (("python3", FAKE_PYTHON), ("apt-get", FAKE_APT), ("sudo", FAKE_SUDO),
                       ("redis-server", "#!/bin/sh\n")):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    # No chromium or redis-sentinel of the machine's: only the stand-ins' PATH and the shell's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "cat", "cut", "sha256sum", "mktemp", "rm", "mkdir", "cp", "touch", "chmod", "id",
                 "dirname", "readlink", "env", "printf"):
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, bin_dir / tool)
    env = {"PATH": f"{stubs}:{bin_dir}", "STUBS": str(stubs), "HOME": str(tmp_path)}
    return project, stubs, env


def run_setup(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(project / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_setup_installs_python3_venv_and_says_each_step(tmp_path):
    project, stubs, env = scratch(tmp_path)
    done = run_setup(project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("setup: ") for line in lines), lines
    assert any("installing python3-venv" in line for line in lines), lines
    assert any("creating the virtualenv" in line for line in lines), lines
    assert any("installing the project and its test tools" in line for line in lines), lines
    assert any("caching the installed packages' bytecode" in line for line in lines), lines
    calls = (stubs / "calls").read_text()
    assert "apt-get install -y python3-venv" in calls and "pip install" in calls and "[test]" in calls
    assert f"compileall {stubs}/site-packages" in calls, calls

    (stubs / "calls").unlink()
    again = run_setup(project, env)
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", again
    assert os.path.exists(project / ".venv" / ".sched-install-stamp")
    # Once per install: a later run compiles only the project's own modules (those changed).
    calls = (stubs / "calls").read_text()
    assert "site-packages" not in calls and f"compileall {project}/workers" in calls, calls


def test_the_demo_setup_installs_only_what_the_demo_needs_and_the_tests_the_rest(tmp_path):
    project, stubs, env = scratch(tmp_path)
    (stubs / "venv-installed").touch()

    demo = run_setup(project, env, "--demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    calls = (stubs / "calls").read_text()
    assert "apt-get" not in calls, calls  # redis-server is there; nothing else is wanted
    assert "pip install" in calls and "[test]" not in calls, calls
    assert "build_native.py" not in calls, calls  # the demo runs pure Python: nothing compiled
    assert "SCHED_MYPYC=0" in calls, calls  # nor by the install (setup.py)
    assert not (stubs / "chromium").exists() and not (stubs / "redis-sentinel").exists()
    assert any("installing the project into .venv" in line for line in demo.stdout.splitlines()), demo.stdout
    again = run_setup(project, env, "--demo")
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", again

    (stubs / "calls").unlink()
    tests = run_setup(project, env)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    calls = (stubs / "calls").read_text()
    assert "apt-get install -y redis-sentinel" in calls and "apt-get install -y chromium" in calls, calls
    assert "[test]" in calls and "creating the virtualenv" not in tests.stdout, (calls, tests.stdout)
    assert "build_native.py" in calls and "apt-get install -y gcc" in calls, calls  # the compiled hot path
    for setup_args in ((), ("--demo",)):  # the tests' install serves the demo too
        quiet = run_setup(project, env, *setup_args)
        assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", (setup_args, quiet)


def test_an_unknown_option_is_one_sentence(tmp_path):
    project, stubs, env = scratch(tmp_path)
    done = run_setup(project, env, "--everything")
    assert done.returncode == 2 and done.stdout == "" and not (project / ".venv").exists()
    assert done.stderr.strip() == ("setup.sh: unknown option '--everything'; use no option (everything) or --demo "
                                   "(what the demo needs).")

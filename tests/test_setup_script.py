"""scripts/setup.sh: quiet when nothing needs doing; one "setup: ..." line per step it
takes; python3-venv installed with apt-get when ``python3 -m venv`` is unavailable.

The second test runs a copy of the script in a scratch folder with stand-ins for
python3, apt-get, sudo, redis-server and chromium first on PATH, so that nothing is
installed on the machine and the real .venv is not touched."""

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
  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && touch "$3/bin/pytest" "$3/bin/sched" \
                 && chmod +x "$3/bin/pytest" "$3/bin/sched" ;;
  "-m pip "*) echo "pip $*" >> "$STUBS/calls" ;;
  -V) echo "Python 3.11.2" ;;
  *) exit 1 ;;
esac
"""
FAKE_APT = r"""#!/bin/sh
echo "apt-get $*" >> "$STUBS/calls"
case "$*" in *"install -y python3-venv"*) touch "$STUBS/venv-installed" ;; esac
"""
FAKE_SUDO = r"""#!/bin/sh
[ "$1" = "-n" ] && shift
exec "$@"
"""


def test_setup_is_silent_when_nothing_needs_doing():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


def test_setup_installs_python3_venv_and_says_each_step(tmp_path):
    project, stubs = tmp_path / "project", tmp_path / "stubs"
    (project / "scripts").mkdir(parents=True)
    stubs.mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", project / "scripts" / "setup.sh")
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for name, text in (("python3", FAKE_PYTHON), ("apt-get", FAKE_APT), ("sudo", FAKE_SUDO),
                       ("redis-server", "#!/bin/sh\n"), ("chromium", "#!/bin/sh\n")):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUBS": str(stubs), "HOME": str(tmp_path)}

    done = subprocess.run(["bash", str(project / "scripts" / "setup.sh")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("setup: ") for line in lines), lines
    assert any("installing python3-venv" in line for line in lines), lines
    assert any("creating the virtualenv" in line for line in lines), lines
    assert any("installing the project" in line for line in lines), lines
    calls = (stubs / "calls").read_text()
    assert "apt-get install -y python3-venv" in calls and "pip install" in calls

    again = subprocess.run(["bash", str(project / "scripts" / "setup.sh")], capture_output=True, text=True,
                           env=env, timeout=60)
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", again
    assert os.path.exists(project / ".venv" / ".sched-install-stamp")

#!/usr/bin/env bash
# Idempotent developer/CI setup.
#
#   scripts/setup.sh           everything: what the demo needs, and what only the tests need
#                              (redis-sentinel, chromium, the project's test extras), and the
#                              compiled hot path (mypyc; gcc and the Python headers with apt-get
#                              when missing; ~25 s, again only when its sources change)
#   scripts/setup.sh --demo    only what the demo needs: redis-server, and a .venv (Python
#                              3.11+) with an editable install of the project (pure Python)
#
# Quiet when nothing needs doing; otherwise one "setup: ..." line per step it takes, and
# a step's captured output only when it fails.
set -euo pipefail

case "${1:-}" in
    "") FOR_TESTS=1 ;;
    --demo) FOR_TESTS=0 ;;
    *) echo "setup.sh: unknown option '$1'; use no option (everything) or --demo (what the demo needs)." >&2; exit 2 ;;
esac

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
ROOT="$PWD"
VENV="$ROOT/.venv"
STAMP="$VENV/.sched-install-stamp"

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

# Run a command with output captured; on failure, dump the output and exit.
quiet() {
    if ! "$@" >"$LOG" 2>&1; then
        echo "setup.sh: command failed: $*" >&2
        cat "$LOG" >&2
        exit 1
    fi
}

step() {
    echo "setup: $*"
}

# --- system packages: redis-server; for the tests also redis-sentinel and chromium ---
APT_UPDATED=0
# apt_install PACKAGE WHY: install PACKAGE with apt-get (as root, or with passwordless sudo).
apt_install() {
    local package="$1" why="$2"
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        echo "setup.sh: $package is missing ($why); install it (e.g. 'sudo apt-get install -y $package') and re-run." >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "setup.sh: $package is missing ($why) and apt-get is unavailable; install it with your package manager and re-run." >&2
        exit 1
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        step "updating the apt package lists (to install $package)"
        quiet "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        APT_UPDATED=1
    fi
    step "installing $package with apt-get ($why)"
    quiet "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$package"
}

# ensure_apt_package COMMAND PACKAGE WHY: install PACKAGE with apt-get unless COMMAND exists.
ensure_apt_package() {
    local command="$1" package="$2" why="$3"
    if command -v "$command" >/dev/null 2>&1; then
        return
    fi
    apt_install "$package" "$why"
    if ! command -v "$command" >/dev/null 2>&1; then
        echo "setup.sh: $command still not found after apt-get install $package." >&2
        exit 1
    fi
}

ensure_apt_package redis-server redis-server "the embedded Redis and the tests run it"
if [ "$FOR_TESTS" -eq 1 ]; then
    ensure_apt_package redis-sentinel redis-sentinel "the Sentinel failover tests run it"
    # Debian's chromium, driven by Playwright in tests/test_ui.py (Playwright's own browser
    # download is never used).
    ensure_apt_package chromium chromium "the dashboard's browser tests run it headless"
fi

# --- virtualenv -------------------------------------------------------------
is_py311() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

if [ ! -x "$VENV/bin/python" ] || ! is_py311 "$VENV/bin/python"; then
    PY=""
    for cand in python3 python3.13 python3.12 python3.11; do
        if command -v "$cand" >/dev/null 2>&1 && is_py311 "$cand"; then
            PY="$cand"
            break
        fi
    done
    if [ -z "$PY" ]; then
        echo "setup.sh: Python 3.11+ is required (python3 not found or too old)." >&2
        exit 1
    fi
    # Debian and Ubuntu ship venv (and the ensurepip it needs) apart, in python3-venv.
    if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install python3-venv "python3 -m venv needs it"
        if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
            echo "setup.sh: '$PY -m venv' still does not work after apt-get install python3-venv; install the venv package for $("$PY" -V 2>&1) (e.g. python3.11-venv) and re-run." >&2
            exit 1
        fi
    fi
    step "creating the virtualenv .venv with $PY"
    rm -rf "$VENV"
    quiet "$PY" -m venv "$VENV"
fi

# --- project install (skipped when pyproject.toml is unchanged) ---------------
# The stamp holds pyproject.toml's hash and what was installed: "demo" (the package) or
# "tests" (the package and its test extras, which also serves the demo).
HASH="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
INSTALLED="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$FOR_TESTS" -eq 1 ]; then
    WANTED="$HASH tests"
    SATISFIED=$([ "$INSTALLED" = "$WANTED" ] && [ -x "$VENV/bin/pytest" ] && echo 1 || echo 0)
else
    WANTED="$HASH demo"
    SATISFIED=$({ [ "$INSTALLED" = "$WANTED" ] || [ "$INSTALLED" = "$HASH tests" ]; } && echo 1 || echo 0)
fi
# --no-compile: bytecode is cached in a step of its own, below. SCHED_MYPYC=0: the install
# itself is pure Python (setup.py); the hot path is compiled beside the sources below.
if [ "$SATISFIED" -eq 0 ] || [ ! -x "$VENV/bin/sched" ]; then
    rm -f "$STAMP"
    if [ "$FOR_TESTS" -eq 1 ]; then
        step "installing the project and its test tools into .venv (the first time takes ~20 s)"
        quiet env SCHED_MYPYC=0 "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile -e "$ROOT[test]"
    else
        step "installing the project into .venv (the first time takes ~10 s; later runs skip this)"
        quiet env SCHED_MYPYC=0 "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile -e "$ROOT"
    fi
    echo "$WANTED" >"$STAMP"
fi

# --- bytecode ----------------------------------------------------------------
# Python caches a module's bytecode when it first imports it, unless PYTHONDONTWRITEBYTECODE
# is set (as in many container images): then every process compiles every module it imports
# again, about 1 s at each start of sched, its workers and agents. So the installed packages
# are compiled here once per install, and the project's own modules on each run (only what
# changed since: a fraction of a second). compileall writes whatever that variable says; a
# file it cannot compile is left to Python, as before.
BYTECODE_STAMP="$VENV/.sched-bytecode-stamp"  # a copy of the install's stamp: what was compiled
if [ "$(cat "$BYTECODE_STAMP" 2>/dev/null || true)" != "$(cat "$STAMP")" ]; then
    step "caching the installed packages' bytecode (once per install, ~5 s)"
    PURELIB="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' || true)"
    [ -z "$PURELIB" ] || "$VENV/bin/python" -m compileall -q -j 0 "$PURELIB" >/dev/null 2>&1 || true
    cp "$STAMP" "$BYTECODE_STAMP"
fi
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/scheduler" "$ROOT/workers" >/dev/null 2>&1 || true

# --- the compiled hot path (scheduler/native.py): tests' setup only ------------
# Built beside its sources when they changed since the last build; without a compiler,
# headers or a build that works, one line says so and sched runs as pure Python.
if [ "$FOR_TESTS" -eq 1 ]; then
    has_headers() {
        "$VENV/bin/python" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' >/dev/null 2>&1
    }
    if ! command -v gcc >/dev/null 2>&1 && ! (ensure_apt_package gcc gcc "compiling the hot path"); then
        echo "setup: no C compiler: sched runs as pure Python"
    elif ! has_headers && ! (apt_install python3-dev "compiling the hot path needs the Python headers" && has_headers); then
        echo "setup: no Python headers for $("$VENV/bin/python" -V 2>&1): sched runs as pure Python"
    else
        "$VENV/bin/python" "$ROOT/scripts/build_native.py"
    fi
fi

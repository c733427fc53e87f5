#!/usr/bin/env bash
# Run the live demo cluster (on the embedded Redis) after installing what it needs (only
# that: what only the tests need is installed by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
bash scripts/setup.sh --demo
exec .venv/bin/sched demo "$@"

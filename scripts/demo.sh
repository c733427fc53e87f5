#!/usr/bin/env bash
# Run the live demo cluster (on the embedded Redis) after making sure setup is done.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
bash scripts/setup.sh
exec .venv/bin/sched demo "$@"

#!/usr/bin/env bash
# Run the test suite (pytest config lives in pyproject.toml) after setup.sh has installed
# everything the tests need (redis-server, redis-sentinel, chromium, the test extras).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
bash scripts/setup.sh
exec .venv/bin/pytest "$@"

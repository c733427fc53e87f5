#!/usr/bin/env bash
# Run the test suite (pytest config lives in pyproject.toml) after setup.sh has installed
# everything the tests need (redis-server, redis-sentinel, chromium, the test extras) and
# compiled the hot path (scheduler/native.py). The suite runs against the compiled modules;
# then the tests that exercise them run again as pure Python (SCHED_PURE=1), so both builds
# pass. With arguments, both runs take them as they are.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
bash scripts/setup.sh
# The tests of the compiled modules and of what drives them (placement, node cache, workers).
PURE_TESTS=(tests/test_native.py tests/test_fit_agreement.py tests/test_filters.py tests/test_scoring.py
            tests/test_node_table.py tests/test_node_cache.py tests/test_placement.py
            tests/test_placement_properties.py tests/test_one_task_jobs.py tests/test_pinned_first.py
            tests/test_preemption.py tests/test_verdicts.py tests/test_worker_steps.py tests/test_workers.py
            tests/test_gangs.py tests/test_bench.py)
build="$(.venv/bin/python -c 'from scheduler import native; print(native.STATE)')"
echo "test: the hot path runs ${build}"
status=0
.venv/bin/pytest "$@" || status=$?
if [ "$build" = compiled ]; then
    echo "test: again as pure Python (SCHED_PURE=1)"
    if [ "$#" -gt 0 ]; then
        SCHED_PURE=1 .venv/bin/pytest "$@" || status=$((status ? status : $?))
    else
        SCHED_PURE=1 .venv/bin/pytest "${PURE_TESTS[@]}" || status=$((status ? status : $?))
    fi
fi
exit "$status"

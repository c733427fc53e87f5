"""Shell completion of `sched` (click's own protocol, as bash calls it): job ids, node
names and task ids come from Redis; without a Redis, nothing is offered and nothing
fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.shell_completion import BashComplete

from scheduler.tools.cli import main

SCHED = str(Path(sys.executable).parent / "sched")


def complete_in_process(*words: str) -> list[str]:
    """What click offers for the last word of ``sched WORDS`` (as :func:`complete`, without a process)."""
    completion = BashComplete(main, {}, "sched", "_SCHED_COMPLETE")
    return [item.value for item in completion.get_completions(list(words[:-1]), words[-1])]


def complete(*words: str) -> list[str]:
    """What bash would be offered for the last word of ``sched WORDS``, by a real ``sched``."""
    line = ["sched", *words]
    env = dict(os.environ, _SCHED_COMPLETE="bash_complete", COMP_WORDS=" ".join(line), COMP_CWORD=str(len(line) - 1))
    done = subprocess.run([SCHED], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [item.partition(",")[2] for item in done.stdout.splitlines() if item]


def test_ids_are_completed_from_redis(sched, redis_url, namespace):
    sched("node", "add", "n1", "--cpu", "1", "--memory", "1GiB")
    sched("node", "add", "m2", "--cpu", "1", "--memory", "1GiB")
    sched("job", "submit", "-", input='{"id": "web", "replicas": 3}\n{"id": "api"}\n')
    at = ["--redis-url", redis_url, "-n", namespace]
    assert complete(*at, "task", "logs", "web.") == ["web.0", "web.1", "web.2"]  # as bash asks
    assert complete_in_process(*at, "job", "show", "") == ["api", "web"]
    assert complete_in_process(*at, "job", "scale", "w") == ["web"]
    assert complete_in_process(*at, "task", "explain", "a") == ["api.0"]
    assert complete_in_process(*at, "node", "drain", "") == ["m2", "n1"]
    assert complete_in_process(*at, "task", "ls", "--node", "n") == ["n1"]
    assert complete_in_process(*at, "events", "--job", "") == ["api", "web"]
    assert complete_in_process(*at, "-n", "elsewhere", "job", "show", "") == []  # another namespace's
    assert complete_in_process(*at, "node", "taint", "") == ["m2", "n1"]
    assert complete_in_process(*at, "node", "untaint", "m") == ["m2"]


def test_launch_and_dispatch_complete_only_the_jobs_they_take(sched, redis_url, namespace):
    sched("job", "submit", "-", input='{"id": "nightly", "type": "batch", "periodic": {"cron": "@daily"}}\n'
                                      '{"id": "render", "type": "batch", "parameterized": {}}\n{"id": "web"}\n')
    at = ["--redis-url", redis_url, "-n", namespace]
    assert complete_in_process(*at, "job", "launch", "") == ["nightly"]
    assert complete_in_process(*at, "job", "suspend", "") == ["nightly"]
    assert complete_in_process(*at, "job", "dispatch", "") == ["render"]
    assert complete_in_process(*at, "job", "show", "") == ["nightly", "render", "web"]


def test_without_a_redis_nothing_is_offered(tmp_path):
    assert complete_in_process("--redis-url", f"unix://{tmp_path}/none.sock", "job", "show", "") == []
    source = subprocess.run([SCHED], env=dict(os.environ, _SCHED_COMPLETE="bash_source"), capture_output=True,
                            text=True, timeout=30)
    assert "complete -o nosort -F _sched_completion sched" in source.stdout

"""What a task prints is kept (its last 64 KiB per stream) and shown by `sched task logs`."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from scheduler import Client
from scheduler.control.execution import execute, run_task
from scheduler.control.output import Output
from scheduler.tools.cli import main


def test_a_command_output_is_kept_tail_first():
    saved = []
    output = Output(saved.append, cap=16, flush_every_s=0)
    ok, message = execute({"command": ["sh", "-c", "printf 'hello world, this is long'; echo oops >&2; exit 3"]},
                          output)
    assert (ok, message) == (False, "exited with code 3: oops")
    last = saved[-1]
    assert last["stdout"] == "hello world, this is long"[-16:] and last["stdout_bytes"] == len("hello world, this is long")
    assert last["stderr"] == "oops\n" and last["exit_code"] == "3"


def test_a_function_result_and_traceback_are_kept():
    saved = []
    ok, _ = execute({"func": "builtins:print", "args": ["printed"]}, Output(saved.append, flush_every_s=0))
    assert ok and saved[-1]["stdout"] == "printed\n" and saved[-1]["result"] == "None"
    ok, message = execute({"func": "builtins:int", "args": ["x"]}, Output(saved.append, flush_every_s=0))
    assert not ok and "ValueError" in saved[-1]["traceback"] and "ValueError" in message


def test_task_logs_round_trip_through_a_task_run(app, redis_url, namespace):
    client = Client(app=app)
    client.add_node("n1", cpu=1, memory="1GiB")
    client.submit({"id": "hi", "type": "batch", "resources": {"cpu": 0.1, "memory": "1MiB"},
                   "run": {"command": ["sh", "-c", "echo hi; echo warn >&2"]}})
    client.run_workers(until_idle=True)
    # What the node's agent does for each task it runs (RQ calls run_task).
    assert run_task(redis_url, namespace, "n1", "hi.0")["succeeded"]
    logs = client.logs("hi.0")
    assert (logs["state"], logs["stdout"], logs["stderr"], logs["exit_code"]) == ("completed", "hi\n", "warn\n", 0)
    assert list(client.follow_logs("hi.0")) == [("stdout", "hi\n"), ("stderr", "warn\n")]
    runner = CliRunner()
    done = runner.invoke(main, ["--redis-url", redis_url, "-n", namespace, "task", "logs", "hi.0"])
    assert done.exit_code == 0 and done.stdout == "hi\n" and done.stderr == "warn\n"
    as_json = runner.invoke(main, ["--redis-url", redis_url, "-n", namespace, "task", "logs", "hi.0", "--json"])
    assert orjson.loads(as_json.stdout)["stdout"] == "hi\n"
    missing = runner.invoke(main, ["--redis-url", redis_url, "-n", namespace, "task", "logs", "nope.0"])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr

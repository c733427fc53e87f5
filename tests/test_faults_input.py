"""Correct under faults and hostile input: passwords in Redis URLs are never printed,
hostile namespaces, job ids and node names are one sentence (and nothing is written),
and the small things a user hit: plan of an unchanged job, a finished batch job's
status, drain's report, already-paused nodes and the bench's help."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from scheduler import Client
from scheduler.model import SpecError
from scheduler.state.connection import mask_url
from scheduler.state.keys import Keys
from scheduler.state.jobs import parse_stored
from scheduler.tools.cli import main

from commits import commit_one
from redis_topologies import free_port

SECRET = "s3cretPW"
SCHED = str(Path(sys.executable).with_name("sched"))


# ----------------------------------------------------------------------------- mask_url
@pytest.mark.parametrize("url, masked", [
    ("redis://user:s3cretPW@127.0.0.1:6379/0", "redis://user:***@127.0.0.1:6379/0"),
    ("redis://:s3cretPW@host", "redis://:***@host"),
    ("rediss://user:s3cretPW@host:6380/1?ssl_cert_reqs=none", "rediss://user:***@host:6380/1?ssl_cert_reqs=none"),
    ("redis://user@host:6379/0", "redis://user@host:6379/0"),
    ("redis://host:6379", "redis://host:6379"),
    ("redis://:@host", "redis://:@host"),
    ("unix:///run/redis.sock?db=0", "unix:///run/redis.sock?db=0"),
    ("unix:///run/redis.sock?db=0&password=s3cretPW", "unix:///run/redis.sock?db=0&password=***"),
    ("unix://:s3cretPW@/run/redis.sock", "unix://:***@/run/redis.sock"),
    ("redis://host/0?password=s3cretPW&db=1", "redis://host/0?password=***&db=1"),
    ("redis+sentinel://:s3cretPW@h1:26379,h2:26379/mymaster", "redis+sentinel://:***@h1:26379,h2:26379/mymaster"),
    ("redis://u:s3c@ret/PW@host:1/0", "redis://u:***@host:1/0"),  # "@" and "/" in an unencoded password
    ("redis://u:s3cret%40PW@host", "redis://u:***@host"),
    ("", ""),
])
def test_mask_url(url, masked):
    assert mask_url(url) == masked


# ----------------------------------------------------------------------------- secrets in errors
@pytest.fixture(scope="module")
def password_server(tmp_path_factory):
    """A redis-server on a free TCP port that wants the password 'rightpw'."""
    directory = tmp_path_factory.mktemp("pw-redis")
    port = free_port()
    process = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                "--requirepass", "rightpw", "--save", "", "--appendonly", "no",
                                "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = redis.Redis(port=port, password="rightpw")
    for _ in range(500):
        try:
            probe.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    yield port
    process.terminate()
    process.wait(timeout=10)


EVERY_COMMAND = {
    "node add": ["node", "add", "n1", "--cpu", "1", "--memory", "1Gi"],
    "node ls": ["node", "ls"],
    "node drain": ["node", "drain", "n1"],
    "node pause": ["node", "pause", "n1"],
    "node activate": ["node", "activate", "n1"],
    "node rm": ["node", "rm", "n1"],
    "job submit": ["job", "submit", "-"],
    "job ls": ["job", "ls", "--json"],
    "job show": ["job", "show", "web"],
    "job scale": ["job", "scale", "web", "2"],
    "job stop": ["job", "stop", "web"],
    "job plan": ["job", "plan", "-"],
    "task ls": ["task", "ls"],
    "task explain": ["task", "explain", "web.0"],
    "queue ls": ["queue", "ls"],
    "events": ["events", "--count", "1"],
    "events since": ["events", "--since", "start", "--count", "1"],
    "events group": ["events", "--group", "g", "--consumer", "c", "--count", "1"],
    "events keep": ["events", "keep", "1000"],
    "events info": ["events", "info"],
    "worker": ["worker", "--until-idle"],
    "agent": ["agent", "n1", "--cpu", "1", "--memory", "1Gi"],
    "bench": ["bench", "--nodes", "2", "--jobs", "1", "--replicas", "1", "--workers", "1", "--json"],
    "demo": ["demo", "--seconds", "1"],
}
SPEC = "id: web\nreplicas: 1\n"


def assert_one_sentence_without_secret(code: int, stdout: str, stderr: str, port: int) -> None:
    output = stdout + stderr
    assert code == 1, output
    assert SECRET not in output and "Traceback" not in output, output
    assert stderr.startswith(f"Error: cannot reach Redis at redis://user:***@127.0.0.1:{port}/0: "), output
    assert stderr.count("\n") == 1 and stdout == "", output


@pytest.mark.parametrize("args", list(EVERY_COMMAND.values()), ids=list(EVERY_COMMAND))
def test_wrong_password_is_not_printed(password_server, args):
    url = f"redis://user:{SECRET}@127.0.0.1:{password_server}/0"
    result = CliRunner().invoke(main, ["--redis-url", url, "-n", "secrets", *args], input=SPEC)
    assert isinstance(result.exception, SystemExit), result.exception  # not an uncaught exception
    assert_one_sentence_without_secret(result.exit_code, result.stdout, result.stderr, password_server)
    assert "invalid username-password pair" in result.stderr or "WRONGPASS" in result.stderr


LONG_RUNNING = ("worker", "agent")  # they wait for Redis instead of giving up


def test_unreachable_server_password_is_not_printed():
    """Every one-shot command as a real process (where a traceback would show) against a
    port where nothing listens; run side by side, as each retries for a few seconds before
    it gives up."""
    port = free_port()
    url = f"redis://user:{SECRET}@127.0.0.1:{port}/0"
    pending = [(name, args) for name, args in EVERY_COMMAND.items() if name not in LONG_RUNNING]
    while pending:
        batch, pending = pending[:7], pending[7:]
        running = [(name, subprocess.Popen([SCHED, "--redis-url", url, "-n", "secrets", *args],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)) for name, args in batch]
        for name, process in running:
            stdout, stderr = process.communicate(SPEC, timeout=120)
            assert_one_sentence_without_secret(process.returncode, stdout, stderr, port)


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_processes_wait_without_printing_the_password(name, tmp_path):
    """A worker or agent pointed at a server that is not there waits for it, saying so with
    the URL masked; stopped while waiting, it has printed no password and no traceback."""
    port = free_port()
    url = f"redis://user:{SECRET}@127.0.0.1:{port}/0"
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen([SCHED, "--redis-url", url, "-n", "secrets", *EVERY_COMMAND[name]],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            waiting = f"waiting for Redis at redis://user:***@127.0.0.1:{port}/0"
            for _ in range(600):
                if waiting in log.read_text() or process.poll() is not None:
                    break
                time.sleep(0.05)
            assert process.poll() is None, log.read_text()  # still waiting, not exited
        finally:
            process.terminate()
            stdout, _ = process.communicate(timeout=30)
    output = stdout + log.read_text()
    assert waiting in output and SECRET not in output and "Traceback" not in output, output


def test_redis_errors_name_no_password(password_server):
    """What redis-py itself says on a wrong password or a closed port holds no password."""
    for port in (password_server, free_port()):
        client = redis.Redis.from_url(f"redis://user:{SECRET}@127.0.0.1:{port}/0")
        with pytest.raises(redis.RedisError) as caught:
            client.ping()
        assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_invalid_url_is_one_sentence_without_the_password():
    result = CliRunner().invoke(main, ["--redis-url", f"http://user:{SECRET}@host/0", "node", "ls"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert SECRET not in result.stderr and result.stderr.startswith("Error: the Redis URL http://user:***@host/0")


def test_demo_banner_masks_the_url(password_server, tmp_path):
    """The demo against a server with a password: the banner shows the URL masked, and the
    agents it starts get the URL in their environment, not on their command line."""
    from rich.console import Console

    from scheduler.state.app import App
    from scheduler.tools import demo

    url = f"redis://:rightpw@127.0.0.1:{password_server}/0"
    app = App(redis_url=url, namespace="demo-secrets")
    assert "rightpw" not in " ".join(demo._sched(app, "agent", "n1"))
    console = Console(file=(out := tmp_path / "demo.txt").open("w"), width=200)
    assert demo.run_demo(app, 1, console) == 0
    console.file.close()
    text = out.read_text()
    assert f"redis redis://:***@127.0.0.1:{password_server}/0" in text and "rightpw" not in text
    app.store.clear_namespace()
    app.close()


# ----------------------------------------------------------------------------- hostile names
HOSTILE_NAMESPACES = ["a{b", "x:y", "a b", "a\nb", "web\n", "", "*", "a]b"]


@pytest.mark.parametrize("namespace", HOSTILE_NAMESPACES)
def test_hostile_namespace_is_one_sentence(redis_url, namespace):
    before = redis.Redis.from_url(redis_url).dbsize()
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "-n", namespace, "node", "add", "n1",
                                       "--cpu", "1", "--memory", "1Gi"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith("Error: namespace ") and result.stderr.count("\n") == 1
    with pytest.raises(SpecError):
        Client(redis_url, namespace=namespace)
    with pytest.raises(SpecError):
        Keys(namespace)
    assert redis.Redis.from_url(redis_url).dbsize() == before


def test_hostile_namespace_from_the_environment(redis_url):
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "queue", "ls"], env={"SCHED_NAMESPACE": "a{b"})
    assert result.exit_code == 2 and result.stderr.startswith("Error: namespace 'a{b' is not valid")


@pytest.mark.parametrize("job_id", ["web\n", "web\r", "we b", "web\x00", "-web", "w{b}"])
def test_hostile_job_ids_are_refused(redis_url, namespace, app, job_id):
    spec = json.dumps({"id": job_id, "replicas": 1})
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "-n", namespace, "job", "submit", "-"],
                                input=spec)
    assert result.exit_code == 2 and result.stderr.startswith("Error: job id ")
    with pytest.raises(SpecError):
        Client(redis_url, namespace).submit({"id": job_id, "replicas": 1})
    for args in (["job", "show", job_id], ["job", "scale", job_id, "2"], ["job", "stop", job_id]):
        result = CliRunner().invoke(main, ["--redis-url", redis_url, "-n", namespace, *args])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert list(app.client.scan_iter(match=f"sched:{{{namespace}}}:*")) == []


@pytest.mark.parametrize("name", ["n1\n", "n 1", "n1\r\n", ""])
def test_hostile_node_names_are_refused(redis_url, namespace, app, name):
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "-n", namespace, "node", "add", name,
                                       "--cpu", "1", "--memory", "1Gi"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: node name ")
    with pytest.raises(SpecError):
        Client(redis_url, namespace).add_node(name, cpu=1, memory="1Gi")
    assert list(app.client.scan_iter(match=f"sched:{{{namespace}}}:*")) == []


def test_parse_stored_reads_the_decoded_id():
    normal = parse_stored('{"id":"web","replicas":2}')
    assert normal.id == "web" and normal.raw["id"] == "web"
    with pytest.raises(SpecError, match="job id"):
        parse_stored('{"id":"web\\n","replicas":2}')  # the JSON text of "web\n"
    with pytest.raises(SpecError, match="job id"):
        parse_stored('{"id":"w\\"e","replicas":2}')


# ----------------------------------------------------------------------------- small things
WEB = "id: web\nreplicas: 2\nresources: {cpu: 1, memory: 1GiB}\n"


def live(app, task_id, node):
    """Make a pending task (of a job asking for 1 cpu and 1 GiB) live on a node."""
    claim = app.queue.claim(10_000)
    job = app.client.hget(app.keys.task(task_id), "job")
    assert commit_one(app, claim.token, task_id, node, job, {"cpu": 1000, "memory": 2**30}) == 1
    app.queue.release(claim.token, [t for t in claim.task_ids if t != task_id])


def test_plan_of_the_running_spec_changes_nothing(sched, app):
    sched("node", "add", "n1", "--cpu", "2", "--memory", "2GiB")
    sched("job", "submit", "-", input=WEB)
    for i in range(2):
        live(app, f"web.{i}", "n1")  # the node is now full
    plan = json.loads(sched("job", "plan", "-", "--json", input=WEB).stdout)
    assert plan == {"job": "web", "placements": [], "preemptions": [], "pending": [], "unchanged": True,
                    "changes": plan["changes"]}
    assert plan["changes"]["action"] == "none" and plan["changes"]["fields"] == []
    assert "nothing changes" in sched("job", "plan", "-", input=WEB).stdout
    # Only replicas differ: only the added task is planned (and it does not fit).
    plan = json.loads(sched("job", "plan", "-", "--json", input=WEB.replace("replicas: 2", "replicas: 3")).stdout)
    assert plan["unchanged"] is False and plan["placements"] == [] and len(plan["pending"]) == 1
    sched("node", "add", "n2", "--cpu", "2", "--memory", "2GiB")
    plan = json.loads(sched("job", "plan", "-", "--json", input=WEB.replace("replicas: 2", "replicas: 3")).stdout)
    assert [p["node"] for p in plan["placements"]] == ["n2"] and plan["pending"] == []
    plan = json.loads(sched("job", "plan", "-", "--json", input=WEB.replace("replicas: 2", "replicas: 1")).stdout)
    assert plan["placements"] == [] and plan["stopping"] == 1
    assert plan["changes"]["action"] == "scale" and plan["changes"]["stop"] == ["web.1"]
    # Another change is a new version: every task is planned.
    plan = json.loads(sched("job", "plan", "-", "--json", input=WEB.replace("cpu: 1", "cpu: 0.5")).stdout)
    assert len(plan["placements"]) + len(plan["pending"]) == 2 and plan["unchanged"] is False


def test_finished_batch_job_is_complete(sched, app):
    from scheduler.control import reconcile

    sched("node", "add", "n1", "--cpu", "4", "--memory", "4GiB")
    sched("job", "submit", "-", input="id: crunch\ntype: batch\nreplicas: 2\nresources: {cpu: 1, memory: 1GiB}\n")
    for i in range(2):
        live(app, f"crunch.{i}", "n1")
    assert json.loads(sched("job", "ls", "--json").stdout)[0]["status"] == "running"
    reconcile.task_ended(app.store, app.store.get_task("crunch.0"), True, "done")
    assert json.loads(sched("job", "show", "crunch", "--json").stdout)["status"] == "running"
    reconcile.task_ended(app.store, app.store.get_task("crunch.1"), True, "done")
    assert json.loads(sched("job", "ls", "--json").stdout)[0]["status"] == "complete"
    assert json.loads(sched("job", "show", "crunch", "--json").stdout)["status"] == "complete"
    assert sched("job", "show", "crunch").stdout.startswith("status: complete\n")
    sched("job", "scale", "crunch", "3")  # more work: running again
    assert json.loads(sched("job", "ls", "--json").stdout)[0]["status"] == "running"


def test_drain_reports_stopped_and_queued(sched, app):
    sched("node", "add", "n1", "--cpu", "4", "--memory", "4GiB")
    sched("job", "submit", "-", input=WEB)
    for i in range(2):
        live(app, f"web.{i}", "n1")
    result = sched("node", "drain", "n1")
    assert result.stdout == "node n1 drained: 2 task(s) stopped; 2 replacement(s) queued\n"
    assert {t.state for t in Client(app=app).tasks(job="web") if t.id in ("web.2", "web.3")} == {"pending"}
    assert sched("node", "drain", "n1").stdout == "node n1 is already drained\n"


def test_already_in_that_state(sched):
    sched("node", "add", "n1", "--cpu", "1", "--memory", "1GiB")
    assert sched("node", "activate", "n1").stdout == "node n1 is already active\n"
    assert sched("node", "pause", "n1").stdout == "node n1: active -> pause\n"
    assert sched("node", "pause", "n1").stdout == "node n1 is already paused\n"
    assert sched("node", "activate", "n1").stdout == "node n1: pause -> active\n"


def test_bench_help_names_the_group_option():
    text = CliRunner().invoke(main, ["bench", "--help"]).stdout
    assert "sched -n NS bench" in text and "unless --namespace" not in text

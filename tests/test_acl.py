"""Per-namespace Redis ACL users (``sched acl``), against a real redis-server that
requires a password: each role's commands work under the role's user, anything outside
its namespace or its role is refused by Redis itself and said in one sentence, and only
the admin may run FLUSHALL, CONFIG or SCRIPT FLUSH. The same on a Redis Cluster (slow)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid

import pytest
import redis
from click.testing import CliRunner

from scheduler.state.app import App
from scheduler.state.embedded import start_server
from scheduler.state.keys import Keys
from scheduler.state.scripts import script_source
from scheduler.tools.cli import main

from redis_topologies import plain_client
from test_agents import Cluster

ADMIN_PASSWORD = "admin-Pa55"
ROLES = ("viewer", "submitter", "worker", "agent")
SENTENCE = re.compile(r"^Error: [^\n]*\.\n$")  # one line, one sentence


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A redis-server of this module's own (ACL users are the server's, not a
    namespace's), requiring a password: (admin URL, socket path)."""
    directory = tmp_path_factory.mktemp("acl-redis")
    socket = directory / "redis.sock"
    process = start_server(directory, socket, daemonize=False)
    redis.Redis(unix_socket_path=str(socket)).config_set("requirepass", ADMIN_PASSWORD)
    yield f"unix://:{ADMIN_PASSWORD}@{socket}", socket
    process.terminate()
    process.wait(timeout=10)


def sched(url: str, *args, input=None):
    return CliRunner().invoke(main, ["--redis-url", url, *map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def refused(result, *words: str):
    """One sentence on stderr naming ``words``, exit 2, nothing on stdout."""
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert SENTENCE.match(result.stderr), result.stderr
    assert "NOPERM" in result.stderr and "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


def create(admin: str, name: str, namespace: str, role: str) -> str:
    result = ok(sched(admin, "acl", "create", name, "--namespace", namespace, "--role", role, "--json"))
    return json.loads(result.stdout)["url"]


@pytest.fixture
def names():
    """Two fresh namespaces and a fresh user name prefix."""
    tag = uuid.uuid4().hex[:8]
    return f"a{tag}", f"b{tag}", f"u{tag}"


@pytest.fixture
def users(server, names):
    """One user per role in namespace a: role -> URL. Removed afterwards."""
    admin, _ = server
    a, _, prefix = names
    made = {role: create(admin, f"{prefix}-{role}", a, role) for role in ROLES}
    yield made
    for role in ROLES:
        sched(admin, "acl", "rm", f"{prefix}-{role}")


WEB = "id: web\nreplicas: 2\nresources: {cpu: 0.5, memory: 64Mi}\n"


# ----------------------------------------------------------------------------- sched acl
def test_create_prints_the_url_once_and_keeps_only_a_hash(server, names):
    admin, socket = server
    a, _, prefix = names
    result = ok(sched(admin, "acl", "create", f"{prefix}-s", "--namespace", a, "--role", "submitter"))
    url = result.stdout.splitlines()[-1]
    match = re.fullmatch(rf"unix://{prefix}-s:([A-Za-z0-9_-]{{43}})@{socket}", url)
    assert match, result.stdout
    password = match.group(1)
    listed = ok(sched(admin, "acl", "ls", "--json"))
    assert {"name": f"{prefix}-s", "namespace": a, "role": "submitter", "active": True}.items() \
        <= next(r for r in json.loads(listed.stdout) if r["name"] == f"{prefix}-s").items()
    admin_client = App(redis_url=admin).client
    everything = " ".join(f"{k} {admin_client.dump(k)!r}" for k in admin_client.scan_iter(count=1000))
    assert password not in everything and password not in listed.stdout
    assert ok(sched(url, "-n", a, "job", "ls")).stdout.startswith("ID")

    ok(sched(admin, "acl", "rm", f"{prefix}-s"))
    gone = sched(url, "-n", a, "job", "ls")
    assert gone.exit_code == 1 and "invalid username-password pair" in gone.stderr
    assert password not in gone.stderr


def test_bad_input_is_one_sentence_and_changes_nothing(server, names):
    admin, _ = server
    a, _, prefix = names
    users_before = App(redis_url=admin).client.execute_command("ACL", "USERS")
    for args in (["create", "default", "--namespace", a, "--role", "viewer"],
                 ["create", "bad name", "--namespace", a, "--role", "viewer"],
                 ["create", f"{prefix}-x", "--namespace", "no{pe}", "--role", "viewer"],
                 ["create", f"{prefix}-x", "--namespace", a, "--role", "admin"],
                 ["rm", f"{prefix}-never-made"]):
        result = sched(admin, "acl", *args)
        assert result.exit_code == 2 and SENTENCE.match(result.stderr), (args, result.stderr)
    assert App(redis_url=admin).client.execute_command("ACL", "USERS") == users_before


def test_sync_sets_users_again_after_the_server_lost_them(server, names, users):
    admin, _ = server
    a, _, prefix = names
    client = App(redis_url=admin).client
    client.execute_command("ACL", "DELUSER", f"{prefix}-viewer")  # as a restart without an ACL file would
    assert sched(users["viewer"], "-n", a, "job", "ls").exit_code == 1
    ok(sched(admin, "acl", "sync"))
    ok(sched(users["viewer"], "-n", a, "job", "ls"))


# ----------------------------------------------------------------------------- the roles
def test_a_submitter_works_in_its_namespace_and_is_refused_the_other(server, names, users):
    admin, _ = server
    a, b, prefix = names
    ok(sched(admin, "-n", b, "job", "submit", "-", input="id: theirs\n"))
    before = sorted(App(redis_url=admin).client.scan_iter(match=f"sched:{{{b}}}:*"))

    url = users["submitter"]
    assert ok(sched(url, "-n", a, "job", "submit", "-", input=WEB)).stdout == "web\n"
    assert [r["id"] for r in json.loads(ok(sched(url, "-n", a, "job", "ls", "--json")).stdout)] == ["web"]
    ok(sched(url, "-n", a, "job", "scale", "web", "3"))
    ok(sched(url, "-n", a, "task", "ls"))
    ok(sched(url, "-n", a, "job", "stop", "web"))

    for args in (["job", "ls"], ["job", "show", "theirs"], ["task", "ls"], ["node", "ls"], ["queue", "ls"],
                 ["job", "submit", "-"], ["job", "scale", "theirs", "2"], ["job", "stop", "theirs"]):
        sentence = refused(sched(url, "-n", b, *args, input=WEB), f"Redis user {prefix}-submitter",
                           f"a submitter of namespace {a}", f"namespace {b}", f"sched {' '.join(args[:2])}")
        assert "use credentials for" in sentence
    assert sorted(App(redis_url=admin).client.scan_iter(match=f"sched:{{{b}}}:*")) == before


def test_a_viewer_reads_and_writes_nothing(server, names, users):
    admin, _ = server
    a, _, prefix = names
    ok(sched(admin, "-n", a, "node", "add", "n1", "--cpu", "4", "--memory", "8Gi"))
    ok(sched(admin, "-n", a, "job", "submit", "-", input=WEB))
    url = users["viewer"]
    for args in (["node", "ls"], ["job", "ls"], ["job", "show", "web"], ["task", "ls"], ["task", "explain", "web.0"],
                 ["task", "logs", "web.0"], ["queue", "ls"], ["tenant", "ls"], ["audit"]):
        ok(sched(url, "-n", a, *args))
    for args in (["job", "submit", "-"], ["job", "scale", "web", "3"], ["job", "stop", "web"],
                 ["node", "drain", "n1"], ["quota", "set", a, "--cpu", "1"]):
        refused(sched(url, "-n", a, *args, input=WEB), f"a viewer of namespace {a}", "a viewer only reads",
                f"sched {' '.join(args[:2])}")
    assert json.loads(ok(sched(admin, "-n", a, "job", "show", "web", "--json")).stdout)["spec"]["replicas"] == 2


def test_only_the_admin_sets_quotas_and_tenant_weights(server, names, users):
    a = names[0]
    for role in ("submitter", "worker", "agent"):
        for args in (["quota", "set", a, "--cpu", "100"], ["tenant", "set", "team", "--weight", "5"]):
            refused(sched(users[role], "-n", a, *args), f"{role} of namespace {a}", "quotas or tenant weights")
    ok(sched(server[0], "quota", "set", a, "--cpu", "100"))


def test_a_worker_schedules_its_namespace_only(server, names, users):
    admin, _ = server
    a, b, prefix = names
    for ns in (a, b):
        ok(sched(admin, "-n", ns, "node", "add", "n1", "--cpu", "4", "--memory", "8Gi"))
        ok(sched(admin, "-n", ns, "job", "submit", "-", input=WEB))
    ok(sched(users["worker"], "-n", a, "worker", "--until-idle"))
    refused(sched(users["worker"], "-n", b, "worker", "--until-idle"), f"a worker of namespace {a}",
            f"namespace {b}", "sched worker")
    refused(sched(users["worker"], "-n", b, "worker", "--until-idle", "--concurrency", "2"), f"namespace {b}")
    states = {ns: [t["state"] for t in json.loads(ok(sched(admin, "-n", ns, "task", "ls", "--json")).stdout)]
              for ns in (a, b)}
    assert states == {a: ["assigned", "assigned"], b: ["pending", "pending"]}


def refusals(admin: str, user: str) -> list[str]:
    """What Redis refused ``user`` (its ACL LOG entries: the command, key or channel)."""
    client = App(redis_url=admin).client
    return [f"{e['reason']} {e['object']}" for e in client.execute_command("ACL", "LOG") if e["username"] == user]


def stored(admin: str, namespace: str) -> dict:
    """Every key of the namespace and its value (DUMP), heartbeats left out (they expire)."""
    client = redis.Redis.from_url(admin)
    return {key: client.dump(key) for key in client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000)
            if not key.endswith(b":heartbeat")}


AGENT_JOBS = [
    "id: once\ntype: batch\nresources: {cpu: 0.1}\nrun: {command: [sh, -c, 'echo hi']}\n",
    # Fails, is retried (replace.lua), fails for good (finish.lua); each failure counted.
    "id: flaky\ntype: batch\nmax_retries: 1\nrestart_delay: 0\nresources: {cpu: 0.1}\n"
    "run: {command: [sh, -c, 'exit 3']}\n",
    # Ends at once and is replaced, again and again (replace.lua moves the job's next_index).
    "id: again\nrestart_delay: 0.2\nresources: {cpu: 0.1}\nrun: {command: [sh, -c, 'sleep 0.2']}\n",
    # Checked on a port nothing listens on: unhealthy (task_health.lua), then replaced.
    "id: sick\nrestart_delay: 0.2\nresources: {cpu: 0.1}\nrun: {command: [sh, -c, 'sleep 60']}\n"
    "health: {tcp: {port: 9}, interval: 0.1, timeout: 0.5, failures: 2, grace: 0}\n",
]


def test_an_agent_runs_tasks_and_reaches_no_other_namespace(server, names, users, tmp_path):
    """Under the agent's role (and a worker's), an agent registers, heartbeats, runs,
    retries, restarts and health-checks tasks, and Redis refuses it nothing."""
    admin, _ = server
    a, b, prefix = names
    admin_app = App(redis_url=admin, namespace=a)
    (tmp_path / "worker").mkdir()
    agents = Cluster(admin_app, users["agent"], a, tmp_path)
    workers = Cluster(admin_app, users["worker"], a, tmp_path / "worker")
    store = admin_app.store
    try:
        agents.agent("n1", cpu="4", slots=4)
        workers.worker()
        for spec in AGENT_JOBS:
            ok(sched(admin, "-n", a, "job", "submit", "-", input=spec))
        agents.wait(lambda: store.get_task("once.0").state == "completed", "the agent to run once.0")
        assert store.task_output("once.0")["stdout"] == "hi\n"
        agents.wait(lambda: [t.state for t in store.tasks(store.job_task_ids("flaky"))] == ["failed", "failed"],
                    "flaky to fail twice")
        assert len(store.client.zrange(admin_app.keys.faults("flaky"), 0, -1)) == 2
        agents.wait(lambda: len(store.job_task_ids("again")) >= 3, "again to be replaced twice")
        agents.wait(lambda: any(t.health == "unhealthy" for t in store.tasks(store.job_task_ids("sick"))) and
                    len(store.job_task_ids("sick")) >= 2, "sick to turn unhealthy and be replaced")
        again = store.job_fields("again")
        assert int(again["next_index"]) == len(store.job_task_ids("again"))
        assert int(again["updated"]) >= max(int(store.client.hget(admin_app.keys.task(t), "created"))
                                            for t in store.job_task_ids("again"))
        refused(sched(users["agent"], "-n", b, "node", "ls"), f"an agent of namespace {a}", f"namespace {b}")
        assert refusals(admin, f"{prefix}-agent") == [f"key sched:{{{b}}}:nodes"]
        assert refusals(admin, f"{prefix}-worker") == []
    finally:
        workers.close()
        agents.close()
        admin_app.close()


def test_an_agent_cannot_submit_scale_or_stop(server, names, users):
    """Neither through sched (one sentence, nothing written) nor with Redis commands or
    Lua of its own can an agent create a job or change one."""
    admin, _ = server
    a, _, prefix = names
    ok(sched(admin, "-n", a, "job", "submit", "-", input=WEB))
    before = stored(admin, a)
    agent = users["agent"]
    bulk = '{"id": "b1", "replicas": 1}\n{"id": "b2", "replicas": 1}\n'
    for args, spec in ((["job", "submit", "-"], "id: new\n"), (["job", "submit", "-"], bulk),
                       (["job", "submit", "-"], "id: big\nreplicas: 501\n"), (["job", "submit", "-"], WEB),
                       (["job", "submit", "-"], WEB.replace("replicas: 2", "replicas: 3")),
                       (["job", "submit", "-"], WEB.replace("64Mi", "128Mi")), (["job", "scale", "web", "3"], None),
                       (["job", "scale", "web", "1"], None), (["job", "stop", "web"], None)):
        refused(sched(agent, "-n", a, *args, input=spec), f"Redis user {prefix}-agent, an agent of namespace {a}",
                "may not submit, scale or stop jobs", f"sched {' '.join(args[:2])}")
    keys = Keys(a)
    user = redis.Redis.from_url(agent)
    enqueue = hashlib.sha1(script_source("enqueue").encode()).hexdigest()
    for command in (["HSET", keys.job("forged"), "spec", '{"id":"forged"}'], ["HSET", keys.job("web"), "replicas", 9],
                    ["HSETNX", keys.job("web"), "spec:2", "{}"], ["DEL", keys.job("web")], ["SADD", keys.jobs, "forged"],
                    ["HSET", keys.job_shares, "forged", "|1|"], ["RPUSH", keys.job_history("web"), "{}"],
                    ["EVAL", "return 1", 0], ["EVALSHA", enqueue, 1, keys.job("forged")],
                    ["FCALL", "anything", 0], ["SREM", "sched:namespaces", a], ["DEL", "sched:namespaces"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*command)
    assert stored(admin, a) == before


@pytest.mark.parametrize("role", ROLES)
def test_nobody_but_the_admin_flushes_configures_or_flushes_scripts(server, users, role):
    user = redis.Redis.from_url(users[role])
    for command in (["FLUSHALL"], ["FLUSHDB"], ["CONFIG", "GET", "maxmemory"], ["CONFIG", "SET", "maxmemory", "1"],
                    ["SCRIPT", "FLUSH"], ["KEYS", "*"], ["SCAN", "0"], ["ACL", "SETUSER", "x", "on", "+@all"],
                    ["ACL", "LIST"], ["CLIENT", "LIST"], ["MONITOR"], ["SHUTDOWN"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*command)
    assert App(redis_url=server[0]).client.execute_command("CONFIG", "GET", "maxmemory")


# ----------------------------------------------------------------------------- Redis Cluster
@pytest.mark.slow
def test_on_a_cluster_users_are_on_every_node_and_confined(redis_cluster, names):
    admin = redis_cluster.url
    a, b, prefix = names
    submitter = create(admin, f"{prefix}-s", a, "submitter")
    worker = create(admin, f"{prefix}-w", a, "worker")
    try:
        for port in redis_cluster.live_ports():
            node = plain_client(port)
            assert {f"{prefix}-s", f"{prefix}-w"} <= set(node.execute_command("ACL", "USERS")), port
        listed = {r["name"]: r for r in json.loads(ok(sched(admin, "acl", "ls", "--json")).stdout)}
        assert (listed[f"{prefix}-w"]["role"], listed[f"{prefix}-w"]["active"]) == ("worker", True)
        for ns in (a, b):
            ok(sched(admin, "-n", ns, "node", "add", "n1", "--cpu", "4", "--memory", "8Gi"))
        ok(sched(admin, "-n", b, "job", "submit", "-", input="id: theirs\n"))
        ok(sched(submitter, "-n", a, "job", "submit", "-", input=WEB))
        assert [r["id"] for r in json.loads(ok(sched(submitter, "-n", a, "job", "ls", "--json")).stdout)] == ["web"]
        refused(sched(submitter, "-n", b, "job", "ls"), f"namespace {b}")
        refused(sched(submitter, "-n", b, "job", "stop", "theirs"), f"namespace {b}")
        ok(sched(worker, "-n", a, "worker", "--until-idle"))
        refused(sched(worker, "-n", b, "worker", "--until-idle"), f"namespace {b}")
        viewer = create(admin, f"{prefix}-v", a, "viewer")
        ok(sched(viewer, "-n", a, "task", "ls"))
        refused(sched(viewer, "-n", a, "job", "stop", "web"), "a viewer only reads")
        assert [t["state"] for t in json.loads(ok(sched(admin, "-n", a, "task", "ls", "--json")).stdout)] \
            == ["assigned", "assigned"]
        for url in (submitter, worker):
            for port in redis_cluster.live_ports():
                user = redis.Redis(host="127.0.0.1", port=port, username=url.split("//")[1].split(":")[0],
                                   password=url.split(":")[2].split("@")[0])
                for command in (["FLUSHALL"], ["CONFIG", "GET", "maxmemory"], ["SCRIPT", "FLUSH"]):
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        user.execute_command(*command)
    finally:
        for name in (f"{prefix}-s", f"{prefix}-w", f"{prefix}-v"):
            sched(admin, "acl", "rm", name)
    for port in redis_cluster.live_ports():
        assert f"{prefix}-s" not in plain_client(port).execute_command("ACL", "USERS")


@pytest.mark.slow
def test_under_sentinel_users_are_on_the_master_and_its_replica(redis_sentinel, names):
    """ACL is per server: the replica a failover would promote has the user too."""
    admin = redis_sentinel.url
    a, b, prefix = names
    url = create(admin, f"{prefix}-s", a, "submitter")
    try:
        for port, server in redis_sentinel.servers.items():
            assert f"{prefix}-s" in server.client().execute_command("ACL", "USERS"), port
        assert "sentinel_password=" in url  # the sentinels' own password, which they need to be asked
        ok(sched(url, "-n", a, "job", "submit", "-", input=WEB))
        refused(sched(url, "-n", b, "job", "ls"), f"namespace {b}")
    finally:
        sched(admin, "acl", "rm", f"{prefix}-s")
    for server in redis_sentinel.servers.values():
        assert f"{prefix}-s" not in server.client().execute_command("ACL", "USERS")

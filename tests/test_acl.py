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

from scheduler.state.acl import record_key, rules, scripts_digest, set_user
from scheduler.state.app import App
from scheduler.state.embedded import start_server
from scheduler.state.keys import Keys
from scheduler.state.scripts import script_source
from scheduler.tools.cli import main

from redis_topologies import plain_client
from agent_cluster import Cluster

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


def test_sync_sets_todays_rules_on_users_set_by_another_version(server, names, users):
    """Rules name sched's scripts by SHA1: a user set up by another version of sched is
    refused them with a sentence that says to sync, and sync sets today's rules (and takes
    back what older rules gave, such as an agent's writes to a job's hash)."""
    admin, _ = server
    a, _, prefix = names
    client = App(redis_url=admin).client
    for role in ("submitter", "agent"):
        name = f"{prefix}-{role}"
        digest = client.hget(record_key(name), "password_sha256")
        other = [re.sub(r"evalsha\|[0-9a-f]{40}", "evalsha|" + "0" * 40, rule) for rule in rules(name, a, role, digest)]
        set_user(client, name, [*other, f"~sched:{{{a}}}:*", "+hset"])
        client.hset(record_key(name), "scripts", "another")
    forged = ["HSET", Keys(a).job("forged"), "spec", "{}"]
    App(redis_url=users["agent"]).client.execute_command(*forged)
    refused(sched(users["submitter"], "-n", a, "job", "submit", "-", input=WEB), "EVALSHA",
            "its rules name the scripts of another version of sched: the admin runs sched acl sync")

    ok(sched(admin, "acl", "sync"))
    assert ok(sched(users["submitter"], "-n", a, "job", "submit", "-", input=WEB)).stdout == "web\n"
    with pytest.raises(redis.exceptions.NoPermissionError):
        App(redis_url=users["agent"]).client.execute_command(*forged)
    assert client.hget(record_key(f"{prefix}-agent"), "scripts") == scripts_digest("agent")


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


def refusals(servers, user: str) -> list[str]:
    """What Redis refused ``user`` on each of ``servers`` (admin clients): the entries of
    their ACL LOG, each as its reason and the command, key or channel refused."""
    return [f"{e['reason']} {e['object']}" for server in servers for e in server.execute_command("ACL", "LOG")
            if e["username"] == user]


def stored(admin: str, namespace: str) -> dict:
    """Every key of the namespace and its value (DUMP), heartbeats left out (they expire)."""
    client = App(redis_url=admin).client
    return {key: client.dump(key) for key in client.scan_iter(match=f"sched:{{{namespace}}}:*", count=1000)
            if not key.endswith(":heartbeat")}


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


def agent_at_work(admin: str, namespace: str, urls: dict, servers, tmp_path, agent_args=()) -> None:
    """Run an agent under ``urls["agent"]`` and a worker under ``urls["worker"]`` in
    ``namespace``: they register, heartbeat, run, retry, restart and health-check tasks,
    also after the servers lost their scripts (redis-py loads them again: SCRIPT LOAD is
    the roles', EVALSHA of sched's scripts too), and Redis refuses them nothing."""
    admin_app = App(redis_url=admin, namespace=namespace)
    (tmp_path / "worker").mkdir()
    agents = Cluster(admin_app, urls["agent"], namespace, tmp_path)
    workers = Cluster(admin_app, urls["worker"], namespace, tmp_path / "worker")
    store = admin_app.store
    user = {role: url.split("//")[1].split(":")[0] for role, url in urls.items()}
    try:
        agents.agent("n1", cpu="4", slots=4, extra=agent_args)
        workers.worker()
        for spec in AGENT_JOBS:
            ok(sched(urls["submitter"], "-n", namespace, "job", "submit", "-", input=spec))
        agents.wait(lambda: store.get_task("once.0").state == "completed", "the agent to run once.0")
        assert store.task_output("once.0")["stdout"] == "hi\n"
        agents.wait(lambda: [t.state for t in store.tasks(store.job_task_ids("flaky"))] == ["failed", "failed"],
                    "flaky to fail twice")
        # Each failure is counted for faulty-node detection in the step that ended the task.
        failed = sorted(f"n1|{t.id}|{t.version}" for t in store.tasks(store.job_task_ids("flaky")))
        assert sorted(store.client.zrange(admin_app.keys.faults("flaky"), 0, -1)) == failed
        agents.wait(lambda: len(store.job_task_ids("again")) >= 3, "again to be replaced twice")
        agents.wait(lambda: any(t.health == "unhealthy" for t in store.tasks(store.job_task_ids("sick"))) and
                    len(store.job_task_ids("sick")) >= 2, "sick to turn unhealthy and be replaced")
        again = store.job_fields("again")
        assert int(again["next_index"]) == len(store.job_task_ids("again"))
        assert int(again["updated"]) >= max(int(store.client.hget(admin_app.keys.task(t), "created"))
                                            for t in store.job_task_ids("again"))

        for server in servers:
            server.script_flush()
        ok(sched(urls["submitter"], "-n", namespace, "job", "submit", "-",
                 input=AGENT_JOBS[0].replace("id: once", "id: after")))
        agents.wait(lambda: store.get_task("after.0").state == "completed", "after.0 to run on reloaded scripts")
        for role in ("agent", "worker", "submitter"):
            assert refusals(servers, user[role]) == [], role
    finally:
        workers.close()
        agents.close()
        admin_app.close()


def test_an_agent_runs_tasks_and_reaches_no_other_namespace(server, names, users, tmp_path):
    admin, _ = server
    a, b, prefix = names
    agent_at_work(admin, a, users, [App(redis_url=admin).client], tmp_path)
    refused(sched(users["agent"], "-n", b, "node", "ls"), f"an agent of namespace {a}", f"namespace {b}")


def an_agent_cannot_submit(admin: str, namespace: str, agent: str) -> None:
    """Neither through sched (one sentence, nothing written) nor with Redis commands or
    Lua of its own can the agent whose URL is ``agent`` create a job or change one."""
    ok(sched(admin, "-n", namespace, "job", "submit", "-", input=WEB))
    before = stored(admin, namespace)
    name = agent.split("//")[1].split(":")[0]
    bulk = '{"id": "b1", "replicas": 1}\n{"id": "b2", "replicas": 1}\n'
    for args, spec in ((["job", "submit", "-"], "id: new\n"), (["job", "submit", "-"], bulk),
                       (["job", "submit", "-"], "id: big\nreplicas: 501\n"), (["job", "submit", "-"], WEB),
                       (["job", "submit", "-"], WEB.replace("replicas: 2", "replicas: 3")),
                       (["job", "submit", "-"], WEB.replace("64Mi", "128Mi")), (["job", "scale", "web", "3"], None),
                       (["job", "scale", "web", "1"], None), (["job", "stop", "web"], None)):
        refused(sched(agent, "-n", namespace, *args, input=spec),
                f"Redis user {name}, an agent of namespace {namespace}", "may not submit, scale or stop jobs",
                f"sched {' '.join(args[:2])}")
    keys = Keys(namespace)
    user = App(redis_url=agent).client
    enqueue = hashlib.sha1(script_source("enqueue").encode()).hexdigest()
    for command in (["HSET", keys.job("forged"), "spec", '{"id":"forged"}'], ["HSET", keys.job("web"), "replicas", 9],
                    ["HSETNX", keys.job("web"), "spec:2", "{}"], ["DEL", keys.job("web")], ["SADD", keys.jobs, "forged"],
                    ["HSET", keys.job_shares, "forged", "|1|"], ["RPUSH", keys.job_history("web"), "{}"],
                    ["EVAL", "return 1", 1, keys.job("web")], ["EVALSHA", enqueue, 1, keys.job("forged")],
                    ["FCALL", "anything", 1, keys.job("web")], ["SREM", "sched:namespaces", namespace],
                    ["DEL", "sched:namespaces"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*command)
    assert stored(admin, namespace) == before


def test_an_agent_cannot_submit_scale_or_stop(server, names, users):
    an_agent_cannot_submit(server[0], names[0], users["agent"])


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


@pytest.mark.slow
def test_on_a_cluster_an_agent_runs_tasks_and_cannot_submit(redis_cluster, server, names, tmp_path):
    admin = redis_cluster.url
    a, _, prefix = names
    urls = {role: create(admin, f"{prefix}-{role}", a, role) for role in ("submitter", "worker", "agent")}
    # RQ's keys live on a plain server of their own (rq-on-a-cluster.md), with the agent's user there too.
    rq_url = create(server[0], f"{prefix}-agent", a, "agent")
    try:
        servers = [plain_client(port) for port in redis_cluster.live_ports()] + [App(redis_url=server[0]).client]
        agent_at_work(admin, a, urls, servers, tmp_path, agent_args=("--rq-url", rq_url))
        an_agent_cannot_submit(admin, a, urls["agent"])
    finally:
        for role in urls:
            sched(admin, "acl", "rm", f"{prefix}-{role}")
        sched(server[0], "acl", "rm", f"{prefix}-agent")


@pytest.mark.slow
def test_under_sentinel_an_agent_runs_tasks_and_cannot_submit(redis_sentinel, names, tmp_path):
    admin = redis_sentinel.url
    a, _, prefix = names
    urls = {role: create(admin, f"{prefix}-{role}", a, role) for role in ("submitter", "worker", "agent")}
    try:
        agent_at_work(admin, a, urls, [server.client() for server in redis_sentinel.servers.values()], tmp_path)
        an_agent_cannot_submit(admin, a, urls["agent"])
    finally:
        for role in urls:
            sched(admin, "acl", "rm", f"{prefix}-{role}")

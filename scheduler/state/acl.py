"""Redis ACL users that reach one namespace: what ``sched acl create/ls/rm/sync`` does in
Redis, and the sentence a command gets when Redis refuses it one (``NOPERM``).

Every key of namespace NS is ``sched:{NS}:...`` and its events go out on
``sched:{NS}:events``, so a Redis user whose key and channel patterns are those is
confined to NS by Redis itself. Each role adds the commands its processes really send
(found by running them under the role; the lists below are the result), never
``FLUSHALL``, ``CONFIG``, ``SCRIPT FLUSH``, ``KEYS``, ``SCAN`` or ``ACL`` beyond
``WHOAMI``: those stay the admin's (the URL without a user, or any user with ``+@all``).
A writing role calls sched's scripts only, each named by its SHA1; an agent only its
own, and it writes only the keys its processes write, so it cannot create or change a
job. Inside its namespace a role is least privilege rather than a wall: Redis checks a
script's commands as the user's own, and a worker reverts deployments with the scripts
a submit uses, so a worker can submit (docs/security.md says what each role can and
cannot do).

ACL users live in each server, not in the data: on a Redis Cluster a user is set on
every master and replica, and on one server also on the replicas it lists (so that a
failover keeps it). What sched made is also recorded in ``sched:acl:<name>`` (a HASH:
namespace, role, the SHA-256 of the password), which ``sched acl sync`` applies again
to every server (a restarted server without an ACL file, a new replica); each user may
read its own record, so that a refusal can name its role.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from urllib.parse import quote

import redis
from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError, RedisClusterException, ResponseError

from scheduler.model.errors import NotFound, SpecError
from scheduler.model.names import check_namespace
from scheduler.state.connection import client_for
from scheduler.state.keys import Keys
from scheduler.state.scripts import READ_SCRIPTS, SCRIPT_NAMES, ClusterSafeScript, script_source

ROLES = ("viewer", "submitter", "worker", "agent")
NAMESPACE_REGISTRY = "sched:namespaces"
RECORD_PREFIX = "sched:acl:"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED = {"default"}  # the admin's own user

# What every client sends whatever its role: the connection's handshake, health checks,
# the clock, and the question "who am I" (for the sentence below).
_CONNECTION = ("ping", "hello", "auth", "time", "client|setname", "client|setinfo", "acl|whoami",
               # A cluster client reads the layout and which arguments of a command are keys.
               "cluster|slots", "command")
# Reads of the namespace: listings, show, explain, logs, audit, the dashboard, events.
_READS = ("get", "exists", "hget", "hgetall", "hmget", "hkeys", "hlen", "smembers", "zrange", "zrevrange",
          "zrangebyscore", "zcard", "zscore", "lrange", "ttl", "subscribe", "unsubscribe",
          # The event stream (sched events, Client.events and watch, the dashboard), a
          # consumer group's own bookkeeping included.
          "xrange", "xrevrange", "xread", "xlen", "xinfo|stream", "xinfo|groups", "xreadgroup", "xack",
          "xautoclaim", "xgroup|create")
# Which of the scheduler's Lua scripts each writing role may call, named by SHA1
# (``+evalsha|<sha1>``): Redis refuses any other script, and EVAL (Lua of the caller's
# own, which could also stall the server for every namespace). An agent gets what its
# processes run: registering its node and setting its status, starting, ending and
# requeueing the tasks placed on it, their health; and history.lua, so that what it may
# do to nodes (node_set.lua also pauses and drains) is recorded. Not enqueue.lua,
# enqueue_many.lua, deployment_open.lua or job_stop.lua, which create, change and stop
# jobs. A submitter and a worker get every script (a worker opens deployments, reverts
# them and queues global jobs' tasks with the scripts a submit uses) but the admin's:
# dump_page.lua, which reads a namespace whole for a snapshot.
_ADMIN_SCRIPTS = ("dump_page",)
# The scripts that only read (scripts.READ_SCRIPTS: a job's record, a page of jobs and
# their tasks' states) every role calls with EVALSHA_RO (below): Redis checks each read
# they run as any other.
_ROLE_SCRIPTS = {
    "viewer": (),
    "submitter": tuple(name for name in SCRIPT_NAMES if name not in _ADMIN_SCRIPTS),
    "worker": tuple(name for name in SCRIPT_NAMES if name not in _ADMIN_SCRIPTS),
    "agent": ("node_put", "node_set", "start", "task_health", "finish", "replace", "history", "output"),
}
_SCRIPT_CALLS = ("script|load",)  # with the EVALSHA rules: redis-py loads a script Redis lost


def _script_commands(names) -> set[str]:
    """What the scripts ``names`` run: Redis checks every command a script runs against the
    user, so a role that calls a script needs its commands too. Read off the scripts
    themselves, so that a script that starts using a command cannot leave a role behind."""
    return {command.lower() for name in (*names, "_lib")
            for command in re.findall(r"(?:redis\.call|call_all)\('([A-Z]+)'", script_source(name))}


def script_shas(role: str) -> list[str]:
    """The SHA1 of each script ``role`` may call, as this version of sched sends them."""
    return sorted(hashlib.sha1(script_source(name).encode()).hexdigest() for name in _ROLE_SCRIPTS[role])


def read_script_shas() -> list[str]:
    """The SHA1 of each script that only reads (every role may call it with EVALSHA_RO)."""
    return sorted(hashlib.sha1(script_source(name).encode()).hexdigest() for name in READ_SCRIPTS)


def scripts_digest(role: str) -> str:
    """A short name for the scripts a user of ``role`` is set up for, kept in its record:
    a user set up by another version of sched names other SHA1s (``sched acl sync``)."""
    return hashlib.sha256(" ".join([*script_shas(role), "ro", *read_script_shas()]).encode()).hexdigest()[:16]


# Per role, beyond the reads and its scripts' commands. WAIT follows durable script calls
# (--wait-replicas).
_ROLE_COMMANDS = {
    "viewer": (),
    "submitter": ("wait",),
    # BLPOP: an idle worker waits on q:wake; DEL: its short locks; MULTI/EXEC: --repair-on-start;
    # INFO: it watches Redis's memory (and warns past 80% of maxmemory).
    "worker": ("wait", "blpop", "del", "multi", "exec", "discard", "info"),
    "agent": ("wait",),
}
# The keys of its namespace an agent may write (directly, and inside its scripts): the
# queues, tasks (their output and attempts too), nodes, heartbeats, tallies, usage,
# failures, events, a job's task index, the tasks that ended (for retention) and, when its
# write is a namespace's first, the key layout's version (layout.py). Not the jobs: a job's hash (but HINCRBY, below),
# the jobs' sets and shares, deployments, config, quota, tenants, histories but a node's.
_AGENT_WRITES = ("q:*", "task:*", "node:*", "nodes", "nodes:*", "resources", "agents", "agents:*", "tally:*",
                 "usage", "stream", "faults:*", "job:*:tasks", "tasks:ended", "layout")
# A requeue (replace.lua) moves a job's next_index and updated with HINCRBY: the one
# write an agent may make to a job's hash, which cannot write a spec.
_AGENT_JOB_COMMANDS = ("hincrby",)
# RQ's own keys and channels (rq:queue:..., rq:job:..., rq:worker:..., rq:pubsub:...) and
# the commands RQ sends on them: a selector of the agent's, so these commands reach no
# key of any namespace. RQ's keys are global (one set of workers, queues named
# sched-<ns>-<node>): agents sharing an execution Redis share them. No script: what the
# agent asks of RQ (enqueue, work, fetch, delete) runs none of RQ's Lua.
_RQ_COMMANDS = ("get", "set", "del", "exists", "expire", "persist", "rename", "hget", "hgetall", "hmget", "hset",
                "hsetnx", "hexists", "hincrby", "hincrbyfloat", "hdel", "sadd", "srem", "smembers", "scard", "zadd",
                "zrem", "zrange", "zrangebyscore", "zremrangebyscore", "zremrangebyrank", "zcard", "zcount", "zscore",
                "zpopmin", "zincrby", "lpush", "rpush", "lpop", "lrange", "lrem", "llen", "lpos", "lmove", "blmove",
                "blpop", "xadd", "xrevrange", "xread", "xlen", "watch", "unwatch", "multi", "exec", "discard",
                "publish", "subscribe", "unsubscribe")
# RQ asks the server's version (INFO) and its own address (CLIENT INFO) at start.
_RQ_CONNECTION = ("info", "client|info")


def check_user_name(name) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in _RESERVED:
        raise SpecError(f"user name {name!r} is not valid; use up to 64 letters, digits, '.', '-' and '_', "
                        "starting with a letter or digit (and not 'default', the admin's).")
    return name


def check_role(role) -> str:
    if role not in ROLES:
        raise SpecError(f"role {role!r} is not one of {', '.join(ROLES)}.")
    return role


def record_key(name: str) -> str:
    return RECORD_PREFIX + name


def _selector(keys: list[str], commands) -> str:
    """One ACL selector: these commands, on these keys only."""
    return "(" + " ".join([*keys, *(f"+{command}" for command in commands)]) + ")"


def rules(name: str, namespace: str, role: str, password_sha256: str) -> list[str]:
    """The ``ACL SETUSER`` rules of a user of ``role`` in ``namespace`` (after ``reset``,
    so applying them again gives the same user).

    Redis allows a command when the user's own rules allow it on every key it names, or
    one of its selectors does: the user's own rules read the namespace with every command
    of the role (also each command its scripts run, which Redis checks as any other), and
    the selectors say where the role may write."""
    prefix = f"sched:{{{namespace}}}:"
    commands = set(_CONNECTION) | set(_READS) | set(_ROLE_COMMANDS[role]) | _script_commands(_ROLE_SCRIPTS[role])
    out = ["reset", "on", f"#{password_sha256}", "resetchannels", f"&{prefix}*", f"%R~{record_key(name)}",
           f"%R~{prefix}*", *(f"+{command}" for command in sorted(commands))]
    # The scripts that only read (a job's record, a page of jobs), with EVALSHA_RO, which
    # names its keys for reading only: a viewer's too.
    out.append(_selector([f"%R~{prefix}*"], [*(f"evalsha_ro|{sha}" for sha in read_script_shas()), *_SCRIPT_CALLS]))
    if role == "viewer":
        return out
    if role == "agent":
        out.append(_selector([f"~{prefix}{pattern}" for pattern in _AGENT_WRITES], sorted(commands - set(_CONNECTION))))
        out.append(_selector([f"~{prefix}job:*"], _AGENT_JOB_COMMANDS))
    else:  # every key but quota and tenants (the admin's limits), which they only read
        out += [f"~{prefix}{pattern}" for pattern in ("q:*", "ta*", "[^qt]*")]
    # A process registers its namespace (SADD) without learning, or removing, the others'.
    out.append(_selector([f"%W~{NAMESPACE_REGISTRY}"], ["sadd"]))
    # A script call names its keys (KEYS), which Redis checks for reading and writing:
    # these calls may name any key of the namespace (commit.lua is given the quota,
    # claim.lua the tenants' weights), while each command a script then runs is checked
    # against the rules above.
    out.append(_selector([f"~{prefix}*"], [*(f"evalsha|{sha}" for sha in script_shas(role)), *_SCRIPT_CALLS]))
    if role == "agent":
        out += [f"+{command}" for command in _RQ_CONNECTION]
        out.append(_selector(["~rq:*", "&rq:*"], _RQ_COMMANDS))
    return out


def _sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def user_url(url: str, name: str, password: str) -> str:
    """``url`` (the admin's) with ``name`` and ``password`` as its credentials instead of
    the admin's (and no ``username``/``password`` query parameter)."""
    scheme, sep, rest = url.partition("://")
    rest, mark, query = rest.partition("?")
    at = rest.rfind("@")
    rest = rest[at + 1:] if at >= 0 else rest
    kept = "&".join(part for part in query.split("&")
                    if part and part.split("=", 1)[0].lower() not in ("username", "password"))
    return f"{scheme}{sep}{quote(name, safe='')}:{quote(password, safe='')}@{rest}" + (f"?{kept}" if kept else "")


def _servers(client) -> list[tuple[str, redis.Redis]]:
    """(address, client) of every server a user must be set on: each node of a cluster
    that ``CLUSTER NODES`` lists (masters and replicas, those that have not synced yet
    included); else this server and the replicas it lists. Each is reached with the
    credentials and TLS settings of ``client``."""
    if isinstance(client, RedisCluster):
        first = client.get_default_node()
        pool = client.get_redis_connection(first).connection_pool
        listed = first.redis_connection.execute_command("CLUSTER", "NODES")
        if isinstance(listed, dict):  # redis-py parses it: "host:port" -> fields
            addresses = [address for address, fields in listed.items()
                         if not {"fail", "noaddr", "handshake"} & set(fields.get("flags", "").split(","))]
        else:
            addresses = [line.split()[1].split("@")[0] for line in listed.splitlines()
                         if line.strip() and not {"fail", "noaddr", "handshake"} & set(line.split()[2].split(","))]
        return [(address, _server_like(pool, *address.rsplit(":", 1))) for address in sorted(addresses)]
    servers = [("", client)]
    for field, value in client.info("replication").items():
        if re.fullmatch(r"slave\d+", field) and isinstance(value, dict):
            servers.append((f"{value['ip']}:{value['port']}",
                            _server_like(client.connection_pool, value["ip"], value["port"])))
    return servers


def _server_like(pool, host: str, port) -> redis.Redis:
    """A client for ``host:port`` with the credentials, timeouts and TLS of ``pool``'s."""
    kwargs = {k: v for k, v in pool.connection_kwargs.items()
              if k in ("username", "password", "socket_timeout", "socket_connect_timeout") or k.startswith("ssl_")}
    if "SSL" in pool.connection_class.__name__:
        kwargs["ssl"] = True
    return redis.Redis(host=host, port=int(port), decode_responses=True, **kwargs)


_UNKNOWN_RULE_RE = re.compile(r"modifier '\+([^']+)': Unknown command")


def set_user(server, name: str, user_rules: list[str]) -> None:
    """``ACL SETUSER name rules...``, leaving out commands this server's version does not
    have (``CLIENT SETINFO`` came with Redis 7.2): a client does not send them to it."""
    user_rules = list(user_rules)
    while True:
        try:
            server.execute_command("ACL", "SETUSER", name, *user_rules)
            return
        except ResponseError as exc:
            unknown = _UNKNOWN_RULE_RE.search(str(exc))
            if unknown is None or f"+{unknown.group(1)}" not in user_rules:
                raise
            user_rules.remove(f"+{unknown.group(1)}")


def _persist(server) -> bool:
    """Write the server's users where it keeps them across restarts: its ACL file, else
    its configuration file. False when it has neither (``sched acl sync`` after a restart)."""
    for command in (("ACL", "SAVE"), ("CONFIG", "REWRITE")):
        try:
            server.execute_command(*command)
            return True
        except ResponseError:
            continue
    return False


class AclUsers:
    """The users sched made in one Redis (any topology), through an admin's client."""

    def __init__(self, client):
        self.client = client

    def _apply(self, name: str, user_rules: list[str] | None) -> dict:
        """Set (or, with None, delete) the user on every server; what happened where. A
        server that does not answer is reported, not fatal (``sched acl sync`` later)."""
        done, missed, persisted = [], {}, True
        for address, server in _servers(self.client):
            try:
                if user_rules is None:
                    server.execute_command("ACL", "DELUSER", name)
                else:
                    set_user(server, name, user_rules)
                persisted = _persist(server) and persisted
                done.append(address or "this server")
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                missed[address or "this server"] = str(exc).rstrip(".")
        return {"servers": done, "missed": missed, "persisted": persisted}

    def create(self, name: str, namespace: str, role: str) -> dict:
        """A new user confined to ``namespace`` with ``role``'s commands; its password
        (from :mod:`secrets`) is in the result and nowhere else."""
        check_user_name(name)
        check_namespace(namespace)
        check_role(role)
        if self.client.exists(record_key(name)) or self._exists(name):
            raise SpecError(f"a Redis user named {name!r} exists already; remove it first (sched acl rm {name}).")
        password = secrets.token_urlsafe(32)
        digest = _sha256(password)
        result = self._apply(name, rules(name, namespace, role, digest))
        self.client.hset(record_key(name), mapping={"namespace": namespace, "role": role, "password_sha256": digest,
                                                    "scripts": scripts_digest(role),
                                                    "created": int(time.time() * 1000)})
        return {"name": name, "namespace": namespace, "role": role, "password": password, **result}

    def _exists(self, name: str) -> bool:
        return name in self.client.execute_command("ACL", "USERS")

    def records(self) -> list[dict]:
        """Every user sched made, by name, with whether this server has it."""
        present = set(self.client.execute_command("ACL", "USERS"))
        out = []
        for key in sorted(self._record_keys()):
            fields = self.client.hgetall(key)
            name = key[len(RECORD_PREFIX):]
            out.append({"name": name, "namespace": fields.get("namespace", ""), "role": fields.get("role", ""),
                        "created": int(fields.get("created", 0)), "active": name in present})
        return out

    def _record_keys(self) -> list[str]:
        if isinstance(self.client, RedisCluster):
            return [k for k in self.client.scan_iter(match=RECORD_PREFIX + "*", count=1000,
                                                      target_nodes=RedisCluster.PRIMARIES)]
        return list(self.client.scan_iter(match=RECORD_PREFIX + "*", count=1000))

    def remove(self, name: str) -> dict:
        check_user_name(name)
        if not self.client.exists(record_key(name)):
            raise NotFound(f"no Redis user {name!r} made by sched acl create.")
        result = self._apply(name, None)
        self.client.delete(record_key(name))
        return {"name": name, **result}

    def sync(self) -> list[dict]:
        """Set every recorded user again, with today's rules for its role, on every server."""
        out = []
        for record in self.records():
            fields = self.client.hgetall(record_key(record["name"]))
            user_rules = rules(record["name"], fields["namespace"], fields["role"], fields["password_sha256"])
            out.append({"name": record["name"], **self._apply(record["name"], user_rules)})
            self.client.hset(record_key(record["name"]), "scripts", scripts_digest(fields["role"]))
        return out


def check_access(url: str, keys: Keys) -> None:
    """Raise Redis's refusal now if the user of ``url`` may not run a scheduler worker's
    scripts on ``keys``' namespace, rather than in every turn of a long-running loop: one
    call of ``tallies.lua``, which only reads, on a connection of its own. Anything else (a
    Redis not up yet, a refused password) is left to the workers, which wait for Redis or
    say why they cannot reach it."""
    try:
        client = client_for(url, retrying=False)
    except (redis.RedisError, RedisClusterException):
        return
    try:
        probe = "access-check"  # a job id like any: its keys are only read
        ClusterSafeScript(client, script_source("tallies"))(
            keys=[keys.tally_job(probe), keys.faults(probe), keys.job(probe)], args=[0])
    except (redis.RedisError, RedisClusterException) as exc:
        if is_refusal(exc):
            raise
    finally:
        client.close()


# ----------------------------------------------------------------------------- refusals
_COMMAND_RE = re.compile(r"permissions to run the '([^']+)' command")
_SCRIPT_COMMAND_RE = re.compile(r"script can't run this command")
_KEY_RE = re.compile(r"(access one of the keys|access at least one of the keys|access a key)")
_CHANNEL_RE = re.compile(r"access one of the channels|access a channel")


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing the user a command, key or channel (also from
    inside a script, where Redis says so in other words)."""
    if isinstance(exc, NoPermissionError):
        return True
    return isinstance(exc, ResponseError) and "The user executing the script can't" in str(exc)


def whoami(client) -> dict:
    """``{user, namespace, role, scripts}`` of the client's Redis user (all but ``user``
    empty when sched did not make it or they cannot be read; ``scripts``: the
    :func:`scripts_digest` its rules were set with)."""
    try:
        user = client.execute_command("ACL", "WHOAMI")
    except redis.RedisError:
        return {"user": "", "namespace": "", "role": "", "scripts": ""}
    try:
        fields = client.hgetall(record_key(user)) if user not in _RESERVED else {}
    except redis.RedisError:
        fields = {}
    return {"user": user, "namespace": fields.get("namespace", ""), "role": fields.get("role", ""),
            "scripts": fields.get("scripts", "")}


_ROLE_DOES = {"viewer": "a viewer only reads",
              "submitter": "a submitter submits, scales and stops jobs, and may not change quotas or tenant weights",
              "worker": "a worker runs sched worker, and may not change quotas or tenant weights",
              "agent": "an agent runs sched agent (it starts, ends and requeues the tasks placed on its node), and "
                       "may not submit, scale or stop jobs, nor change quotas or tenant weights"}


def refusal_sentence(client, exc: BaseException, namespace: str, doing: str) -> str:
    """One sentence for a refusal met while ``doing`` (e.g. ``sched job submit``) in
    ``namespace``: who was refused what, and what the role is for."""
    me = whoami(client)
    who = f"Redis user {me['user']}" if me["user"] else "this Redis user"
    if me["role"]:
        who += f", {'an' if me['role'] == 'agent' else 'a'} {me['role']} of namespace {me['namespace']},"
    text = str(exc)
    command = _COMMAND_RE.search(text)
    if me["namespace"] and me["namespace"] != namespace and command is None:
        what = f"read or write namespace {namespace} (keys sched:{{{namespace}}}:*)"
        hint = f"use credentials for {namespace}"
    else:
        hint = _ROLE_DOES.get(me["role"], "the admin's URL may")
        if command is not None and command.group(1).lower() in ("evalsha", "eval"):
            what = "run that scheduler script (EVALSHA)"
            if me["role"] in ROLES and me["scripts"] != scripts_digest(me["role"]):
                # Rules name scripts by SHA1: this sched's differ from those the user was set up with.
                hint = "its rules name the scripts of another version of sched: the admin runs sched acl sync"
        elif command is not None:
            what = f"run {command.group(1).upper()}"
        elif _SCRIPT_COMMAND_RE.search(text):
            what = "run a command that a scheduler script runs"
        elif _CHANNEL_RE.search(text):
            what = f"follow a channel outside namespace {me['namespace'] or namespace}"
        elif me["role"] in ("submitter", "worker", "agent"):
            what = f"make that change in namespace {namespace}"
        else:
            what = f"use a key outside namespace {me['namespace'] or namespace}"
    return f"{who} may not {what}, which {doing} needs: {hint} (NOPERM; docs/security.md lists what each role may do)."

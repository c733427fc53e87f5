"""Load the Lua scripts shipped in ``lua/`` (installed as ``scheduler.lua``) once per process and call them by name.

redis-py's ``Script`` runs them with EVALSHA and reloads on NOSCRIPT, so a restarted or
failed-over Redis needs nothing from us. Each script's header lists its KEYS and ARGV.

On a Redis Cluster every key a script is given carries the namespace's hash tag
``{ns}``, so each call goes, by its keys, to the one node serving the namespace's slot.
``SCRIPT LOAD`` goes to every master (redis-py's routing), so the NOSCRIPT reload also
covers a replica promoted since the script was first loaded (a replica does not get the
scripts its master loaded). Scripts publish with ``PUBLISH``, which a cluster passes to
every node, so a subscriber on any node hears a namespace's events; the same events go
to the namespace's stream, a key of its slot (stream.py).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import logging
import time

import redis
from redis.client import Pipeline

try:
    from hiredis import pack_command
except ImportError:  # redis-py packs without it
    pack_command = None
from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import (AskError, ClusterDownError, NoScriptError, RedisClusterException, TryAgainError)

from scheduler.state.replication import ReplicaWatch, ReplicasMissing, Unreplicated

log = logging.getLogger("sched.replication")

SCRIPT_NAMES = ("enqueue", "enqueue_many", "claim", "reclaim", "fail", "move", "commit", "finish", "start", "preempt",
                "preempt_gang", "unnominate", "claimed", "tallies", "node_put", "node_set", "node_rm", "job_stop",
                "snapshot", "deployment_open", "deployment_set", "task_health", "history",
                "replace", "unhold", "launch", "dump_page", "series", "gc_note", "gc_prune", "gc_job", "layout_2",
                "output", "node_taint", "job_rules", "job_page", "task_states", "evict", "budget_count",
                "budget_note", "drain_set", "move_open", "move_set", "pool_put", "capacity", "job_read")


@cache
def script_source(name: str) -> str:
    """The script as sent to Redis: the shared helpers of ``_lib.lua``, then the script."""
    folder = files("scheduler.lua")
    return folder.joinpath("_lib.lua").read_text(encoding="utf-8") + folder.joinpath(f"{name}.lua").read_text(
        encoding="utf-8")


# Scripts that only read and every role may call, with EVALSHA_RO (Redis refuses them any
# write, and runs them while writes are paused): a job's record, a page of jobs.
READ_SCRIPTS = ("job_page", "task_states", "job_read")
# Scripts that set_guard never holds back: those that only read, and the layout upgrade's own.
UNGUARDED = ("claimed", "tallies", "snapshot", "dump_page", "layout_2", *READ_SCRIPTS)

# Scripts whose calls must not be resent blindly after a timeout or a lost connection (the
# first may have run): they are called on a client that never retries, and their wrappers
# in Store decide (enqueue's fill calls are idempotent and resent; its first call is not).
ONCE_SCRIPTS = ("enqueue", "deployment_open", "history", "launch", "move_open")


class ClusterSafeScript(Script):
    """redis-py's ``Script``, which may also be queued on a cluster pipeline.

    redis-py refuses ``evalsha`` on a cluster pipeline, and does not load a pipeline's
    scripts first on a cluster as it does on one server. There the script is sent whole
    (EVAL, which Redis caches by its SHA as well), so that the pipeline never meets a
    node that lacks it, such as a replica promoted since the script was last loaded. A
    direct call that meets NOSCRIPT loads the script on the node serving its keys.

    ``guard``, when set, is called before the call goes (``Scripts.set_guard``)."""

    guard = None

    def __call__(self, keys=None, args=None, client=None):
        if self.guard is not None:
            self.guard()
        if isinstance(client, ClusterPipeline):
            keys = list(keys or [])
            return client.execute_command("EVAL", self.script, len(keys), *keys, *(args or []))
        target = client if client is not None else self.registered_client
        if (pack_command is not None and isinstance(target, redis.Redis) and not isinstance(target, Pipeline)
                and target.connection is None):
            return self._direct(target, list(keys or ()), args or ())
        if isinstance(target, RedisCluster) and keys:
            # On NOSCRIPT, redis-py's SCRIPT LOAD goes to every master, and fails while any
            # one is down: load the script only where the keys live.
            keys = list(keys)
            try:
                return target.evalsha(self.sha, len(keys), *keys, *(args or []))
            except NoScriptError:
                target.get_redis_connection(target.get_node_from_key(keys[0])).script_load(self.script)
                return target.evalsha(self.sha, len(keys), *keys, *(args or []))
        return super().__call__(keys, args, client)


    def _direct(self, client: redis.Redis, keys: list, args) -> object:
        """EVALSHA packed by hiredis in one call and its reply read straight off a
        connection: redis-py's own path checks and converts each argument in Python first,
        which costs about as much again for the thousands a commit or a claim carries.
        The connection's retry resends it as redis-py would; NOSCRIPT loads the script."""
        try:
            packed = [pack_command(("EVALSHA", self.sha, len(keys), *keys, *args))]
        except TypeError:  # an argument hiredis does not pack (redis-py says which)
            return super().__call__(keys, args, client)
        pool = client.connection_pool
        connection = pool.get_connection()

        def send_and_read():
            connection.send_packed_command(packed)
            return connection.read_response()

        try:
            try:
                return connection.retry.call_with_retry(send_and_read, lambda _error: connection.disconnect())
            except NoScriptError:
                client.script_load(self.script)
                return connection.retry.call_with_retry(send_and_read, lambda _error: connection.disconnect())
        except redis.ResponseError:
            raise  # the script's own error: the connection is in step
        except BaseException:
            connection.disconnect()  # a reply may be left unread
            raise
        finally:
            pool.release(connection)


# Acknowledged writes that matter after a failover: placements, submissions, task ends
# (and starts, preemptions, requeues with their explanation). With ``wait_replicas`` > 0
# each call of these returns only once that many replicas have it, or the timeout passed.
DURABLE_SCRIPTS = ("commit", "enqueue", "finish", "start", "preempt", "fail", "replace", "launch", "unhold")


class DurableScript(ClusterSafeScript):
    """A script call followed by ``WAIT replicas timeout`` on the same connection (WAIT
    counts the replicas that have this connection's writes), so the call returns once
    ``replicas`` replicas have its write, or after ``timeout_ms`` with a warning (the write
    is applied on the master either way: WAIT cannot undo it). While ``watch`` says the
    master has fewer replicas, the WAIT is left out, or the call refused (replication.py). On a
    cluster the calls go to the master serving the keys' slot. Pipelined calls are not
    waited for."""

    def __init__(self, registered_client, script, replicas: int, timeout_ms: int, resend: bool = True,
                 watch: ReplicaWatch | None = None):
        super().__init__(registered_client, script)
        self.replicas, self.timeout_ms, self.resend = replicas, timeout_ms, resend
        self.watch = watch or ReplicaWatch(replicas)

    def __call__(self, keys=None, args=None, client=None):
        if client is not None and isinstance(client, (Pipeline, ClusterPipeline)):
            return super().__call__(keys, args, client)
        if self.guard is not None:
            self.guard()
        target = client if client is not None else self.registered_client
        keys = list(keys or [])
        watch = self.watch
        for attempt in range(12):
            if isinstance(target, RedisCluster):
                node = target.get_node_from_key(keys[0]) if keys else target.get_default_node()
                connection = target.get_redis_connection(node)
            else:
                connection = target
            try:
                # A round trip before the process's first durable write (a work horse need
                # not pay WAIT's timeout to learn what its agent's workers know), and, when
                # refusing, at most once a second: none per write.
                if watch.connected is None or (watch.missing and watch.on_missing == "refuse" and watch.check_due()):
                    watch.look(connection)
                if watch.missing and watch.on_missing == "refuse":
                    raise watch.refusal()
                waiting = not watch.missing
                checking = not waiting and watch.check_due()
                pipe = connection.pipeline(transaction=False)
                pipe.evalsha(self.sha, len(keys), *keys, *(args or []))
                if waiting:
                    pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
                elif checking:
                    pipe.info("replication")
                reply, *after = pipe.execute(raise_on_error=False)  # the script's error is raised below
                if isinstance(reply, Exception):
                    raise reply
            except ReplicasMissing:
                raise
            except NoScriptError:
                connection.script_load(self.script)
                continue
            except (AskError, TryAgainError, ClusterDownError, RedisClusterException, redis.ConnectionError,
                    redis.TimeoutError) as exc:
                # On a cluster: MOVED/TRYAGAIN/CLUSTERDOWN (not run), or the node is gone (maybe
                # run: resent only if the script may be, as the routed call would be). The
                # layout changed (a failover): read it again and try the master now serving.
                connection_lost = isinstance(exc, (redis.ConnectionError, redis.TimeoutError))
                if not isinstance(target, RedisCluster) or attempt == 11 or (connection_lost and not self.resend):
                    raise
                log.warning("cluster layout changed (%s); reading it again", exc)
                time.sleep(min(1.0, 0.05 * 2 ** attempt))
                target.nodes_manager.initialize()
                continue
            if waiting and int(after[0]) < self.replicas:
                # Short of replicas after the whole timeout: missing, or only slow? The
                # master's count says (a round trip only after a WAIT that timed out).
                Unreplicated.count += 1
                try:
                    watch.look(connection)
                except (redis.RedisError, RedisClusterException):
                    pass  # the write is done; the next shortfall asks again
                if not watch.missing:
                    log.warning("a write reached %s of %s replicas within %s ms", after[0], self.replicas,
                                self.timeout_ms)
            elif not waiting:
                Unreplicated.count += 1
                if checking:
                    watch.read(after[0])
            return reply
        raise RedisClusterException("the cluster did not settle")


class Scripts:
    """The project's scripts registered on one client; ``scripts.commit(keys, args)``.
    ``once_client`` (a client that never resends) runs :data:`ONCE_SCRIPTS`. With
    ``wait_replicas`` > 0, :data:`DURABLE_SCRIPTS` wait for that many replicas
    (:class:`DurableScript`), all watching one master through one :class:`ReplicaWatch`
    (``on_missing`` says what to do when it has fewer; ``label`` names the namespace in
    what it says). ``clock`` (ms), when given, is the time the scripts that stamp one
    work with instead of Redis TIME (:meth:`now_arg`): the simulator's virtual clock
    (``scheduler/tools/simulate/``); leases always use Redis TIME."""

    def __init__(self, client: redis.Redis, once_client: redis.Redis | None = None, wait_replicas: int = 0,
                 wait_timeout_ms: int = 1000, on_missing: str | None = None, label: str = "", clock=None):
        self.client = client
        self.clock = clock
        self.once_client = once_client if once_client is not None else client
        self.wait_replicas = wait_replicas
        self.watch = ReplicaWatch(wait_replicas, on_missing, label) if wait_replicas > 0 else None
        self._guard = None
        self._check = None
        for name in SCRIPT_NAMES:
            target = once_client if once_client is not None and name in ONCE_SCRIPTS else client
            if self.watch is not None and name in DURABLE_SCRIPTS:
                setattr(self, name, DurableScript(target, script_source(name), wait_replicas, wait_timeout_ms,
                                                  resend=name not in ONCE_SCRIPTS, watch=self.watch))
            else:
                setattr(self, name, ClusterSafeScript(target, script_source(name)))

    def now_arg(self) -> str:
        """The last ARGV of a script that stamps a time: "" (Redis TIME) unless a clock is given."""
        return "" if self.clock is None else str(int(self.clock()))

    def set_guard(self, check) -> None:
        """Call ``check()`` before the first call of any script that writes, until one call
        of it returns (it raises to refuse the write: the layout check, layout.py). The
        read-only scripts and the upgrade's own are never held back."""
        def guard():
            check()
            self.set_guard(None)

        if check is not None:
            self._check = check
        for name in SCRIPT_NAMES:
            if name not in UNGUARDED:
                getattr(self, name).guard = guard if check is not None else None
        self._guard = guard if check is not None else None

    def rearm(self) -> None:
        """Check again before the next write (the namespace was emptied: its next write
        records the layout again)."""
        if self._check is not None:
            self.set_guard(self._check)

    def queue(self, pipe, name: str, keys: list, args: list, *, read_only: bool = False, **options) -> None:
        """Queue a script call on a pipeline by its SHA. (redis-py would first ask Redis
        whether the script exists, a round trip per pipeline.) If Redis has lost it, the
        pipeline fails with NoScriptError: :meth:`load_all` and run the pipeline again.

        Sent as a raw command: a cluster pipeline refuses ``pipe.evalsha`` by name but
        routes a raw EVALSHA by its keys, like any other command. ``read_only`` sends
        EVALSHA_RO (Redis refuses any write, and runs it while writes are paused);
        ``options`` go to redis-py with the command (``NEVER_DECODE`` for a reply of bytes)."""
        if not read_only and name not in UNGUARDED and self._guard is not None:
            self._guard()
        pipe.execute_command("EVALSHA_RO" if read_only else "EVALSHA", getattr(self, name).sha, len(keys), *keys,
                             *args, **options)

    def load(self, *names: str) -> None:
        """Load these scripts now (on a cluster, on every master): those a caller will queue
        by SHA, whose first pipeline would otherwise fail and be sent again."""
        for name in names:
            self.client.script_load(getattr(self, name).script)

    def load_all(self) -> None:
        """Load every script (on a cluster, on every master)."""
        self.load(*SCRIPT_NAMES)

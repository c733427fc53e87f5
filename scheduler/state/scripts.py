"""Load the Lua scripts shipped in ``lua/`` (installed as ``scheduler.lua``) once per process and call them by name.

redis-py's ``Script`` runs them with EVALSHA and reloads on NOSCRIPT, so a restarted or
failed-over Redis needs nothing from us. Each script's header lists its KEYS and ARGV.

On a Redis Cluster every key a script is given carries the namespace's hash tag
``{ns}``, so each call goes, by its keys, to the one node serving the namespace's slot.
``SCRIPT LOAD`` goes to every master (redis-py's routing), so the NOSCRIPT reload also
covers a replica promoted since the script was first loaded (a replica does not get the
scripts its master loaded). Scripts publish with ``PUBLISH``, which a cluster passes to
every node, so a subscriber on any node hears a namespace's events.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import redis
from redis.cluster import ClusterPipeline
from redis.commands.core import Script

SCRIPT_NAMES = ("enqueue", "enqueue_many", "claim", "reclaim", "fail", "move", "commit", "finish", "start", "preempt",
                "preempt_gang", "unnominate", "claimed", "tallies", "node_put", "node_set", "node_rm")


@cache
def script_source(name: str) -> str:
    """The script as sent to Redis: the shared helpers of ``_lib.lua``, then the script."""
    folder = files("scheduler.lua")
    return folder.joinpath("_lib.lua").read_text(encoding="utf-8") + folder.joinpath(f"{name}.lua").read_text(
        encoding="utf-8")


# Scripts whose calls must not be resent blindly after a timeout or a lost connection (the
# first may have run): they are called on a client that never retries, and their wrappers
# in Store decide (enqueue's fill calls are idempotent and resent; its first call is not).
ONCE_SCRIPTS = ("enqueue",)


class ClusterSafeScript(Script):
    """redis-py's ``Script``, which may also be queued on a cluster pipeline.

    redis-py refuses ``evalsha`` on a cluster pipeline, and does not load a pipeline's
    scripts first on a cluster as it does on one server. There the script is sent whole
    (EVAL, which Redis caches by its SHA as well), so that the pipeline never meets a
    node that lacks it, such as a replica promoted since the script was last loaded."""

    def __call__(self, keys=None, args=None, client=None):
        if isinstance(client, ClusterPipeline):
            keys = list(keys or [])
            return client.execute_command("EVAL", self.script, len(keys), *keys, *(args or []))
        return super().__call__(keys, args, client)


class Scripts:
    """The project's scripts registered on one client; ``scripts.commit(keys, args)``.
    ``once_client`` (a client without retries) runs :data:`ONCE_SCRIPTS`."""

    def __init__(self, client: redis.Redis, once_client: redis.Redis | None = None):
        self.client = client
        for name in SCRIPT_NAMES:
            target = once_client if once_client is not None and name in ONCE_SCRIPTS else client
            setattr(self, name, ClusterSafeScript(target, script_source(name)))

    def queue(self, pipe, name: str, keys: list, args: list) -> None:
        """Queue a script call on a pipeline by its SHA. (redis-py would first ask Redis
        whether the script exists, a round trip per pipeline.) If Redis has lost it, the
        pipeline fails with NoScriptError: :meth:`load_all` and run the pipeline again.

        Sent as a raw command: a cluster pipeline refuses ``pipe.evalsha`` by name but
        routes a raw EVALSHA by its keys, like any other command."""
        pipe.execute_command("EVALSHA", getattr(self, name).sha, len(keys), *keys, *args)

    def load_all(self) -> None:
        """Load every script (on a cluster, on every master)."""
        for name in SCRIPT_NAMES:
            self.client.script_load(getattr(self, name).script)

"""Load the Lua scripts shipped in ``lua/`` once per process and call them by name.

redis-py's ``Script`` runs them with EVALSHA and reloads on NOSCRIPT, so a restarted or
failed-over Redis needs nothing from us. Each script's header lists its KEYS and ARGV.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import redis

SCRIPT_NAMES = ("claim", "reclaim", "fail", "move", "commit", "finish", "start", "preempt", "unnominate", "fields", "node_put", "node_set", "node_rm")


@cache
def script_source(name: str) -> str:
    """The script as sent to Redis: the shared helpers of ``_lib.lua``, then the script."""
    folder = files("lua")
    return folder.joinpath("_lib.lua").read_text(encoding="utf-8") + folder.joinpath(f"{name}.lua").read_text(
        encoding="utf-8")


class Scripts:
    """The project's scripts registered on one client; ``scripts.commit(keys, args)``."""

    def __init__(self, client: redis.Redis):
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(script_source(name)))

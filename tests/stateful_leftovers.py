"""What is left in Redis of removed jobs, tasks and nodes, found by reading every key of the
namespace, not through the key registry (``scheduler/state/keys.py``), so that a key a
feature forgot to register is found too.

A removed thing is left when a key is named after it (``job:<id>``, ``task:<job>.<n>``,
``tally:job:<id>``, ``node:<name>:tasks``...), or when a set, sorted set or hash holds it
as a member or field (``jobs``, ``q:active``, ``nom:<task>`` in a node...). Apart: the
event stream and the histories (lists), which tell of removed things by design, and so
does ``faults:<job>``, the job's recent failures by node and task (trimmed to its window
at the job's next failure, removed with the job);
``nodes:changes`` and ``nodes:deltas``, the change feed, which keeps the names it carries
until it is trimmed; ``nodes:noexecute``, which the evictions clear of removed nodes at
their next look; and a budget's disrupted set, ``budget:<job>:disrupted``, which the
budget's next count clears of the tasks that ended (the job's own keys go with it)."""

from __future__ import annotations

import re

_SPLIT = re.compile(r"[:|,]")
LAGGING = ("nodes:changes", "nodes:deltas", "nodes:noexecute")


def _names(text: str, jobs: set[str], tasks: set[str], nodes: set[str]) -> list[str]:
    out = []
    for part in _SPLIT.split(text):
        if part in jobs or part in tasks:
            out.append(part)
        elif part in nodes:
            out.append(part)
        else:
            job, dot, index = part.rpartition(".")
            if dot and index.isdigit() and job in jobs:
                out.append(part)
    return out


def typed_keys(app) -> tuple[list[str], list[str]]:
    """Every key of the namespace, sorted, and each one's type."""
    client = app.client
    keys = sorted(client.scan_iter(match=f"{app.keys.prefix}*", count=1000))
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        return keys, pipe.execute()


def leftovers(app, jobs: set[str], tasks: set[str], nodes: set[str]) -> list[str]:
    """One line per key named after, or holding, a removed job, task or node."""
    if not (jobs or tasks or nodes):
        return []
    client, prefix = app.client, app.keys.prefix
    keys, types = typed_keys(app)
    found = []
    readers = {"set": "smembers", "zset": "zrange", "hash": "hkeys"}
    collections = []
    for key, kind in zip(keys, types):
        name = key[len(prefix):]
        named = _names(name, jobs, tasks, nodes)
        if named:
            found.append(f"{name} is left of removed {named[0]}")
            continue
        if kind in readers and name not in LAGGING and not name.startswith(("task:", "faults:")) \
                and not name.endswith(":disrupted"):
            collections.append((name, kind))
    with client.pipeline(transaction=False) as pipe:
        for name, kind in collections:
            if kind == "zset":
                pipe.zrange(prefix + name, 0, -1)
            else:
                getattr(pipe, readers[kind])(prefix + name)
        contents = pipe.execute()
    for (name, _), members in zip(collections, contents):
        for member in members:
            named = _names(member, jobs, tasks, nodes)
            if named:
                found.append(f"{name} holds {member!r} of removed {named[0]}")
    return found

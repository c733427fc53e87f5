"""sched: a Redis-backed distributed cluster scheduler.

The Python API is :class:`Client` (see ``docs/python-api.md``)::

    from scheduler import Client
    sched = Client()  # the embedded Redis; or Client("redis://host:6379/0", namespace="prod")

The package is layered (``docs/architecture.md``): ``model`` (the nouns), ``engine``
(placement, pure), ``state`` (Redis), ``control`` (lifecycle), ``client`` (this API) and
``tools`` (CLI, benchmark, demo). The long-running processes live in ``workers``.
"""

from __future__ import annotations

from scheduler import native  # noqa: F401  decides, before any of them is imported, whether the hot path runs compiled

__all__ = ["Client", "WaitTimeout", "SchedError", "SpecError", "NotFound", "RedisUnavailable", "Task", "Node",
           "JobSpec"]


def __getattr__(name: str):
    # Imported on first use, so that `import scheduler.model` does not load the whole stack.
    if name in ("Client", "WaitTimeout"):
        from scheduler import client

        return getattr(client, name)
    if name in __all__:
        from scheduler import model

        return getattr(model, name)
    raise AttributeError(f"module 'scheduler' has no attribute {name!r}")

"""Shell completion of the ids a command takes, read from Redis: job ids, node names and
task ids (click's own completion: ``eval "$(_SCHED_COMPLETE=bash_source sched)"``, see
the README).

Completing a word must never cost more than a glance: no embedded server is started (one
that is not running has nothing to offer), the client waits out no failover, and any
error offers nothing rather than a traceback in the middle of a command line."""

from __future__ import annotations

from click.shell_completion import CompletionItem

from scheduler.client import Client
from scheduler.state.app import App, default_namespace
from scheduler.state.connection import client_for, resolve_url
from scheduler.state.embedded import embedded_status

MOST = 500  # words offered at most (a namespace may hold far more tasks)
JOBS_OF_TASKS = 20  # jobs whose tasks are listed when completing a task id without a dot yet


def _client(ctx) -> Client | None:
    """A client of the namespace the command line names, or None without a Redis."""
    root = ctx.find_root()
    url = resolve_url(root.params.get("redis_url"))
    if url is None:
        status = embedded_status()
        if not status["running"]:
            return None
        url = status["url"]
    namespace = root.params.get("namespace") or default_namespace()
    return Client(app=App(client=client_for(url, wait_s=0), namespace=namespace))


def _offered(read):
    def complete(ctx, param, incomplete: str) -> list[CompletionItem]:
        try:
            client = _client(ctx)
            if client is None:
                return []
            with client:
                words = read(client.store, incomplete)
        except Exception:  # noqa: BLE001 - a failed completion offers nothing
            return []
        return [CompletionItem(word) for word in sorted(w for w in words if w.startswith(incomplete))[:MOST]]

    return complete


def _task_ids(store, incomplete: str) -> list[str]:
    job, dot, _ = incomplete.rpartition(".")
    if dot:
        return store.job_task_ids(job)
    jobs = [j for j in store.job_ids() if j.startswith(incomplete)][:JOBS_OF_TASKS]
    return [task for j in jobs for task in store.job_task_ids(j)]


def _launchers(kind: str):
    """Jobs with a ``kind`` block: those ``job launch`` (periodic) or ``job dispatch``
    (parameterized) take. Only the ids that match what is typed are read, MOST at most."""
    def read(store, incomplete: str) -> list[str]:
        return store.launcher_ids([j for j in store.job_ids() if j.startswith(incomplete)][:MOST], kind)
    return read


job_ids = _offered(lambda store, incomplete: store.job_ids())
periodic_job_ids = _offered(_launchers("periodic"))
parameterized_job_ids = _offered(_launchers("parameterized"))
node_names = _offered(lambda store, incomplete: store.node_names())
task_ids = _offered(_task_ids)

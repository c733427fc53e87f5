"""``NoExecute`` taints: running tasks that do not tolerate them are stopped and replaced
elsewhere (kube's taint manager), those tolerating them for ``toleration_seconds`` once
that long has passed since they met the taint: since they were placed on the node, or
since the taint was added if they were there first. So a replacement that can only go
back to the node (the placer ranks it after any other that fits) stays there its
``toleration_seconds`` again: at most one placement there per that many seconds.

Every worker's upkeep runs :func:`enforce` about once a second; it reads only the nodes
listed in ``nodes:noexecute`` (kept by the scripts that write a node's taints), and
converges on state: a task it finds due is ended through the same step as a drain's
(``reconcile.replace``), which refuses to end one twice, so any number of workers may
run it at once.
"""

from __future__ import annotations

from collections import defaultdict

from scheduler.control import reconcile
from scheduler.model import STOPPED
from scheduler.model.errors import NotFound
from scheduler.model.taints import NO_EXECUTE, eviction
from scheduler.state.store import Store


def enforce(store: Store) -> list[str]:
    """Evict what is due on the nodes with NoExecute taints; returns the ids of the tasks
    it ended."""
    names = store.noexecute_nodes()
    if not names:
        return []
    now = store.clock_ms()
    nodes = {node.name: node for node in store.nodes(names)}
    untainted = [name for name in names if name not in nodes
                 or not any(t.effect == NO_EXECUTE for t in nodes[name].taints)]
    store.forget_noexecute(untainted)
    specs: dict[tuple[str, int], object] = {}
    due: dict[str, list] = defaultdict(list)  # message -> tasks
    for name, node in nodes.items():
        if name in untainted:
            continue
        for task in store.tasks(store.node_task_ids(name)):
            if not task.live:
                continue
            key = (task.job, task.version)
            if key not in specs:
                try:
                    specs[key] = store.job_spec(task.job, task.version)
                except NotFound:
                    specs[key] = None
            spec = specs[key]
            found = eviction(node.taints, spec.tolerations if spec is not None else (), task.assigned_ms)
            if found is not None and found[0] <= now:
                due[f"evicted from node {name} by its taint {found[1]}"].append(task)
    ended: list[str] = []
    for message, tasks in due.items():
        stopped, _ = reconcile.replace_tasks(store, tasks, STOPPED, message)
        store.note_disruptions([task for task in tasks if task.id in set(stopped)])  # not held back, but counted
        ended += [task.id for task in tasks]
    return ended

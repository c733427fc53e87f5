"""Workers: running scheduler workers from this process."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control.processes import process
from scheduler.control.worker_config import WorkerConfig
from scheduler.state import acl, layout
from scheduler.state.keys import Keys


class WorkerClient(ClientBase):
    """Run scheduler workers here."""

    def run_workers(self, concurrency: int = 1, until_idle: bool = False, config: WorkerConfig | None = None,
                    namespaces: list[str] | None = None) -> dict:
        """Run scheduler workers against this namespace (in this process, or
        ``concurrency`` child processes) until they are stopped, or with ``until_idle``,
        until nothing is left that could be scheduled. Returns their summed counts.
        ``namespaces`` serves those cells instead, in turn (``[]``: every registered one,
        followed as new ones appear)."""
        config = config or WorkerConfig(until_idle=until_idle)
        self.app.url  # start the embedded server if there is no URL; a real one is waited for by each worker
        target = self.namespace if namespaces is None else list(namespaces)
        for namespace in [target] if isinstance(target, str) else target:
            self._check_access(namespace)
            layout.check_before_serving(self.app.url, Keys(namespace))  # another key layout: one sentence now
        return process("run-workers")(self.app.url, target, concurrency, config)

    def _check_access(self, namespace: str) -> None:
        """A user whose role does not allow a worker in ``namespace`` hears so before the
        workers start (a NOPERM is not waited out like a Redis that is away)."""
        acl.check_access(self.app.url, Keys(namespace))

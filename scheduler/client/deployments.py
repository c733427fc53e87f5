"""Deployments: a job's rolling updates, read and steered (promote, pause, resume, fail)."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.control import deployer


class DeploymentClient(ClientBase):
    """List deployments and promote, pause, resume or fail one."""

    def deployments(self, job: str | None = None, limit: int = 100) -> list[dict]:
        """Deployments, newest first (the job's, or every job's), each with its ``state``."""
        return self.store.deployments(job, limit)

    def deployment(self, deployment_id: str) -> dict:
        """One deployment: versions from and to, state, message, counts per version."""
        return self.store.get_deployment(deployment_id)

    def promote(self, deployment_id: str) -> dict:
        """Let a deployment waiting with its canary tasks roll the rest."""
        return self._record_deployment("promote", deployer.promote(self.store, deployment_id))

    def pause_deployment(self, deployment_id: str) -> dict:
        return self._record_deployment("deployment-pause", deployer.pause(self.store, deployment_id))

    def resume_deployment(self, deployment_id: str) -> dict:
        return self._record_deployment("deployment-resume", deployer.resume(self.store, deployment_id))

    def fail_deployment(self, deployment_id: str) -> dict:
        """End a deployment as failed now (with ``auto_revert``, the job goes back)."""
        return self._record_deployment("deployment-fail", deployer.fail_now(self.store, deployment_id))

    def _record_deployment(self, action: str, deployment: dict) -> dict:
        self._record(action, job=deployment["job"], deployment=deployment["id"], state=deployment["state"])
        return deployment

"""What placement rules read beside the nodes: the jobs' labels and required
anti-affinity (``jobs:labels``, ``jobs:anti``, with their generation ``rules:gen``,
written by ``lua/job_rules.lua`` when a job is submitted), and the tasks of counted
jobs per topology domain (``tally:dom:<job>``, kept by ``lua/commit.lua`` and
``release`` in ``lua/_lib.lua``)."""

from __future__ import annotations

import orjson

from scheduler.model import JobSpec
from scheduler.model.job_affinity import JobAffinity, parse_job_affinity
from scheduler.state.namespace import NamespaceStore


def labels_value(spec: JobSpec) -> str:
    return orjson.dumps(spec.labels, option=orjson.OPT_SORT_KEYS).decode() if spec.labels else ""


def anti_value(spec: JobSpec) -> str:
    required = [t.raw() for t in spec.job_anti_affinity if t.required]
    return orjson.dumps(required).decode() if required else ""


class RuleStore(NamespaceStore):
    def index_job_rules(self, spec: JobSpec, client=None):
        """Record the job's labels and required anti-affinity (or that it has none),
        bumping ``rules:gen`` if that changed. ``client`` may be a pipeline."""
        return self._job_rules(spec.id, labels_value(spec), anti_value(spec), client)

    def index_many_job_rules(self, specs: list[JobSpec]) -> None:
        """:meth:`index_job_rules` for many jobs, in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for spec in specs:
                self.index_job_rules(spec, client=pipe)
            pipe.execute()

    def forget_job_rules(self, job_id: str) -> None:
        """The job no longer exists: what it recorded goes."""
        self._job_rules(job_id, "", "")

    def _job_rules(self, job_id: str, labels: str, anti: str, client=None):
        k = self.keys
        return self.scripts.job_rules(keys=[k.job_labels, k.job_anti, k.rules_gen], args=[job_id, labels, anti],
                                      client=client)

    def rule_epochs(self) -> tuple[str, str]:
        """(``nodes:epoch``, ``rules:gen``) as the commit compares them, read first in a
        round, before the nodes are refreshed, so the copy is never older than them."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.node_epoch)
            pipe.get(self.keys.rules_gen)
            epoch, gen = pipe.execute()
        return epoch or "", gen or ""

    def rule_index(self) -> tuple[str, dict[str, dict[str, str]], dict[str, tuple[JobAffinity, ...]]]:
        """(rules:gen, job -> labels, job -> its required anti-affinity entries), the
        generation read first: the rest is at least as new as it."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(k.rules_gen)
            pipe.hgetall(k.job_labels)
            pipe.hgetall(k.job_anti)
            gen, labels, anti = pipe.execute()
        return (gen or "", {job: orjson.loads(text) for job, text in labels.items()},
                {job: parse_job_affinity(orjson.loads(text), job, "job_anti_affinity") for job, text in anti.items()})

    def queue_domain_counts(self, pipe, job_ids: list[str]) -> None:
        """Queue ``HGETALL tally:dom:<job>`` for each job (read with :meth:`read_domain_counts`)."""
        for job_id in job_ids:
            pipe.hgetall(self.keys.tally_dom(job_id))

    @staticmethod
    def read_domain_counts(job_ids: list[str], replies: list) -> dict[str, dict[str, int]]:
        return {job_id: {field: int(n) for field, n in fields.items()} for job_id, fields in zip(job_ids, replies)}

    def domain_counts(self, job_ids: list[str]) -> dict[str, dict[str, int]]:
        with self.client.pipeline(transaction=False) as pipe:
            self.queue_domain_counts(pipe, job_ids)
            return self.read_domain_counts(job_ids, pipe.execute())

"""What placing a job with domain rules or labels reads, and how its rules are resolved:
for a worker (:class:`RuleView`, kept across its rounds) and for a one-off look
(:func:`rules_now`: ``sched job plan``, the dashboard, preemption).

Only batches holding such jobs pay for it. Each round of such a batch first reads
``nodes:epoch`` and ``rules:gen`` (before the nodes are refreshed, so that the copy is at
least as new as what the commit will compare), and the index of job labels and required
anti-affinity when ``rules:gen`` moved; the refresh then also reads ``tally:dom`` of
every job the rules count. Each group's rules are resolved against that
(:func:`scheduler.engine.rules.resolve`, its spreads' eligible domains from the nodes in
view) and travel with its placements to the commit, which refuses them if labels, rules
or nodes changed meanwhile.
"""

from __future__ import annotations

from scheduler.engine.domains import DomainCounts
from scheduler.engine.filters import filter_pipeline
from scheduler.engine.placement import Placer
from scheduler.engine.rules import RuleIndex, resolve
from scheduler.model import JobSpec, Node
from scheduler.model.placement_rules import Rules
from scheduler.state.store import Store


class RuleView:
    def __init__(self, store: Store):
        self.store = store
        self.index = RuleIndex(gen="-")  # nothing read yet
        self.epoch = ""
        self.counts = DomainCounts()

    def begin(self, specs: list[JobSpec]) -> list[str]:
        """Read the epoch and generation (and the index, if it moved) for a round placing
        ``specs``; returns the jobs whose domain counts the refresh should read (none when
        no spec has rules)."""
        ruled = [spec for spec in specs if spec.rules]
        if not ruled:
            self.counts = DomainCounts()
            return []
        self.epoch, gen = self.store.rule_epochs()
        if gen != self.index.gen:
            read, labels, anti = self.store.rule_index()
            self.index = RuleIndex(read, labels, anti)
        jobs: set[str] = set()
        for spec in ruled:
            rules = resolve(spec, self.index)
            if rules is not None:
                jobs |= rules.jobs()
        return sorted(jobs)

    def read(self, counts: dict[str, dict[str, int]]) -> None:
        """The domain counts the refresh read (job -> field -> tasks)."""
        self.counts = DomainCounts(counts)

    def rules(self, spec: JobSpec, everywhere: list[Node], placer: Placer | None = None) -> Rules | None:
        """The spec's rules for this round, its spreads' eligible domains taken from every
        node in view (through the placer's node table, if given)."""
        if not spec.rules:
            return None
        if placer is not None:
            return resolve(spec, self.index, lambda attribute: placer.eligible_domains(everywhere, spec, attribute),
                           self.epoch)
        return resolve(spec, self.index, lambda attribute: eligible_domains(everywhere, spec, attribute), self.epoch)


def eligible_domains(nodes: list[Node], spec: JobSpec, attribute: str) -> list[str]:
    """The values of ``attribute`` on the nodes that pass the job's constraints, platform
    and plugins (what :meth:`Placer.eligible_domains` finds, node by node)."""
    from scheduler.model.constraints import attribute_getter

    check, get = filter_pipeline(spec, taints=False).static_check, attribute_getter(attribute)
    return sorted({get(node) for node in nodes if check(node) is None} - {""})


def rules_now(store: Store, spec: JobSpec, nodes: list[Node]) -> tuple[Rules | None, DomainCounts]:
    """The spec's rules against the nodes given and the counts in Redis now (a dry run:
    the commit is not asked)."""
    view = RuleView(store)
    jobs = view.begin([spec])
    if jobs:
        view.read(store.domain_counts(jobs))
    return view.rules(spec, nodes), view.counts

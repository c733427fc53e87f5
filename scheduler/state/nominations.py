"""Nominations: room a node holds for a preemptor (``nom:<task>`` in the node hash),
and the scripts that make them by ending victims (``preempt``, ``preempt_gang``) or
release them (``unnominate``).
"""

from __future__ import annotations

from scheduler.model import JobSpec, Nomination, parse_allocation
from scheduler.state.namespace import NamespaceStore


def reservation(job: JobSpec) -> str:
    """What a nomination holds for a preemptor of ``job``: ``priority|job|cpu=500,...|8080,...``."""
    alloc = ",".join(f"{name}={amount}" for name, amount in job.resources.items() if amount > 0)
    return f"{job.priority}|{job.id}|{alloc}|{','.join(str(p) for p in job.ports)}"


def nomination_value(held: str, expires_ms: int) -> str:
    """A node hash's ``nom:<task>`` value (preempt.lua writes it, commit.lua reads it):
    the reservation with its expiry after the priority."""
    priority, rest = held.split("|", 1)
    return f"{priority}|{expires_ms}|{rest}"


def parse_nomination(task_id: str, value: str) -> Nomination:
    priority, expires, job, alloc, ports = value.split("|")
    return Nomination(task_id=task_id, job=job, priority=int(priority), expires_ms=int(expires),
                      resources=parse_allocation(alloc), ports=tuple(int(p) for p in filter(None, ports.split(","))))


class NominationStore(NamespaceStore):
    def preempt(self, token: str, task_id: str, node: str, nomination_ms: int, held: str,
                victims: list[tuple[str, str, dict[str, int]]]) -> str:
        """``preempt.lua``: end ``victims`` (task id, job, resources) on ``node`` as
        preempted and send the claimed ``task_id`` back to the active queue nominated to
        the node, with ``held`` (:func:`reservation`) held for it for ``nomination_ms``.
        Returns "ok" or why not."""
        k = self.keys
        return self.scripts.preempt(
            keys=[k.inflight, k.leases, k.active, k.node_changes, k.node_seq, k.task(task_id),
                  k.node(node), k.node_tasks(node), k.tally_priority, k.stream, k.config,
                  *(key for victim, job, _ in victims for key in (k.task(victim), k.tally_job(job), k.tally_dom(job))),
                  k.usage, k.ended],
            args=[token, self.events_arg, task_id, node, nomination_ms, held, *(victim for victim, _, _ in victims),
                  self.scripts.now_arg()])

    def preempt_gang(self, token: str, gang: str, members: list[tuple[str, str]], nomination_ms: int, held: str,
                     victims: list[tuple[str, str, str, dict[str, int]]]) -> str:
        """``preempt_gang.lua``: all or nothing, end ``victims`` (task id, job, node,
        resources) as preempted and send every claimed member (task id, node) of the gang
        ``gang`` back to the active queue nominated to its node, with ``held``
        (:func:`reservation`) held for each for ``nomination_ms``. Returns "ok" or why not
        (then nothing was changed)."""
        k = self.keys
        return self.scripts.preempt_gang(
            keys=[k.inflight, k.leases, k.active, k.node_changes, k.node_seq, k.tally_priority, k.usage, k.stream,
                  k.config, *(key for task_id, node in members for key in (k.task(task_id), k.node(node), k.node_tasks(node))),
                  *(key for victim, job, _, _ in victims
                    for key in (k.task(victim), k.tally_job(job), k.tally_dom(job))), k.ended],
            args=[token, self.events_arg, nomination_ms, held, gang, len(members),
                  *(x for member in members for x in member), *(x for v, _, node, _ in victims for x in (v, node)),
                  self.scripts.now_arg()])

    def unnominate(self, task_id: str, node: str) -> bool:
        """Release the room ``node`` holds for ``task_id`` (placed or nominated elsewhere)."""
        k = self.keys
        return bool(self.scripts.unnominate(keys=[k.node(node), k.node_changes, k.node_seq, k.task(task_id)],
                                            args=[task_id, node]))

"""A node's two states in words: its **status** (``ready`` or ``down``), which the
scheduler observes from its agent's heartbeat, and its **availability** (``active``,
``pause``, ``drain``), which people set. A node takes new tasks only when it is both
ready and active; the card says which of the two stands in the way, and what happens to
the tasks it holds."""

from __future__ import annotations

from scheduler.model import ACTIVE, DOWN, DRAIN, PAUSE, Node

STATUS_NOTE = {
    "ready": "status ready: its agent reports in (or it has none: a node added with sched node add)",
    "down": "status down: its agent stopped reporting; set by the scheduler, and ready again at its next heartbeat",
}
AVAILABILITY_NOTE = {
    ACTIVE: "availability active: people let it take tasks (sched node pause / drain / activate)",
    PAUSE: "availability pause: people stopped new tasks here; its tasks run on (sched node activate)",
    DRAIN: "availability drain: people moved its tasks elsewhere and stopped new ones (sched node activate)",
}


def meaning(node: Node) -> str:
    """What the two states mean together, in one short sentence."""
    if node.status == DOWN:
        back = "" if node.availability == ACTIVE else f", and is set to {node.availability} besides"
        return f"takes no tasks: down, its agent stopped reporting (its tasks were lost and replaced){back}"
    if node.availability == PAUSE:
        return "takes no new tasks: paused by people; its tasks run on"
    if node.availability == DRAIN:
        return "takes no new tasks: drained by people; its tasks were moved elsewhere"
    return "takes new tasks: ready and active"

"""Which pool to grow when several could place pending tasks: the cluster-autoscaler's
expanders (``cluster-autoscaler/expander/``), over options that the real engine proved.

An :class:`Option` is one pool and how many new nodes of it, with what the pending tasks
placed on them ask for. Expanders narrow the options to the best ones; a chain
(``least-waste,price``, as ``--expander=priority,least-waste`` chains them in the
autoscaler) hands each one's best to the next, and what ties at the end is settled by
fewer nodes, then the pool's name (the autoscaler picks at random; an answer that does
not change between two runs on the same state is what scripts and cooldowns need).

- ``least-waste``: the least idle cpu and memory left on the new nodes: the share of
  their cpu no placed task asks for, plus the same of memory (the autoscaler's
  ``waste`` expander, ``wastedCPU + wastedMemory``).
- ``price``: the lowest cost per pending task placed (the nodes' cost over the tasks they
  take: the autoscaler's ``price`` expander weighs node price against the pods it helps).
- ``priority``: the pool of the highest ``priority`` (the autoscaler's ``priority``
  expander, whose priorities are the pools' own here rather than a ConfigMap of regexes).
- ``most-tasks``: the option that places the most pending tasks (``most-pods``).

Pure: no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Callable, Sequence

from scheduler.model.errors import SpecError
from scheduler.model.quantities import CPU, MEMORY

DEFAULT = "least-waste"


@dataclass(frozen=True)
class Option:
    pool: str
    nodes: int  # new nodes of the pool
    tasks: int  # pending tasks placed thanks to them
    capacity: dict[str, int] = field(default_factory=dict)  # the new nodes' capacity, summed
    requested: dict[str, int] = field(default_factory=dict)  # what the tasks on the new nodes ask, summed
    cost: float = 0.0  # the new nodes' cost
    priority: int = 0  # the pool's priority


def waste(option: Option) -> float:
    """Idle cpu share plus idle memory share of the option's new nodes (0 to 2)."""
    total = 0.0
    for resource in (CPU, MEMORY):
        available = option.capacity.get(resource, 0)
        if available > 0:
            total += (available - option.requested.get(resource, 0)) / available
    return total


def cost_per_task(option: Option) -> float:
    return option.cost / option.tasks if option.tasks else float("inf")


def _best(options: Sequence[Option], score: Callable[[Option], float]) -> list[Option]:
    if not options:
        return []
    best = min(score(o) for o in options)
    return [o for o in options if abs(score(o) - best) <= 1e-9 * max(1.0, abs(best))]


EXPANDERS: dict[str, Callable[[Sequence[Option]], list[Option]]] = {
    "least-waste": lambda options: _best(options, waste),
    "price": lambda options: _best(options, cost_per_task),
    "priority": lambda options: _best(options, lambda o: -o.priority),
    "most-tasks": lambda options: _best(options, lambda o: -o.tasks),
}


def parse_chain(text: str | Sequence[str] | None) -> list[str]:
    """``least-waste`` or ``priority,least-waste`` -> the names, checked (one sentence,
    with a did-you-mean, for a name that is not an expander)."""
    if text is None:
        return [DEFAULT]
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise SpecError(f"--expander needs a name: one of {', '.join(EXPANDERS)}.")
    for name in names:
        if name not in EXPANDERS:
            close = get_close_matches(name, list(EXPANDERS) + ["cheapest", "most-pods", "waste"], n=1)
            alias = {"cheapest": "price", "most-pods": "most-tasks", "waste": "least-waste"}
            hint = f" (did you mean {alias.get(close[0], close[0])!r}?)" if close else ""
            raise SpecError(f"expander {name!r} is not one of {', '.join(EXPANDERS)}{hint}.")
    return names


def choose(options: Sequence[Option], chain: Sequence[str] = (DEFAULT,)) -> Option | None:
    """The option the chain of expanders picks; None when there is none."""
    left = [o for o in options if o.tasks > 0 and o.nodes > 0]
    for name in chain:
        if len(left) <= 1:
            break
        left = EXPANDERS[name](left)
    return min(left, key=lambda o: (o.nodes, o.pool)) if left else None

"""``disconnect``: what a job's runs do while their node's agent cannot renew its heartbeat.

An agent that has not renewed its heartbeat for a while cannot tell a Redis that stalled,
restarts or fails over (everyone waits; no node is declared down meanwhile) from a node
cut off from it (the scheduler may declare the node down and start replacements
elsewhere). So from one heartbeat TTL without a renewed heartbeat (the *fence*), each run
does what its job chose, in the manner of Nomad's ``disconnect`` block:

- ``on_loss: freeze`` (the default): its process groups are paused (SIGSTOP). A paused
  command cannot act beside a replacement, and loses nothing: when the agent reaches Redis
  again, a task still this node's is resumed (SIGCONT) and finishes as if nothing had
  happened, and a task declared lost is killed. A frozen service does not answer while
  frozen.
- ``on_loss: stop``: the run is stopped (killed) at the fence and its task ends ``lost``.
- ``on_loss: run``: it runs on, as Nomad's clients do; if its node is declared down
  meanwhile, it runs beside its replacement until its agent is back and kills it.

``stop_after: <seconds> | never`` (Nomad's ``stop_on_client_after``) stops the run once
its agent has gone that long without a renewed heartbeat, whatever ``on_loss`` says until
then: by default never for ``freeze`` and ``run``, one TTL for ``stop``. A spec that names
only ``stop_after`` (written before ``on_loss`` existed) keeps its meaning: it runs on
until then (``on_loss: run``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.model.errors import SpecError

FREEZE, STOP, RUN = "freeze", "stop", "run"
ON_LOSS = (FREEZE, STOP, RUN)
MAX_STOP_AFTER_S = 86_400
NEVER = "never"


@dataclass(frozen=True, slots=True)
class Disconnect:
    """A job's choice; ``stop_after`` is seconds, ``math.inf`` for never, or None for the
    default of ``on_loss``."""

    on_loss: str = FREEZE
    stop_after: float | None = None

    def stop_limit(self, ttl_s: float) -> float:
        """Seconds without a renewed heartbeat after which the run is stopped."""
        if self.stop_after is not None:
            return self.stop_after
        return ttl_s if self.on_loss == STOP else math.inf

    def action(self, since_s: float | None, ttl_s: float | None) -> str:
        """What a run should be doing when its agent last renewed its heartbeat ``since_s``
        seconds ago and the heartbeat's TTL is ``ttl_s`` (None when unknown: run):
        ``RUN``, ``FREEZE`` or ``STOP``."""
        if since_s is None or ttl_s is None:
            return RUN
        if since_s > self.stop_limit(ttl_s):
            return STOP
        if self.on_loss == FREEZE and since_s > ttl_s:
            return FREEZE
        return RUN


DEFAULT = Disconnect()


def parse_disconnect(raw, job: str) -> Disconnect:
    """``disconnect: {on_loss: freeze|stop|run, stop_after: <seconds> | never}``, both optional."""
    if raw is None:
        return DEFAULT
    wrong = f"job {job}: disconnect must be {{on_loss: freeze | stop | run, stop_after: <seconds> | never}}"
    if not isinstance(raw, dict) or not raw or set(raw) - {"on_loss", "stop_after"}:
        raise SpecError(f"{wrong}.")
    on_loss = raw.get("on_loss", RUN if "stop_after" in raw else FREEZE)
    if on_loss not in ON_LOSS:
        raise SpecError(f"{wrong}; on_loss {on_loss!r} is not one of {', '.join(ON_LOSS)}.")
    if "stop_after" not in raw:
        return Disconnect(on_loss)
    value = raw["stop_after"]
    if value == NEVER:
        if on_loss == STOP:
            raise SpecError(f"job {job}: disconnect has on_loss: stop with stop_after: never; a run that is never "
                            f"stopped is on_loss: run.")
        return Disconnect(on_loss, math.inf)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_STOP_AFTER_S:
        raise SpecError(f"{wrong}, with a number of seconds above 0 and at most {MAX_STOP_AFTER_S}, "
                        f"not {value!r}.")
    return Disconnect(on_loss, float(value))


def disconnect_raw(disconnect: Disconnect) -> dict | None:
    """The normalised form kept in the job's stored spec; None for the default. ``on_loss``
    is left out where the rest implies it, so a spec written with only ``stop_after`` is
    stored as it always was."""
    if disconnect == DEFAULT:
        return None
    raw: dict = {}
    implied = RUN if disconnect.stop_after is not None else FREEZE
    if disconnect.on_loss != implied:
        raw["on_loss"] = disconnect.on_loss
    if disconnect.stop_after is not None:
        raw["stop_after"] = NEVER if disconnect.stop_after == math.inf else disconnect.stop_after
    return raw

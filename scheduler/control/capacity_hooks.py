"""Acting on a capacity answer: a command (``--exec CMD``, the decision as JSON on its
standard input) or a webhook (``--webhook URL``, the decision POSTed as JSON), held back
by the cluster-autoscaler's cooldowns, and each answer recorded with its events.

What a hook is asked to do, one decision per answer:

- **scale-up** when the answer adds nodes, unless a scale-up was acted on less than
  ``scale_up_cooldown_s`` ago (the nodes asked for last time may still be joining).
- **scale-down** otherwise, for the removable nodes that have been unneeded for
  ``unneeded_s`` (the autoscaler's ``--scale-down-unneeded-time``, counted across runs:
  the time each node was first found removable is kept in Redis), unless a scale-up was
  acted on less than ``delay_after_add_s`` ago (``--scale-down-delay-after-add``) or a
  scale-down less than ``scale_down_cooldown_s`` ago (``--scale-down-delay-after-delete``).
  The autoscaler does not scale down while it scales up; neither does this.

A hook acted when the command exited 0 or the webhook answered 2xx; only then does its
cooldown start. A hook that failed is tried again at the next answer. Every answer is
recorded (``state/capacity.py``: the dashboard shows the last) with a ``capacity`` event
when its decision changed or a hook was called (docs/events.md).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import orjson

from scheduler.control.capacity import CapacityOptions, answer, digest

HOOK_TIMEOUT_S = 60.0
OUTPUT_KEPT = 400  # characters of a failed hook's output kept in its event


@dataclass
class Cooldowns:
    """The autoscaler's delays, in seconds (its defaults, but for the scale-up's own,
    which it has not: a minute for nodes to join)."""

    scale_up_cooldown_s: float = 60.0
    delay_after_add_s: float = 600.0
    scale_down_cooldown_s: float = 60.0
    unneeded_s: float = 600.0


@dataclass
class Hook:
    exec_cmd: str | None = None
    webhook: str | None = None
    timeout_s: float = HOOK_TIMEOUT_S

    @property
    def given(self) -> bool:
        return bool(self.exec_cmd or self.webhook)


def unneeded_since(result: dict, before: dict[str, int], now_ms: int) -> dict[str, int]:
    """Node -> since when it has been removable: kept for nodes still removable, now for
    the newly removable, dropped for the others."""
    removable = [r["node"] for r in (result.get("scale_down") or {}).get("remove", [])]
    return {name: int(before.get(name, now_ms)) for name in removable}


def decide(result: dict, record, since: dict[str, int], now_ms: int, cooldowns: Cooldowns) -> dict:
    """``{action: "scale-up"|"scale-down"|None, scale_up, scale_down, waiting}``: what a hook
    is asked to do now, and what waits (and for how long, in seconds)."""
    up = (result.get("scale_up") or {}).get("add", [])
    down = (result.get("scale_down") or {}).get("remove", [])
    out: dict = {"action": None, "scale_up": [], "scale_down": [], "waiting": []}
    if up:
        left = record.up_at_ms / 1000 + cooldowns.scale_up_cooldown_s - now_ms / 1000
        if record.up_at_ms and left > 0:
            out["waiting"].append({"action": "scale-up", "for_s": round(left, 1), "why": "scale-up cooldown"})
        else:
            out.update(action="scale-up", scale_up=[{k: a[k] for k in ("pool", "nodes", "tasks", "cost")} for a in up])
        if down:
            out["waiting"].append({"action": "scale-down", "for_s": None, "why": "no scale-down while scaling up"})
        return out
    if not down:
        return out
    ready = [r for r in down if now_ms - since.get(r["node"], now_ms) >= cooldowns.unneeded_s * 1000]
    gates = [(record.up_at_ms, cooldowns.delay_after_add_s, "scale-down delay after a scale-up"),
             (record.down_at_ms, cooldowns.scale_down_cooldown_s, "scale-down cooldown")]
    for at_ms, delay_s, why in gates:
        left = at_ms / 1000 + delay_s - now_ms / 1000
        if at_ms and left > 0:
            out["waiting"].append({"action": "scale-down", "for_s": round(left, 1), "why": why})
            return out
    if len(ready) < len(down):
        first = min(since.get(r["node"], now_ms) for r in down if r not in ready)
        out["waiting"].append({"action": "scale-down", "nodes": len(down) - len(ready),
                               "for_s": round(first / 1000 + cooldowns.unneeded_s - now_ms / 1000, 1),
                               "why": "nodes not unneeded for long enough yet"})
    if ready:
        out.update(action="scale-down", scale_down=[{k: r[k] for k in ("node", "pool", "cost", "tasks")}
                                                    for r in ready])
    return out


def payload(namespace: str, decision: dict, result: dict, now_ms: int) -> dict:
    """What a hook gets: the action and its part of the decision, and the answer's totals."""
    up, down = result.get("scale_up") or {}, result.get("scale_down") or {}
    return {"namespace": namespace, "action": decision["action"], "ts": now_ms,
            "scale_up": decision["scale_up"], "scale_down": decision["scale_down"],
            "cost": up.get("cost", 0.0) if decision["action"] == "scale-up" else 0.0,
            "savings": round(sum(r["cost"] for r in decision["scale_down"]), 6),
            "unplaceable": [{"job": u["job"], "tasks": u["tasks"]} for u in up.get("unplaceable", [])],
            "answer": {"pending": result.get("pending", 0), "nodes": result.get("nodes", 0),
                       "add": [{"pool": a["pool"], "nodes": a["nodes"]} for a in up.get("add", [])],
                       "remove": [r["node"] for r in down.get("remove", [])]}}


def call_hook(hook: Hook, body: dict) -> tuple[bool, str]:
    """Run the command or POST to the webhook; (whether it acted, what went wrong)."""
    data = orjson.dumps(body)
    if hook.exec_cmd:
        env = {**os.environ, "SCHED_CAPACITY_ACTION": body["action"] or "", "SCHED_NAMESPACE": body["namespace"]}
        try:
            done = subprocess.run(hook.exec_cmd, shell=True, input=data, capture_output=True,
                                  timeout=hook.timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return False, f"--exec did not finish within {hook.timeout_s:g} s"
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip()[-OUTPUT_KEPT:]
            return False, f"--exec exited {done.returncode}" + (f": {said}" if said else "")
        return True, ""
    request = urllib.request.Request(hook.webhook, data=data, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "sched-capacity"})
    try:
        with urllib.request.urlopen(request, timeout=hook.timeout_s) as response:
            return 200 <= response.status < 300, "" if 200 <= response.status < 300 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"--webhook answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"--webhook could not be reached: {getattr(exc, 'reason', exc)}"


def run_once(store, namespace: str, options: CapacityOptions | None = None, hook: Hook | None = None,
             cooldowns: Cooldowns | None = None, now_ms: int | None = None) -> dict:
    """One answer, decided on, acted on by the hook if one is given, and recorded.
    Returns the answer with ``decision`` (and ``hook``: what the hook did)."""
    hook, cooldowns = hook or Hook(), cooldowns or Cooldowns()
    result = answer(store, options)
    record = store.capacity_record()
    now = now_ms if now_ms is not None else store.now_ms()
    since = unneeded_since(result, record.unneeded, now)
    decision = decide(result, record, since, now, cooldowns)
    result["decision"] = decision
    acted, events = (), []
    new = digest(result)
    if hook.given and decision["action"] is not None:
        started = time.perf_counter()
        ok, error = call_hook(hook, payload(namespace, decision, result, now))
        result["hook"] = {"action": decision["action"], "acted": ok, "error": error or None,
                          "seconds": round(time.perf_counter() - started, 3)}
        if ok:
            acted = ("up",) if decision["action"] == "scale-up" else ("down",)
        events.append(_event(decision, result, hook="exec" if hook.exec_cmd else "webhook", acted=ok, error=error))
    elif new != record.digest and (decision["action"] is not None or record.digest):
        events.append(_event(decision, result, hook=None, acted=False, error=""))
    result["digest"] = new
    store.record_capacity(_kept(result), new, since, acted, events, now)
    return result


def _event(decision: dict, result: dict, hook: str | None, acted: bool, error: str) -> dict:
    up, down = result.get("scale_up") or {}, result.get("scale_down") or {}
    event = {"type": "capacity", "event": decision["action"] or "none", "acted": acted,
             "add": {a["pool"]: a["nodes"] for a in up.get("add", [])},
             "remove": [r["node"] for r in down.get("remove", [])][:100],
             "savings": down.get("savings", 0.0), "cost": up.get("cost", 0.0)}
    if hook:
        event["hook"] = hook
    if error:
        event["error"] = error
    return event


def _kept(result: dict) -> dict:
    """The answer as Redis keeps it for the dashboard: without the scale-down's moves, whose
    number grows with the cluster (the nodes, pools and counts are kept)."""
    kept = dict(result)
    down = kept.get("scale_down")
    if down:
        kept["scale_down"] = {**down, "remove": [{k: v for k, v in r.items() if k != "moves"}
                                                 for r in down["remove"]]}
    return kept

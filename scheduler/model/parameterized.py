"""``parameterized``: a job that runs only when dispatched with its input (Nomad's
parameterized jobs and ``nomad job dispatch``).

A parameterized job runs no task itself. Each dispatch makes a child job
``<id>/dispatch-<unix time>-<8 hex digits>`` from its spec, with the dispatch's meta and
payload (control/dispatch.py); its commands see them as ``SCHED_META_<KEY>`` and in the
file ``SCHED_PAYLOAD`` names. This module checks the block, and a dispatch's input
against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.model.errors import SpecError

PAYLOADS = ("optional", "required", "forbidden")
MAX_PAYLOAD_BYTES = 16 * 1024  # Nomad's limit
MAX_META = 64
MAX_META_VALUE = 1024
_META_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class Parameterized:
    payload: str = "optional"
    meta_required: tuple[str, ...] = ()
    meta_optional: tuple[str, ...] = ()


def _keys(raw, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(k, str) and _META_KEY_RE.fullmatch(k) for k in raw):
        raise SpecError(f"{what} must be a list of meta keys (letters, digits and _, starting with a letter or _), "
                        f"such as [customer, region].")
    if len(set(raw)) != len(raw):
        raise SpecError(f"{what} lists a key twice.")
    return tuple(raw)


def parse_parameterized(raw, job: str) -> Parameterized | None:
    if raw is None:
        return None
    what = f"job {job}: parameterized"
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping such as {{payload: optional, meta_required: [customer]}}.")
    unknown = sorted(set(raw) - {"payload", "meta_required", "meta_optional"}, key=str)
    if unknown:
        raise SpecError(f"{what} has unknown field {unknown[0]!r}; known fields are meta_optional, meta_required, "
                        f"payload.")
    payload = raw.get("payload", "optional")
    if payload not in PAYLOADS:
        raise SpecError(f"{what}.payload must be one of {', '.join(PAYLOADS)}, not {payload!r}.")
    required = _keys(raw.get("meta_required"), f"{what}.meta_required")
    optional = _keys(raw.get("meta_optional"), f"{what}.meta_optional")
    both = sorted(set(required) & set(optional))
    if both:
        raise SpecError(f"{what}: meta key {both[0]!r} is both required and optional.")
    return Parameterized(payload=payload, meta_required=required, meta_optional=optional)


def parameterized_raw(p: Parameterized) -> dict:
    return {"payload": p.payload, "meta_required": list(p.meta_required), "meta_optional": list(p.meta_optional)}


def check_dispatch(p: Parameterized, job: str, meta: dict, payload: bytes | None) -> dict[str, str]:
    """The dispatch's meta (key -> text) if it is what the job asks for; else one sentence."""
    if not isinstance(meta, dict):
        raise SpecError(f"job {job}: dispatch meta must be a mapping of key to value.")
    allowed = set(p.meta_required) | set(p.meta_optional)
    for key, value in meta.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise SpecError(f"job {job} does not take meta key {key!r}; it takes {known}.")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or len(str(value)) > MAX_META_VALUE:
            raise SpecError(f"job {job}: meta {key} must be text of at most {MAX_META_VALUE} characters.")
    missing = [key for key in p.meta_required if key not in meta]
    if missing:
        raise SpecError(f"job {job} needs meta {', '.join(missing)}: dispatch it with "
                        f"{' '.join(f'--meta {key}=...' for key in missing)}.")
    if payload is not None and len(payload) > MAX_PAYLOAD_BYTES:
        raise oversized_payload(job, len(payload))
    if p.payload == "required" and not payload:
        raise SpecError(f"job {job} needs a payload: dispatch it with --payload FILE (or - for stdin).")
    if p.payload == "forbidden" and payload:
        raise SpecError(f"job {job} takes no payload; dispatch it without --payload.")
    return {key: str(value) for key, value in meta.items()}


def oversized_payload(job: str, size: int) -> SpecError:
    """The one sentence for a payload over the bound, with its whole size (a reader that
    stops at the bound counts the rest, so the CLI and the HTTP API say the same)."""
    return SpecError(f"job {job}: the payload is {size} bytes, more than the {MAX_PAYLOAD_BYTES} bytes "
                     f"(16 KiB) a dispatch may carry.")

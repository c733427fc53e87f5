"""Identifiers and labels: what a job id, node name, label key or plugin name may be."""

from __future__ import annotations

import re
import secrets

from scheduler.model.errors import SpecError

# Always used with fullmatch: "$" alone would also match before a final newline ("web\n").
_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
# A launch of a periodic or parameterized job: its parent's id, then Nomad's suffix
# (``nightly/periodic-1700000000``, ``render/dispatch-1700000000-3fa2b1c0``).
_CHILD_ID_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,62})/(periodic-[0-9]{1,12}|dispatch-[0-9]{1,12}-[0-9a-f]{8})")
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,252}")
_PLUGIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_namespace(namespace) -> str:
    """A namespace is part of every key (``sched:{NS}:...``) and of SCAN patterns, so it
    holds no braces, colons, whitespace or glob characters: a letter or digit followed by
    up to 63 letters, digits, '.', '-' and '_'."""
    if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
        raise SpecError(f"namespace {namespace!r} is not valid; use up to 64 letters, digits, '.', '-' and '_', "
                        "starting with a letter or digit.")
    return namespace


_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_tenant(tenant, what: str = "tenant") -> str:
    """A tenant name: letters, digits, '_', '.', '-' (it is a field name inside Redis hashes)."""
    if not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant):
        raise SpecError(f"{what} {tenant!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit.")
    return tenant


def check_job_id(job_id) -> str:
    """A job's id: one a person gives, or a launch of a periodic or parameterized job
    (``<parent>/periodic-<unix time>``, ``<parent>/dispatch-<unix time>-<8 hex digits>``)."""
    if not isinstance(job_id, str) or not is_job_id(job_id):
        raise SpecError(
            f"job id {job_id!r} is not valid; use up to 63 letters, digits, - and _, starting with a letter or digit."
        )
    return job_id


def is_job_id(text: str) -> bool:
    return _JOB_ID_RE.fullmatch(text) is not None or _CHILD_ID_RE.fullmatch(text) is not None


def parent_of(job_id: str) -> str | None:
    """The periodic or parameterized job that launched ``job_id`` (None for a job a person
    submitted)."""
    match = _CHILD_ID_RE.fullmatch(job_id)
    return match.group(1) if match else None


def check_node_name(name) -> str:
    if not isinstance(name, str) or not _NODE_NAME_RE.fullmatch(name):
        raise SpecError(f"node name {name!r} is not valid; use letters, digits, '.', '-' and '_'.")
    return name


def new_job_id() -> str:
    return "job-" + secrets.token_hex(4)


def parse_labels(raw, what: str = "labels") -> dict[str, str]:
    """``{zone: eu-1}`` or ``["zone=eu-1"]`` -> ``{"zone": "eu-1"}``."""
    if raw is None:
        return {}
    if isinstance(raw, (list, tuple)):
        pairs = {}
        for item in raw:
            if not isinstance(item, str) or "=" not in item:
                raise SpecError(f"{what} entry {item!r} must look like key=value.")
            key, _, value = item.partition("=")
            pairs[key.strip()] = value.strip()
        raw = pairs
    if not isinstance(raw, dict):
        raise SpecError(f"{what} must be a mapping of key to value.")
    labels = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.fullmatch(key):
            raise SpecError(f"{what} key {key!r} is not valid; use letters, digits, '.', '/', '-' and '_'.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what} value for {key!r} must be a string or number.")
        labels[key] = str(value)
    return labels


def parse_plugins(raw, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(p, str) and _PLUGIN_RE.fullmatch(p) for p in raw):
        raise SpecError(f"{what} must be a list of plugin names such as [network, volume].")
    return tuple(sorted(set(raw)))


"""Identifiers and labels: what a job id, node name, label key or plugin name may be."""

from __future__ import annotations

import re
import secrets

from scheduler.model.errors import SpecError

_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,252}$")
_PLUGIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")


def check_job_id(job_id) -> str:
    if not isinstance(job_id, str) or not _JOB_ID_RE.match(job_id):
        raise SpecError(
            f"job id {job_id!r} is not valid; use up to 63 letters, digits, - and _, starting with a letter or digit."
        )
    return job_id


def check_node_name(name) -> str:
    if not isinstance(name, str) or not _NODE_NAME_RE.match(name):
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
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            raise SpecError(f"{what} key {key!r} is not valid; use letters, digits, '.', '/', '-' and '_'.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{what} value for {key!r} must be a string or number.")
        labels[key] = str(value)
    return labels


def parse_plugins(raw, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(p, str) and _PLUGIN_RE.match(p) for p in raw):
        raise SpecError(f"{what} must be a list of plugin names such as [network, volume].")
    return tuple(sorted(set(raw)))


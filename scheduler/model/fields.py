"""Unknown fields of a spec's mappings: one sentence naming the first, with the field
meant where it can tell (a near miss, or the name kube gives the same thing)."""

from __future__ import annotations

import difflib

from scheduler.model.errors import SpecError

# kube's names (as written in YAML, and snake-cased) for what a rule here calls otherwise.
KUBE_NAMES = {
    "topologyKey": "attribute", "topology_key": "attribute", "key": "attribute",
    "maxSkew": "max_skew", "whenUnsatisfiable": "when_unsatisfiable", "minDomains": "min_domains",
    "labelSelector": "match", "label_selector": "match", "matchLabels": "match", "match_labels": "match",
    "matchExpressions": "match_expressions", "tolerationSeconds": "toleration_seconds",
    "maxUnavailable": "max_unavailable", "minAvailable": "min_available",
}


def check_fields(item: dict, known, what: str) -> None:
    """Refuse the first field of ``item`` not in ``known``, naming the fields it knows."""
    unknown = sorted((name for name in item if name not in known), key=str)
    if not unknown:
        return
    name = unknown[0]
    meant = KUBE_NAMES.get(name) if isinstance(name, str) else None
    if meant not in known:
        close = difflib.get_close_matches(name, sorted(known), n=1) if isinstance(name, str) else []
        meant = close[0] if close else None
    hint = f" (did you mean {meant!r}?)" if meant else ""
    raise SpecError(f"{what} has unknown field {name!r}{hint}; known fields are {', '.join(sorted(known))}.")

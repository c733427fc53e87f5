"""Topology domains: a node attribute's value, the unit that spread, job (anti-)affinity
and ``distinct_property`` count tasks in (kube's topology domain, Nomad's property value).

A rule names its attribute as a constraint key (``node.hostname``, ``node.labels.zone``);
``node.id`` is ``node.name``. A node whose value is empty (a missing label) is in no
domain of that attribute.

The tasks of a *counted* job (one with ``labels``, ``topology_spread`` or a
``distinct_property`` constraint) are counted under every attribute of their node at
once, so that any rule, whatever attribute it names, finds them: ``lua/commit.lua``
counts them in ``tally:dom:<job>`` (field ``<attribute>=<value>``, and ``*`` for all of
them) and records the fields it counted on the task, which ``release`` in ``lua/_lib.lua``
takes back. :func:`node_domains` lists those fields exactly as the commit does.
"""

from __future__ import annotations

from scheduler.model.constraints import attribute_getter, normalize_arch

TOTAL = "*"  # a counted job's live tasks, all domains together


def domain_attribute(key: str) -> str:
    """The name an attribute is counted under (``node.id`` is ``node.name``)."""
    return "node.name" if key == "node.id" else key


def node_domains(node) -> list[str]:
    """The ``<attribute>=<value>`` fields a task placed on ``node`` is counted under."""
    out = [f"node.name={node.name}", f"node.hostname={node.hostname or node.name}"]
    for attribute, value in (("node.role", node.role), ("node.platform.os", node.os),
                             ("node.platform.arch", normalize_arch(node.arch) if node.arch else "")):
        if value:
            out.append(f"{attribute}={value}")
    out += [f"node.labels.{key}={value}" for key, value in node.labels.items() if value != ""]
    out += [f"engine.labels.{key}={value}" for key, value in node.engine_labels.items() if value != ""]
    return out


def domain_getter(key: str):
    """The function reading an attribute's value from a node, as domains see it."""
    return attribute_getter(domain_attribute(key))

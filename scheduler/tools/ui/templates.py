"""The HTML side: Jinja templates shipped in ``templates/`` with every value escaped
(autoescape is on for every template), and the filters they format numbers and times with.

Times are shown relative to now (``3 min ago``), with the absolute UTC time on hover: a
``<time>`` element whose ``data-ms`` the page's script reads to keep the words current
(the same wording as :func:`relative`)."""

from __future__ import annotations

import datetime
import time
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.responses import HTMLResponse

from scheduler.control.changes import show
from scheduler.model import TASK_STATES
from scheduler.model.quantities import CPU, MEMORY, decimal_memory
from scheduler.tools.render import spec_for_people
from scheduler.tools.ui import node_words

RESOURCE_ORDER = ("cpu", "memory", "gpu")


def when(ms: int) -> str:
    """Milliseconds since the epoch -> ``2026-05-01 12:00:00.123 UTC``; "" for 0."""
    if not ms:
        return ""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def relative(ms: int, now_ms: int) -> str:
    """How long ago a moment was, in words: ``just now``, ``42 s ago``, ``3 min ago``,
    ``5 h ago``, ``2 d ago`` (``in 8 s`` for a moment ahead: clocks differ)."""
    seconds = (now_ms - ms) / 1000
    if abs(seconds) < 5:
        return "just now"
    size = abs(seconds)
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if size >= length:
            words = f"{int(size // length)} {unit}"
            break
    return f"{words} ago" if seconds > 0 else f"in {words}"


def ago(ms: int) -> Markup:
    """A ``<time>`` saying how long ago ``ms`` was, with the absolute time on hover; "" for 0."""
    if not ms:
        return Markup("")
    iso = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="milliseconds")
    return Markup('<time datetime="{}" data-ms="{}" title="{}">{}</time>').format(
        iso, int(ms), when(ms), relative(ms, int(time.time() * 1000)))


def after(ms: int, since: int) -> str:
    """How long after ``since`` a moment came: ``+1.25 s``."""
    if not ms or not since:
        return ""
    seconds = (ms - since) / 1000
    return f"+{seconds:.3f} s" if seconds < 10 else f"+{seconds:.1f} s"


def resources(capacity: dict[str, int]) -> list[str]:
    """Resource names in display order: cpu, memory, gpu, then the rest by name."""
    return sorted(capacity, key=lambda name: (RESOURCE_ORDER.index(name) if name in RESOURCE_ORDER else 9, name))


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _memory_unit(amount: int) -> tuple[int, str]:
    """The unit to show bytes in: binary, but decimal for an amount written in decimal
    units (10 GB, not 9.31 GiB)."""
    units = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
    if decimal_memory(amount) is not None:
        units = ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"))
    for factor, unit in units:
        if amount >= factor:
            return factor, unit
    return 1, "B"


def amount(name: str, value: int) -> str:
    """For people: cpu in cores (``0.5``), memory with a unit (``1.5 GiB``), the rest in units."""
    if name == CPU:
        return _number(value / 1000)
    if name == MEMORY:
        factor, unit = _memory_unit(value)
        return f"{_number(value / factor)} {unit}"
    return str(value)


def used_of(name: str, used: int, capacity: int) -> str:
    """``3.6 / 8 GiB``: both in the unit of the capacity."""
    if name == MEMORY:
        factor, unit = _memory_unit(capacity)
        return f"{_number(used / factor)} / {_number(capacity / factor)} {unit}"
    return f"{amount(name, used)} / {amount(name, capacity)}"


def usage(capacity: dict[str, int], allocated: dict[str, int]) -> list[dict]:
    """Per resource: name, percent allocated, ``1.5 / 4`` text, and a level for the colour."""
    out = []
    for name in resources(capacity):
        cap, used = capacity[name], allocated.get(name, 0)
        pct = 100.0 if cap <= 0 and used > 0 else (0.0 if cap <= 0 else min(100.0, 100.0 * used / cap))
        out.append({"resource": name, "pct": round(pct, 1), "text": used_of(name, used, cap),
                    "level": "high" if pct >= 90 else "mid" if pct >= 70 else "low"})
    return out


def changed_value(value, field: str) -> str:
    """A value in a diff of two specs, as the spec is shown (memory in units: ``512Mi``)."""
    section, _, name = field.partition(".")
    if section == "resources" and name:
        value = spec_for_people({"resources": {name: value}})["resources"][name]
    return show(value)


def quantities(amounts: dict[str, int]) -> str:
    return ", ".join(f"{name} {amount(name, amounts[name])}" for name in resources(amounts))


class Pages:
    """Renders the page templates with what every page needs: the namespace, the list of
    namespaces for the chooser, and ``url()`` that keeps the namespace in every link."""

    def __init__(self):
        self.env = Environment(loader=PackageLoader("scheduler.tools.ui", "templates"), autoescape=True,
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(when=when, ago=ago, after=after, usage=usage, quantities=quantities,
                                changed=changed_value)
        self.env.globals.update(TASK_STATES=TASK_STATES, amount=amount, resources=resources)
        self.env.globals.update(node_meaning_text=node_words.meaning,
                                node_status_note=lambda status: node_words.STATUS_NOTE.get(status, ""),
                                node_availability_note=lambda value: node_words.AVAILABILITY_NOTE.get(value, ""))

    def render(self, name: str, *, namespace: str, namespaces: list[str], status: int = 200, **values) -> HTMLResponse:
        def url(path: str, *segments: str, **params) -> str:
            """``url("/jobs", job_id)`` -> ``/jobs/<quoted id>?ns=<namespace>``."""
            full = "/".join([path.rstrip("/") or "", *(quote(s, safe="") for s in segments)]) or "/"
            return full + "?" + urlencode({"ns": namespace, **params})

        html = self.env.get_template(name).render(ns=namespace, namespaces=namespaces, url=url, status=status,
                                                  **values)
        return HTMLResponse(html, status_code=status)

"""Job specs read from text: one YAML or JSON document, several YAML documents, or JSON
lines, each validated into a :class:`JobSpec`.

Bulk files are mostly made from one template, so documents that differ only in their id
are parsed and validated once and share one spec (see :class:`_Templates`).
"""

from __future__ import annotations

import re
from functools import lru_cache

import orjson

from scheduler.model.errors import SpecError
from scheduler.model.job import JobSpec, parse_job
from scheduler.model.names import is_job_id


def _yaml():
    """PyYAML, imported when a text is first read as YAML: a process that never reads
    one (a worker, an agent) starts without it."""
    import yaml

    return yaml


def load_specs(text: str) -> list[dict]:
    """Job specs from YAML or JSON text: one document, several YAML documents (``---``),
    or JSON lines (one JSON object per line; a text whose first line is a whole JSON
    object and that has more lines is read as JSON lines). Raises :class:`SpecError`
    naming the document that is not valid (by number, and its line)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return [orjson.loads(stripped)]  # one JSON document, on one line or many
        except orjson.JSONDecodeError:
            pass
        lines = text.splitlines()
        first = next(i for i, line in enumerate(lines) if line.strip())
        try:
            orjson.loads(lines[first])
        except orjson.JSONDecodeError:
            pass  # not JSON lines: YAML (a flow mapping) or broken JSON, which YAML reports
        else:
            documents = []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    documents.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    raise SpecError(f"document {len(documents) + 1} (line {number}) is not valid JSON.") from None
            return documents
    yaml = _yaml()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: about 5x faster
    documents = []
    try:
        for doc in yaml.load_all(text, Loader=loader):
            if doc is not None:
                documents.append(doc)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        if documents:
            where = f"{where} (document {len(documents) + 1})"
        raise SpecError(f"the job spec is not valid YAML or JSON{where}.") from None
    if not documents:
        raise SpecError("the job spec is empty.")
    return documents


def as_spec(spec) -> JobSpec:
    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, str):
        documents = load_specs(spec)
        if len(documents) != 1:
            raise SpecError(f"expected one job spec, found {len(documents)}; use submit_many for several.")
        spec = documents[0]
    return parse_job(spec)


def from_template(spec, templates: dict) -> JobSpec | None:
    """The parsed spec that ``spec`` (a mapping with an id) shares everything but its id
    with, if that was seen before in ``templates`` (specs made from one template are
    validated once: about 10 µs each saved in a bulk submit); None to parse it in full
    (also whenever anything about it is unusual, so that errors name this job)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("id"), str) or not is_job_id(spec["id"]):
        return None
    try:
        key = orjson.dumps({**spec, "id": ""}, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    template = templates.get(key)
    if template is None:
        try:
            template = parse_job({**spec, "id": "x"})
        except SpecError:
            return None
        templates[key] = template
    return template


# Bulk files are mostly made from one template: documents whose text differs only in the
# id's value are parsed and validated once. The text around the id is the template's key;
# it counts once a second document has it and a parse of it with another id has shown
# that the value is the job's id and nothing else (not a nested "id", not a value that
# goes on over the next line). Documents unlike any other are parsed once, as before.
_JSON_ID = re.compile(r'"id"[ \t]*:[ \t]*"([A-Za-z0-9][A-Za-z0-9_-]*)"')
_YAML_ID = re.compile(r"^id:[ \t]+([A-Za-z0-9][A-Za-z0-9_-]*)[ \t]*$", re.M)
_YAML_DOCUMENT = re.compile(r"^---(?=[ \t\n]|\Z)", re.M)
_YAML_UNUSUAL = re.compile(r"^(?:%|\.\.\.)|[\r\x85\u2028\u2029]", re.M)  # directives, "...", other line breaks


class _Templates:
    """Documents (as text) to (job id, spec), parsing each template once (see above)."""

    def __init__(self, load, pattern: re.Pattern, is_plain=lambda value: True, skip_empty: bool = True):
        self.load, self.pattern, self.is_plain, self.skip_empty = load, pattern, is_plain, skip_empty
        self.known: dict[tuple[str, str], JobSpec | None] = {}  # None: not a template
        self.seen: dict[tuple[str, str], tuple[dict, JobSpec]] = {}  # once, not yet checked

    def job(self, text: str):
        """(job id, spec) of the document ``text``, or None when it holds no document
        (YAML: only comments or nothing). Raises SpecError if its spec is not valid."""
        match = self.pattern.search(text)
        key = None
        if match and self.is_plain(match.group(1)):
            key = (text[:match.start(1)], text[match.end(1):])
            spec = self.known.get(key)
            if spec is not None:
                return match.group(1), spec
            first = self.seen.pop(key, None)
            if first is not None:
                document, spec = first
                if self.load(key[0] + "x" + key[1]) == {**document, "id": "x"}:
                    self.known[key] = spec
                    return match.group(1), spec
                self.known[key] = None
        document = self.load(text)
        if document is None and self.skip_empty:
            return None
        spec = parse_job(document)
        if key is not None and key not in self.known and document.get("id") == match.group(1):
            self.seen[key] = (document, spec)
        return spec.id, spec


def _yaml_load(text: str):
    yaml = _yaml()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=1)
def _yaml_resolver():
    return _yaml().SafeLoader("")


def _yaml_string(value: str) -> bool:
    """Whether YAML reads ``value``, written plain, as that string (not 1_000, a date, yes...)."""
    return _yaml_resolver().resolve(_yaml().ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str"


def read_specs(text: str) -> list[tuple[str, JobSpec]]:
    """The job specs in ``text`` (every form :func:`load_specs` reads), validated: one
    (job id, spec) per document, in order. Documents that differ only in their id share
    one spec (parsed once; its own id is the first such document's). Raises
    :class:`SpecError` naming the first document that is not valid."""
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            try:
                orjson.loads(stripped)  # one JSON document: below
            except orjson.JSONDecodeError:
                lines = text.splitlines()
                try:
                    orjson.loads(next(line for line in lines if line.strip()))
                except orjson.JSONDecodeError:
                    pass  # not JSON lines: YAML (a flow mapping) or broken JSON, which YAML reports
                else:
                    return _json_lines(lines)
        elif _YAML_DOCUMENT.search(text) and not _YAML_UNUSUAL.search(text):
            # Several YAML documents, each read on its own (a "---" line always ends one).
            templates = _Templates(_yaml_load, _YAML_ID, _yaml_string)
            jobs = [job for piece in _YAML_DOCUMENT.split(text) if (job := templates.job(piece)) is not None]
            if jobs:
                return jobs
    except (SpecError, _yaml().YAMLError):  # (PyYAML imported only once something failed)
        pass  # read again as a whole, below: the error is then said as it always was
    documents = load_specs(text)
    jobs = []
    for number, document in enumerate(documents, 1):
        try:
            spec = parse_job(document)
        except SpecError as exc:
            if len(documents) == 1:
                raise
            raise SpecError(f"document {number}: {exc}") from None
        jobs.append((spec.id, spec))
    return jobs


def _json_lines(lines: list[str]) -> list[tuple[str, JobSpec]]:
    templates = _Templates(orjson.loads, _JSON_ID, skip_empty=False)
    jobs = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                jobs.append(templates.job(line))
            except orjson.JSONDecodeError:
                raise SpecError(f"document {len(jobs) + 1} (line {number}) is not valid JSON.") from None
    return jobs

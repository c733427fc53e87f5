"""Every third-party module the code imports is declared in pyproject.toml: the package's in
``dependencies``, the tests' and scripts' in ``dependencies`` or the ``test`` extra, the
build's (setup.py) in ``[build-system] requires``. A module that only arrives through
another package's dependencies (croniter through rq, once) is a crash waiting for that
package's next release. Read from the source (its AST), so that an import inside a
function, or one guarded by ``try``, counts too."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OWN = {"scheduler", "workers"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(requirements: list[str]) -> set[str]:
    """The distribution names of PEP 508 requirements (``redis>=5.0`` -> ``redis``)."""
    return {normalized(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r.strip()).group()) for r in requirements}


def imports(files: list[Path]) -> dict[str, list[str]]:
    """Top-level module name -> where it is imported (``file:line``), for absolute imports."""
    found: dict[str, list[str]] = {}
    for path in files:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], []).append(f"{shown}:{node.lineno}")
    return found


def undeclared(files: list[Path], allowed: set[str], local: set[str] = frozenset()) -> list[str]:
    """Sentences naming each third-party import of ``files`` whose distribution is not in ``allowed``."""
    distributions = packages_distributions()
    problems = []
    for module, where in sorted(imports(files).items()):
        if module in sys.stdlib_module_names or module in OWN or module in local:
            continue
        owners = {normalized(d) for d in distributions.get(module, [])}
        if not owners:
            problems.append(f"{module} (imported at {where[0]}) is not installed: declare the package that gives it")
        elif not owners & allowed:
            problems.append(f"{module} (imported at {where[0]}) comes from {', '.join(sorted(owners))}, "
                            f"which is not declared")
    return problems


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def test_the_package_declares_every_module_it_imports():
    files = python_files("scheduler", "workers")
    assert len(files) > 100  # the walk found the code
    assert undeclared(files, declared(PROJECT["project"]["dependencies"])) == []


def test_the_tests_and_scripts_declare_theirs_in_the_test_extra():
    allowed = declared(PROJECT["project"]["dependencies"] + PROJECT["project"]["optional-dependencies"]["test"])
    files = python_files("tests", "scripts")
    local = {path.stem for path in files}  # the tests' helper modules, imported by name
    local.add("sched_client")  # generated from the OpenAPI document by tests/test_api_clients.py
    assert undeclared(files, allowed, local) == []


def test_the_build_declares_what_setup_py_imports():
    assert undeclared([ROOT / "setup.py"], declared(PROJECT["build-system"]["requires"])) == []


def test_an_import_that_only_arrives_through_another_package_is_found(tmp_path):
    """The check itself: croniter installed (through rq, say) but not declared is named."""
    module = tmp_path / "probe.py"
    module.write_text("import os\nfrom croniter import croniter\nimport redis.client\nimport nothere_at_all\n")
    assert undeclared([module], declared(["redis>=5"])) == [
        "croniter (imported at probe.py:2) comes from croniter, which is not declared",
        "nothere_at_all (imported at probe.py:4) is not installed: declare the package that gives it"]

"""sched as users install it: the sdist and the wheel built as a release builds them
(``python -m build``: the sdist, then the wheel from it), the wheel installed, not editable,
with its dependencies, into a fresh venv, and that venv's ``sched`` run: every command's
``--help``, then node add, job submit, ``worker --until-idle``, and ``ui`` and ``api``
answering HTTP, against the suite's redis-server. The rest of the suite runs an editable
install, which finds every module and file in the source tree whatever the package
declares; these tests are where a module or data file left out of the package shows.

Where a C compiler works, the wheel runs its hot path compiled (setup.py); without one
(``CC=false``) the build is pure Python, and that wheel places work too. The Dockerfile
builds and installs the same wheel (checked as text: no Docker engine here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from redis_topologies import free_ports, wait_until
from scheduler import native
from scheduler.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# What a developer's tree holds beside the sources after scripts/setup.sh: never shipped.
LEFT_BY_BUILDS = {"scheduler/engine/fit" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"): b"not an extension",
                  "scheduler/_native.json": b'{"suffix": "stale"}', "scheduler/__pycache__/client.cpython-311.pyc": b""}
JOB = "id: web\nreplicas: 2\nresources: {cpu: 0.5, memory: 256MiB}\n"

# Run by the installed venv's Python: every command path and whether its --help works.
WALK = r"""
import json
import click
from click.testing import CliRunner
import scheduler
from scheduler.tools.cli import main

def walk(group, path, ctx):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command.hidden:  # kept for old command lines, not offered
            continue
        yield [*path, name]
        if isinstance(command, click.Group):
            yield from walk(command, [*path, name], click.Context(command, info_name=name, parent=ctx))

paths = [[], *walk(main, [], click.Context(main, info_name="sched"))]
failed = {}
for path in paths:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="sched")
    if result.exit_code != 0 or not result.output.startswith(" ".join(["Usage: sched", *path])):
        failed[" ".join(path)] = [result.exit_code, result.output[-400:], repr(result.exception)]
print(json.dumps({"package": scheduler.__file__, "commands": [" ".join(p) for p in paths], "failed": failed}))
"""


def command_paths(group: click.Group, path: list[str], ctx: click.Context) -> list[str]:
    """The source tree's commands, as WALK lists them."""
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command.hidden:
            continue
        found.append(" ".join([*path, name]))
        if isinstance(command, click.Group):
            found += command_paths(command, [*path, name], click.Context(command, info_name=name, parent=ctx))
    return found


def compiler_present() -> bool:
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    return shutil.which(compiler[0]) is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()


def run(args: list, *, env: dict | None = None, cwd: Path | None = None, timeout: float = 600,
        ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if ok:
        assert done.returncode == 0, f"{shlex.join(map(str, args))}: exit {done.returncode}\n" \
                                     f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def tree_files() -> list[str]:
    """The project's files as a commit of the work tree would hold them (tracked, or new and not ignored)."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def package_files(files: list[str]) -> dict[str, str]:
    """Each source file of the packages -> its path in the wheel (``lua/x.lua`` ships as ``scheduler/lua/x.lua``)."""
    shipped = {name: name for name in files if name.split("/")[0] in ("scheduler", "workers")}
    shipped.update({name: "scheduler/" + name for name in files if name.startswith("lua/")})
    return shipped


@dataclass
class Built:
    files: list[str]  # the source tree's files, as copied
    sdist: Path
    wheel: Path
    log: str
    seconds: float


@dataclass
class Installed:
    venv: Path
    env: dict
    seconds: float

    def sched(self, *args, ok: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return run([self.venv / "bin" / "sched", *args], env=self.env, cwd=self.venv, timeout=timeout, ok=ok)


def user_env(venv: Path, **extra: str) -> dict:
    """The environment of a user of ``venv``: no source tree on the path, no build or run switches of ours."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", native.PURE_ENV, "SCHED_MYPYC")}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", **extra}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    """The sdist and the wheel of a copy of the work tree, with what an in-place build leaves planted in it."""
    source, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    files = tree_files()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    for name, content in LEFT_BY_BUILDS.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(content)
    started = time.monotonic()
    done = run([sys.executable, "-m", "build", "--outdir", dist, source], env=user_env(Path(sys.prefix)), timeout=900)
    seconds = time.monotonic() - started
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, (sdists, wheels)
    return Built(files, sdists[0], wheels[0], done.stdout + done.stderr, seconds)


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Installed:
    """A fresh venv with the wheel and its dependencies, installed as a user would: ``pip install WHEEL``."""
    venv = tmp_path_factory.mktemp("venv")
    started = time.monotonic()
    run([sys.executable, "-m", "venv", "--clear", venv])
    run([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q", built.wheel],
        env=user_env(venv), timeout=900)
    return Installed(venv, user_env(venv), time.monotonic() - started)


def distribution(requirement: str) -> str:
    """The normalized name of a requirement: ``prometheus_client>=0.20`` -> ``prometheus-client``."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([\w.-]+)", requirement).group(1)).lower()


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.mark.slow
def test_the_sdist_holds_the_sources_and_none_of_a_build(built):
    with tarfile.open(built.sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        names = {name.removeprefix(top + "/") for name in archive.getnames()}
    needed = [*package_files(built.files), "setup.py", "pyproject.toml", "MANIFEST.in", "README.md"]
    assert [name for name in needed if name not in names] == []
    assert [name for name in LEFT_BY_BUILDS if name in names] == []


@pytest.mark.slow
def test_the_wheel_ships_every_module_and_data_file_of_the_packages(built):
    names = wheel_names(built.wheel)
    expected = package_files(built.files)
    assert len([n for n in expected.values() if not n.endswith(".py")]) > 40  # the Lua scripts, the dashboard's files
    assert [source for source, shipped in expected.items() if shipped not in names] == []
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert {n.split("/")[0] for n in names} == {"scheduler", "workers", info}
    assert [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".c"))] == []
    with zipfile.ZipFile(built.wheel) as archive:
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    required = {distribution(line.removeprefix("Requires-Dist:"))
                for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert required == {distribution(r) for r in PROJECT["project"]["dependencies"]}
    assert "sched = scheduler.tools.cli:main" in entry_points
    assert all(f"{name} = {target}" in entry_points
               for name, target in PROJECT["project"]["entry-points"]["sched.processes"].items())


@pytest.mark.slow
def test_the_wheel_compiles_the_hot_path_where_a_compiler_works(built, installed):
    names = wheel_names(built.wheel)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    modules = [m.replace(".", "/") + suffix for m in (*native.COMPILED, native.GROUP + "__mypyc")]
    reported = json.loads(installed.sched("version", "--json").stdout)
    if not compiler_present():  # the wheel is pure Python, and says so
        assert [n for n in names if n.endswith(suffix)] == [] and reported["hot_path"] == "pure: not built"
        return
    assert [m for m in modules if m not in names] == [], built.log[-3000:]
    assert "scheduler/_native.json" in names and "sched build: compiled the hot path" in built.log
    assert reported["hot_path"] == "compiled" and reported["compiled"] is True
    site = Path(reported["executable"]).parent.parent
    files = run([installed.venv / "bin" / "python", "-c", "import importlib, scheduler.native as n; "
                 "print(*[importlib.import_module(m).__file__ for m in n.COMPILED])"],
                env=installed.env, cwd=installed.venv).stdout.split()
    assert len(files) == len(native.COMPILED) and all(f.endswith(suffix) and f.startswith(str(site)) for f in files)


@pytest.mark.slow
def test_every_command_helps_from_the_installed_wheel(installed):
    shown = installed.sched("--help")
    assert shown.stdout.startswith("Usage: sched [OPTIONS] COMMAND") and shown.stderr == ""
    walk = installed.venv / "walk.py"
    walk.write_text(WALK)
    walked = json.loads(run([installed.venv / "bin" / "python", walk], env=installed.env, cwd=installed.venv).stdout)
    assert walked["package"].startswith(str(installed.venv)), walked["package"]  # the wheel's, not the source tree's
    assert walked["failed"] == {}
    assert walked["commands"] == ["", *command_paths(main, [], click.Context(main, info_name="sched"))]
    assert {"api", "ui", "demo", "version", "job submit", "ui user add"} <= set(walked["commands"])
    assert installed.sched("--version").stdout == f"sched {PROJECT['project']['version']}\n"
    text = installed.sched("version").stdout
    assert text.startswith(f"sched     {PROJECT['project']['version']}\n") and "\nhot path  " in text


def place_two_tasks(sched, redis_url: str, namespace: str, folder: Path) -> list[dict]:
    """node add, job submit and worker --until-idle with ``sched``; the tasks as ``task ls --json`` lists them."""
    spec = folder / "web.yaml"
    spec.write_text(JOB)
    where = ("--redis-url", redis_url, "-n", namespace)
    assert sched(*where, "node", "add", "n1", "--cpu", "2", "--memory", "4GiB").stdout == "node n1 added\n"
    assert sched(*where, "job", "submit", spec).stdout == "web\n"
    assert "placed 2" in sched(*where, "worker", "--until-idle").stdout
    return json.loads(sched(*where, "task", "ls", "--json").stdout)


def get(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=5) as reply:
        return reply.status, reply.headers.get("content-type", ""), reply.read().decode()


@pytest.mark.slow
def test_the_installed_sched_places_work_and_serves_the_dashboard_and_the_api(installed, redis_url, namespace, app):
    tasks = place_two_tasks(installed.sched, redis_url, namespace, installed.venv)
    assert [(t["id"], t["state"], t["node"]) for t in tasks] == [("web.0", "assigned", "n1"), ("web.1", "assigned", "n1")]
    where = ("--redis-url", redis_url, "-n", namespace)
    token = installed.sched(*where, "token", "create", f"{namespace}-ci", "--namespace", namespace,
                            "--role", "viewer").stdout.split()[-1]
    revoke = (*where, "token", "revoke", f"{namespace}-ci")
    ui_port, api_port = free_ports(2)
    logs = {name: open(installed.venv / f"{name}.log", "w+") for name in ("ui", "api")}
    servers = {name: subprocess.Popen([installed.venv / "bin" / "sched", *where, name, "--port", str(port)],
                                      env=installed.env, cwd=installed.venv, stdout=logs[name], stderr=subprocess.STDOUT)
               for name, port in (("ui", ui_port), ("api", api_port))}
    try:
        def answering(name: str, url: str):
            assert servers[name].poll() is None, logs[name].seek(0) or logs[name].read()
            try:
                return get(url, token)
            except OSError:
                return None

        status, _, page = wait_until(lambda: answering("ui", f"http://127.0.0.1:{ui_port}/nodes?ns={namespace}"),
                                     60, "sched ui to answer")
        assert status == 200 and "n1" in page
        assert get(f"http://127.0.0.1:{ui_port}/static/dashboard.css")[:2] == (200, "text/css; charset=utf-8")
        status, kind, body = wait_until(lambda: answering("api", f"http://127.0.0.1:{api_port}/v1/nodes"),
                                        60, "sched api to answer")
        assert status == 200 and kind == "application/json" and [n["name"] for n in json.loads(body)] == ["n1"]
        job = json.loads(get(f"http://127.0.0.1:{api_port}/v1/jobs/web", token)[2])
        assert job["id"] == "web" and job["spec"]["replicas"] == 2
    finally:
        for server in servers.values():
            server.terminate()
            server.wait(timeout=30)
        for log in logs.values():
            log.close()
        installed.sched(*revoke)


@pytest.mark.slow
def test_without_a_compiler_the_build_is_pure_python_and_places_work(built, installed, redis_url, namespace, app,
                                                                     tmp_path):
    """CC=false: setup.py finds no working compiler and builds pure Python. Installed over
    the venv's dependencies (--target, first on PYTHONPATH), it runs the same."""
    done = run([installed.venv / "bin" / "python", "-m", "pip", "wheel", "-v", "--no-deps", "-w", tmp_path / "dist",
                built.sdist], env={**installed.env, "CC": "false"}, timeout=900)
    assert "sched build: no working C compiler" in done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert [n for n in wheel_names(wheel) if n.endswith((".so", ".pyd", "_native.json"))] == []
    run([installed.venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--target", tmp_path / "pure",
         wheel], env=installed.env)
    env = {**installed.env, "PYTHONPATH": str(tmp_path / "pure")}

    def sched(*args) -> subprocess.CompletedProcess:
        return run([installed.venv / "bin" / "sched", *args], env=env, cwd=tmp_path, timeout=120)

    reported = json.loads(sched("version", "--json").stdout)
    assert reported["hot_path"] == "pure: not built" and reported["compiled"] is False
    tasks = place_two_tasks(sched, redis_url, namespace, tmp_path)
    assert [(t["state"], t["node"]) for t in tasks] == [("assigned", "n1")] * 2


def dockerfile_stages(text: str) -> list[dict]:
    """The stages of a Dockerfile: each its FROM's image and name, and its instructions."""
    stages: list[dict] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            image, _, name = rest.partition(" AS ")
            stages.append({"image": image.strip(), "name": name.strip(), "steps": []})
        else:
            stages[-1]["steps"].append((instruction.upper(), rest.strip()))
    return stages


def test_the_dockerfile_builds_the_wheel_and_installs_it():
    """As the tests above do: the wheel built from the sources in a stage with a compiler,
    installed (not editable, with its dependencies) in the image; both stages on one Python
    and one Debian, so that the compiled modules load."""
    build, image = dockerfile_stages((ROOT / "Dockerfile").read_text())
    assert any(step == "RUN" and "python -m build" in rest for step, rest in build["steps"]), build
    versions = [re.fullmatch(r"python:(3\.\d+)-(?:slim-)?(\w+)", stage["image"]) for stage in (build, image)]
    assert all(versions) and versions[0].groups() == versions[1].groups(), (build["image"], image["image"])
    assert "slim" in image["image"]
    minimum = re.search(r"3\.(\d+)", PROJECT["project"]["requires-python"]).group(1)
    assert int(versions[0].group(1).split(".")[1]) >= int(minimum)
    copies = [rest for step, rest in image["steps"] if step == "COPY"]
    assert copies and all(rest.startswith(f"--from={build['name']} ") for rest in copies), copies
    installs = [rest for step, rest in image["steps"] if step == "RUN" and "pip install" in rest]
    assert len(installs) == 1 and ".whl" in installs[0] and not re.search(r"(-e|--editable|--no-deps)\b", installs[0])
    assert any(step == "CMD" for step, _ in image["steps"])
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if not line.startswith("#")}
    assert {"*.so", "scheduler/_native.json", "build", "dist"} <= ignored  # an in-place build stays out of the image

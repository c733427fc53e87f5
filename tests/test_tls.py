"""TLS against a real redis-server listening with ``--tls-port`` only, which requires a
password and a client certificate. The certificates (a CA, the server's, a client's) are
made here with the ``openssl`` command. ``rediss://`` URLs carry the CA and the client's
files in their query, or take them from SCHED_REDIS_CA, SCHED_REDIS_CERT and
SCHED_REDIS_KEY; a job goes submit -> worker -> agent (RQ over TLS too) -> completed."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis
from click.testing import CliRunner

from scheduler.state.app import App
from scheduler.state.embedded import server_args
from scheduler.tools.cli import main

from redis_topologies import free_ports
from agent_cluster import Cluster

PASSWORD = "tls-Pa55"


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory) -> dict:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate,
    all signed by the CA (EC keys: quick to make)."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is not installed (apt-get install openssl)")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=sched test CA",
            cwd=directory)
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=localhost"), ("client", "/CN=sched test client")):
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)
    return {name: str(directory / name) for name in ("ca.crt", "server.crt", "server.key", "client.crt",
                                                     "client.key")}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """(the server's TLS port, the certificate files)."""
    directory = tmp_path_factory.mktemp("tls-redis")
    files = make_certificates(directory)
    port = free_ports(1)[0]
    socket = directory / "redis.sock"
    process = subprocess.Popen(["redis-server", *server_args(directory, socket), "--logfile", str(directory / "log"),
                                "--requirepass", PASSWORD, "--tls-port", str(port),
                                "--tls-cert-file", files["server.crt"], "--tls-key-file", files["server.key"],
                                "--tls-ca-cert-file", files["ca.crt"], "--tls-auth-clients", "yes"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    local = redis.Redis(unix_socket_path=str(socket), password=PASSWORD)
    deadline = time.monotonic() + 30
    while True:
        try:
            local.ping()
            break
        except (redis.RedisError, OSError):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the TLS redis-server did not start: {(directory / 'log').read_text()}")
            time.sleep(0.05)
    yield port, files
    process.terminate()
    process.wait(timeout=10)


def sched(url: str, *args, input=None, env=None):
    return CliRunner().invoke(main, ["--redis-url", url, *map(str, args)], input=input, env=env)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def one_sentence(result, exit_code: int, *words: str) -> None:
    assert result.exit_code == exit_code, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert PASSWORD not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_a_job_round_trips_with_the_ca_and_client_certificate_in_the_url(tls_server, namespace):
    port, files = tls_server
    url = (f"rediss://:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={files['ca.crt']}"
           f"&ssl_certfile={files['client.crt']}&ssl_keyfile={files['client.key']}")
    ok(sched(url, "-n", namespace, "node", "add", "n1", "--cpu", "2", "--memory", "1Gi"))
    ok(sched(url, "-n", namespace, "job", "submit", "-", input="id: web\nreplicas: 2\nresources: {cpu: 0.5}\n"))
    ok(sched(url, "-n", namespace, "worker", "--until-idle"))
    listed = ok(sched(url, "-n", namespace, "task", "ls", "--json")).stdout
    assert listed.count('"state": "assigned"') == 2
    with App(redis_url=url, namespace=namespace).client as client:  # really TLS: the connection says so
        assert type(client.connection_pool.get_connection()).__name__ == "SSLConnection"


def test_the_files_may_come_from_the_environment_and_an_agent_runs_tasks_over_tls(tls_server, namespace, tmp_path,
                                                                                  monkeypatch):
    port, files = tls_server
    for variable, name in (("SCHED_REDIS_CA", "ca.crt"), ("SCHED_REDIS_CERT", "client.crt"),
                           ("SCHED_REDIS_KEY", "client.key")):
        monkeypatch.setenv(variable, files[name])
    url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"
    app = App(redis_url=url, namespace=namespace)
    agents = Cluster(app, url, namespace, tmp_path)  # its processes inherit the environment
    try:
        agents.agent("n1")
        ok(sched(url, "-n", namespace, "job", "submit", "-",
                 input="id: once\ntype: batch\nrun: {command: [sh, -c, 'echo over tls']}\n"))
        ok(sched(url, "-n", namespace, "worker", "--until-idle"))
        agents.wait(lambda: app.store.get_task("once.0").state == "completed", "the agent to run once.0")
        assert app.store.task_output("once.0")["stdout"] == "over tls\n"
    finally:
        agents.close()
        app.close()


def test_tls_failures_are_one_sentence(tls_server, tmp_path):
    port, files = tls_server
    base = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"
    client_files = f"ssl_certfile={files['client.crt']}&ssl_keyfile={files['client.key']}"
    # The server's certificate is signed by a CA this client does not know.
    one_sentence(sched(f"{base}?{client_files}", "node", "ls"), 1, "cannot reach Redis", "certificate verify failed")
    # The server asks for a client certificate and gets none.
    one_sentence(sched(f"{base}?ssl_ca_certs={files['ca.crt']}", "node", "ls"), 1, "cannot reach Redis")
    # A file named in the environment that does not exist: said before connecting.
    missing = tmp_path / "no-such-ca.pem"
    one_sentence(sched(base, "node", "ls", env={"SCHED_REDIS_CA": str(missing)}), 2,
                 f"SCHED_REDIS_CA names {missing}, which cannot be read.")
    one_sentence(sched(f"{base}?ssl_ca_certs={missing}", "node", "ls"), 2, f"the URL's ssl_ca_certs names {missing}")

"""The embedded default: with no Redis URL anywhere, ``sched`` starts a private redis-server
under ``$SCHED_HOME`` (AOF on, noeviction) and reuses it; with no redis-server installed it
says how to get one."""

from __future__ import annotations

import json
import os

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from scheduler.tools.cli import main
from scheduler.state.embedded import ensure_embedded, state_dir


@pytest.fixture
def no_url(monkeypatch):
    for name in ("SCHED_REDIS_URL", "REDIS_URL", "SCHED_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sched_home(tmp_path_factory, monkeypatch, no_url):
    # A short path: a unix socket path must fit in about 100 bytes.
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SCHED_HOME", str(home))
    return home


def shutdown(socket) -> None:
    """Stop a server we started (SHUTDOWN NOSAVE drops the connection, which is the success case)."""
    # No retries: redis-py would otherwise reconnect (with backoff) to a server that is gone.
    client = redis.Redis(unix_socket_path=str(socket), socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        client.execute_command("SHUTDOWN", "NOSAVE")
    except redis.ConnectionError:
        pass
    finally:
        client.close()


@pytest.fixture
def embedded(sched_home):
    """The embedded server started under ``sched_home``, shut down after the test."""
    socket = sched_home / "redis.sock"
    yield sched_home, socket
    if socket.exists():
        shutdown(socket)


def test_state_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHED_HOME", str(tmp_path / "a"))
    assert state_dir() == tmp_path / "a"
    monkeypatch.delenv("SCHED_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "sched"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert state_dir() == tmp_path / "h" / ".local" / "state" / "sched"


def test_ensure_embedded_starts_then_reuses_one_server(embedded):
    home, socket = embedded
    assert not socket.exists()
    url = ensure_embedded()
    assert url == f"unix://{socket}"
    assert socket.exists()

    client = redis.Redis(unix_socket_path=str(socket), decode_responses=True)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("dir")["dir"] == str(home)
        assert client.config_get("port") == {"port": "0"}          # no TCP port: the socket only
        pid = client.info("server")["process_id"]
        client.set("marker", "1")

        assert ensure_embedded() == url                              # the second call reuses it
        again = redis.Redis(unix_socket_path=str(socket), decode_responses=True)
        assert again.info("server")["process_id"] == pid
        assert again.get("marker") == "1"
        again.close()
    finally:
        client.close()


def test_cli_without_a_url_uses_the_embedded_server(embedded):
    home, socket = embedded
    runner = CliRunner()
    added = runner.invoke(main, ["node", "add", "n1", "--cpu", "2", "--memory", "4GiB"])
    assert added.exit_code == 0, (added.stdout, added.stderr)
    assert socket.exists()
    listed = runner.invoke(main, ["node", "ls", "--json"])
    assert [n["name"] for n in json.loads(listed.stdout)] == ["n1"]
    # It went to the default namespace of the embedded server.
    client = redis.Redis(unix_socket_path=str(socket), decode_responses=True)
    try:
        assert client.sismember("sched:{default}:nodes", "n1")
    finally:
        client.close()


def test_missing_redis_server_says_how_to_get_one(sched_home, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result = CliRunner().invoke(main, ["node", "ls"])
    assert result.exit_code != 0
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("Error: ") and "\n" not in message
    assert "install" in message and "redis-server" in message
    assert "--redis-url" in message or "SCHED_REDIS_URL" in message
    assert not (sched_home / "redis.sock").exists()
    assert os.listdir(sched_home) == []

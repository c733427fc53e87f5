"""Real Redis topologies for tests: a Redis Cluster (3 masters, each with a replica) and
a Sentinel set-up (a master, a replica and 3 sentinels), each made of real processes in a
temporary folder on free ports, and a way to fail a master over with SIGKILL.

The helpers are plain classes (:class:`ClusterSet`, :class:`SentinelSet`), usable outside
pytest; the fixtures at the end start them for a test session (``redis_cluster``,
``redis_sentinel``) or for one test that is going to break them (``cluster_factory``,
``sentinel_factory``). Every server requires a password, so that authentication and
its masking are exercised too. Ports are drawn from 30000-54999 (a cluster node's bus
port is its port + 10000), never Redis's default.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

PORT_LOW, PORT_HIGH = 30000, 54999
HOST = "127.0.0.1"
PASSWORD = "s3cret-Pa55"  # what every test server requires
MASTER_NAME = "mymaster"
START_TIMEOUT_S = 30  # generous deadlines: only a broken set-up should reach them
FAILOVER_TIMEOUT_S = 60


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports(count: int, *, bus: bool = False) -> list[int]:
    """``count`` distinct ports that are free now (and, with ``bus``, whose port + 10000
    is free too, for the cluster bus). Random, so parallel sessions rarely collide; a
    server that still fails to bind makes :func:`wait_ping` fail with its log."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randint(PORT_LOW, PORT_HIGH)
        if port in chosen or (bus and port + 10000 in chosen) or any(p + 10000 == port for p in chosen):
            continue
        if port_free(port) and (not bus or port_free(port + 10000)):
            chosen.append(port)
    return chosen


def free_port() -> int:
    """One TCP port that is free now (see :func:`free_ports`)."""
    return free_ports(1)[0]


def wait_until(condition, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll ``condition`` until it returns something true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except (redis.RedisError, OSError) as exc:
            last_error = exc
        time.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


class ServerExited(AssertionError):
    """A server died while starting: most likely another process took its port between
    :func:`free_ports` and the server's bind (the range overlaps the ephemeral ports)."""


def plain_client(port: int, password: str | None = PASSWORD) -> redis.Redis:
    """A direct, non-cluster client to one server (for set-up and inspection)."""
    return redis.Redis(host=HOST, port=port, password=password, decode_responses=True,
                       socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))  # callers poll


class Server:
    """One redis-server (or redis-sentinel) process, its folder and its log."""

    def __init__(self, directory: Path, port: int, args: list[str], password: str | None, sentinel: bool = False):
        self.directory, self.port, self.password = directory, port, password
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "redis.log"
        binary = shutil.which("redis-sentinel" if sentinel else "redis-server")
        if binary is None:
            pytest.fail("redis-sentinel is not installed (apt-get install redis-sentinel)" if sentinel
                        else "redis-server is not installed")
        if sentinel:
            # A sentinel rewrites its configuration file as it learns the topology.
            config = directory / "sentinel.conf"
            config.write_text("\n".join(args) + "\n")
            command = [binary, str(config)]
        else:
            command = [binary, "--port", str(port), "--bind", HOST, "--dir", str(directory),
                       "--logfile", str(self.log), "--save", "", "--appendonly", "no",
                       # A replica's first sync starts at once rather than after 5 s.
                       "--repl-diskless-sync-delay", "0", *args]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def client(self) -> redis.Redis:
        return plain_client(self.port, self.password)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ping(self) -> None:
        def answers():
            if not self.alive:
                raise ServerExited(f"server on port {self.port} exited; log:\n{self._log_tail()}")
            return self.client().ping()

        wait_until(answers, START_TIMEOUT_S, f"the server on port {self.port} to answer")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last write, as a machine that dies."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.alive:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-20:])
        except OSError:
            return "(no log)"


def cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` as a dict."""
    text = client.execute_command("CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def cluster_nodes(client: redis.Redis) -> dict[int, dict]:
    """``CLUSTER NODES`` as this node sees it: port -> {id, role, master (port or None),
    failed, slots [(first, last)]}. (``CLUSTER SLOTS`` lists a replica only seconds after
    it has synced, so the set-up reads roles from here.)"""
    lines = [line.split() for line in client.execute_command("CLUSTER", "NODES").splitlines() if line.strip()]
    port_of = {fields[0]: int(fields[1].split("@")[0].rsplit(":", 1)[1]) for fields in lines}
    nodes = {}
    for fields in lines:
        flags = fields[2].split(",")
        slots = []
        for part in fields[8:]:
            if not part.startswith("["):  # "[slot->-id]" are slots being migrated
                first, _, last = part.partition("-")
                slots.append((int(first), int(last or first)))
        nodes[port_of[fields[0]]] = {"id": fields[0], "role": "master" if "master" in flags else "replica",
                                     "master": port_of.get(fields[3]), "failed": "fail" in flags or "fail?" in flags,
                                     "slots": slots}
    return nodes


def _auth_args(password: str | None) -> list[str]:
    return ["--requirepass", password, "--masterauth", password] if password else []


def _sync_replicas(master: redis.Redis, replicas: int) -> None:
    """Wait until ``replicas`` replicas have acknowledged every write the master took, so
    that a SIGKILL right after loses nothing (Redis replication is asynchronous)."""
    wait_until(lambda: master.execute_command("WAIT", replicas, 1000) >= replicas, START_TIMEOUT_S,
               "the replicas to catch up")


# ----------------------------------------------------------------------------- Redis Cluster
class ClusterSet:
    """A Redis Cluster of ``masters`` masters, each with one replica."""

    def __init__(self, directory: Path, masters: int = 3, password: str | None = PASSWORD,
                 node_timeout_ms: int = 2000):
        self.directory, self.password = directory, password
        self.servers: dict[int, Server] = {}
        ports = free_ports(2 * masters, bus=True)
        for port in ports:
            self.servers[port] = Server(
                directory / str(port), port,
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(node_timeout_ms),
                 # A replica whose master died long ago may still take over: the tests kill
                 # masters and expect a promotion whatever the timing.
                 "--cluster-replica-validity-factor", "0", *_auth_args(password)],
                password)
        try:
            for server in self.servers.values():
                server.wait_ping()
            auth = ["-a", password, "--no-auth-warning"] if password else []
            created = subprocess.run(["redis-cli", *auth, "--cluster", "create",
                                      *(f"{HOST}:{port}" for port in ports),
                                      "--cluster-replicas", "1", "--cluster-yes"],
                                     capture_output=True, text=True, timeout=START_TIMEOUT_S)
            if created.returncode != 0:
                raise AssertionError(f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}")
            self.wait_healthy(masters)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """The ``redis+cluster://`` URL with every node as a seed."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis+cluster://{auth}" + ",".join(f"{HOST}:{port}" for port in self.live_ports())

    def live_ports(self) -> list[int]:
        return [port for port, server in self.servers.items() if server.alive]

    def topology(self) -> dict[int, dict]:
        """:func:`cluster_nodes` as seen by the first live node that answers."""
        for port in self.live_ports():
            try:
                return cluster_nodes(self.servers[port].client())
            except redis.RedisError:
                continue
        raise AssertionError("no cluster node answers")

    def masters(self) -> dict[int, list[int]]:
        """master port -> its replicas' ports, for masters serving slots."""
        nodes = self.topology()
        return {port: [p for p, n in nodes.items() if n["master"] == port]
                for port, node in nodes.items() if node["role"] == "master" and node["slots"] and not node["failed"]}

    def wait_healthy(self, masters: int) -> None:
        """Every live node says the cluster is ok and sees the same live masters, which
        cover every slot, each with a live replica that has synced."""
        live = set(self.live_ports())

        def healthy():
            views = []
            for port in live:
                client = self.servers[port].client()
                if cluster_info(client).get("cluster_state") != "ok":
                    return False
                nodes = cluster_nodes(client)
                views.append({p: (n["role"], n["master"], tuple(n["slots"])) for p, n in nodes.items()
                              if p in live and not n["failed"]})
            if any(view != views[0] for view in views):
                return False
            serving = {p: slots for p, (role, _, slots) in views[0].items() if role == "master" and slots}
            if len(serving) != masters or sum(last - first + 1 for slots in serving.values()
                                              for first, last in slots) != 16384:
                return False
            for master in serving:
                replicas = [p for p, (role, of, _) in views[0].items() if role == "replica" and of == master]
                if not replicas or any(self.servers[r].client().info("replication").get("master_link_status")
                                       != "up" for r in replicas):
                    return False
            return True

        wait_until(healthy, START_TIMEOUT_S, "the cluster to be ok", interval_s=0.1)

    def master_of(self, key: str) -> int:
        client = self.servers[self.live_ports()[0]].client()
        slot = client.execute_command("CLUSTER", "KEYSLOT", key)
        for port, node in cluster_nodes(client).items():
            if node["role"] == "master" and not node["failed"] and any(a <= slot <= b for a, b in node["slots"]):
                return port
        raise AssertionError(f"no master serves slot {slot}")

    def kill_master_of(self, key: str) -> tuple[int, int]:
        """SIGKILL the master serving ``key``'s slot (once its replica has every write),
        wait until the replica has taken over and the cluster is ok again.
        Returns (killed port, new master port)."""
        master = self.master_of(key)
        masters = self.masters()
        replicas = masters[master]
        _sync_replicas(self.servers[master].client(), len(replicas))
        self.servers[master].kill()

        def promoted():
            for replica in replicas:
                if self.servers[replica].client().execute_command("ROLE")[0] == "master":
                    return replica
            return None

        new_master = wait_until(promoted, FAILOVER_TIMEOUT_S, f"a replica of {master} to be promoted", 0.1)

        def settled():
            live = self.live_ports()
            return (all(cluster_info(self.servers[p].client()).get("cluster_state") == "ok" for p in live)
                    and self.master_of(key) == new_master and len(self.masters()) == len(masters))

        wait_until(settled, FAILOVER_TIMEOUT_S, "the cluster to be ok after the failover", 0.1)
        return master, new_master

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


# ----------------------------------------------------------------------------- Sentinel
class SentinelSet:
    """A master, one replica and ``sentinels`` sentinels watching it as ``MASTER_NAME``."""

    def __init__(self, directory: Path, sentinels: int = 3, password: str | None = PASSWORD,
                 sentinel_password: str | None = None, down_after_ms: int = 1000):
        self.directory, self.password, self.sentinel_password = directory, password, sentinel_password
        master_port, replica_port, *sentinel_ports = free_ports(2 + sentinels)
        self.servers: dict[int, Server] = {}
        self.sentinels: list[Server] = []
        try:
            self.servers[master_port] = Server(directory / "master", master_port, _auth_args(password), password)
            self.servers[master_port].wait_ping()
            self.servers[replica_port] = Server(directory / "replica", replica_port,
                                                ["--replicaof", HOST, str(master_port), *_auth_args(password)],
                                                password)
            self.servers[replica_port].wait_ping()
            wait_until(lambda: self.servers[replica_port].client().info("replication").get("master_link_status")
                       == "up", START_TIMEOUT_S, "the replica to sync")
            for i, port in enumerate(sentinel_ports):
                lines = [f"port {port}", f"bind {HOST}", f"dir {directory / f'sentinel{i}'}",
                         f"logfile {directory / f'sentinel{i}' / 'redis.log'}",
                         f"sentinel monitor {MASTER_NAME} {HOST} {master_port} 2",
                         # Known from the start rather than from the master's INFO, 10 s later.
                         f"sentinel known-replica {MASTER_NAME} {HOST} {replica_port}",
                         f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}",
                         f"sentinel failover-timeout {MASTER_NAME} 10000"]
                if password:
                    lines.append(f"sentinel auth-pass {MASTER_NAME} {password}")
                if sentinel_password:
                    lines.append(f"requirepass {sentinel_password}")
                server = Server(directory / f"sentinel{i}", port, lines, sentinel_password, sentinel=True)
                self.sentinels.append(server)
            for server in self.sentinels:
                server.wait_ping()
            # Ready when every sentinel knows the replica and the other sentinels.
            def ready():
                for server in self.sentinels:
                    master = server.client().execute_command("SENTINEL", "MASTER", MASTER_NAME)
                    if int(master["num-slaves"]) < 1 or int(master["num-other-sentinels"]) < sentinels - 1:
                        return False
                return True

            wait_until(ready, START_TIMEOUT_S, "the sentinels to know each other and the replica", 0.1)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        query = f"?sentinel_password={self.sentinel_password}" if self.sentinel_password else ""
        return (f"redis+sentinel://{auth}" + ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
                + f"/{MASTER_NAME}{query}")

    def master_ports(self) -> set[int]:
        """The master's port as each live sentinel reports it (one, unless they disagree)."""
        return {int(s.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)[1])
                for s in self.sentinels if s.alive}

    def master_port(self) -> int:
        ports = self.master_ports()
        assert len(ports) == 1, f"sentinels disagree on the master: {ports}"
        return ports.pop()

    def kill_master(self) -> tuple[int, int]:
        """SIGKILL the master (once the replica has every write), wait until the sentinels
        have promoted the replica and it accepts writes. Returns (killed port, new master port)."""
        old = self.master_port()
        master = self.servers[old]
        _sync_replicas(master.client(), len(self.servers) - 1)
        master.kill()

        def promoted():
            ports = self.master_ports()
            if len(ports) != 1 or old in ports:
                return None  # not every sentinel has heard of the promotion yet
            port = ports.pop()
            role = self.servers[port].client().execute_command("ROLE")
            return port if role[0] == "master" else None

        new = wait_until(promoted, FAILOVER_TIMEOUT_S, "the sentinels to promote the replica", 0.1)
        return old, new

    def stop(self) -> None:
        for server in [*self.sentinels, *self.servers.values()]:
            server.stop()


# ----------------------------------------------------------------------------- fixtures
def start(kind, directory_for, attempts: int = 3, **options):
    """``kind(directory, **options)``, started again on other ports if a server could not
    keep the ports it was given."""
    for attempt in range(attempts):
        try:
            return kind(directory_for(), **options)
        except ServerExited:
            if attempt == attempts - 1:
                raise


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory) -> ClusterSet:
    """A Redis Cluster shared by the session's tests (which must not break it)."""
    cluster = start(ClusterSet, lambda: tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory) -> SentinelSet:
    """A Sentinel set-up shared by the session's tests (which must not break it); its
    sentinels require a password of their own."""
    setup = start(SentinelSet, lambda: tmp_path_factory.mktemp("sentinel"), sentinel_password="sentinel-" + PASSWORD)
    yield setup
    setup.stop()


def _factory(kind, folder: str, tmp_path_factory):
    """``make(**options)`` starts a set-up of ``kind`` of the test's own; all are stopped
    when the generator is closed."""
    started = []

    def make(**options):
        started.append(start(kind, lambda: tmp_path_factory.mktemp(folder), **options))
        return started[-1]

    yield make
    for setup in started:
        setup.stop()


@pytest.fixture
def cluster_factory(tmp_path_factory):
    """Start a Redis Cluster of one's own (for a test that kills its nodes): ``cluster_factory()``."""
    yield from _factory(ClusterSet, "cluster", tmp_path_factory)


@pytest.fixture
def sentinel_factory(tmp_path_factory):
    """Start a Sentinel set-up of one's own (for a test that kills its master)."""
    yield from _factory(SentinelSet, "sentinel", tmp_path_factory)


"""Shared fixtures: one real MariaDB sandbox (primary + replica) per test session,
in a temporary directory, stopped at the end."""

import contextlib
import itertools
import logging
import os
import threading
import time

import pytest

from bridge.check import positions
from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl, PrimaryConfig, ReplicaConfig
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.model import GtidSet
from bridge.node.primary import PrimaryNode
from bridge.node.replica import ReplicaNode
from bridge.server.flavor import Flavor
from tests.helpers import set_semi_sync

_channels = itertools.count(1)
STOP_WAIT_S = 10.0  # for both nodes' threads to notice stop() before they are closed under them


SERVERS_ENV = "RDMA_BRIDGE_TEST_SERVERS"  # FLAVOR, or PRIMARY_FLAVOR,REPLICA_FLAVOR (bridge.lab.images); default local


def server_flavors() -> tuple[str | None, str | None]:
    """(primary, replica) flavors the suite runs against (`make test-matrix` sets them)."""
    given = [f.strip() for f in os.environ.get(SERVERS_ENV, "").split(",") if f.strip()]
    return (given[0], given[-1]) if given else (None, None)


def sandbox_up(box: Sandbox, **options) -> dict:
    """``box.up(**options)`` with the servers of the flavors the suite runs against."""
    flavor, replica_flavor = server_flavors()
    return box.up(flavor=flavor, replica_flavor=replica_flavor, **options)


@contextlib.contextmanager
def relay_sandbox(tmp_path_factory, name: str, **options):
    """A sandbox of a module's own, for apply mode relay (whose replica server becomes a
    real replica, which the shared sandbox's tests must not meet): (Sandbox, its info),
    taken down at the end; the module is skipped for a pair of two flavors."""
    primary, replica = server_flavors()
    if primary != replica:
        pytest.skip("apply mode relay: one flavor per pair")
    box = Sandbox(tmp_path_factory.mktemp(name))
    try:
        yield box, sandbox_up(box, **options)
    finally:
        box.down()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("sandbox"))
    info = sandbox_up(box)
    yield box, info
    box.down()


@pytest.fixture(scope="session")
def urls(sandbox):
    _, info = sandbox
    return {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}


@pytest.fixture(scope="session")
def flavors(urls) -> tuple[Flavor, Flavor]:
    """(primary, replica) flavors of the sandbox's servers (bridge.server.flavor)."""
    found = []
    for role in ("primary_admin", "replica_admin"):
        conn = connect(urls[role])
        found.append(Flavor.of(conn))
        conn.close()
    return found[0], found[1]


@pytest.fixture(scope="session")
def mysql_primary(flavors) -> bool:
    return flavors[0].is_mysql


@pytest.fixture(scope="session")
def mysql_replica(flavors) -> bool:
    return flavors[1].is_mysql


def primary_position(conn) -> str:
    return str(positions.primary_position(conn))


class BridgePair:
    """Both ends in this process (threads), on a fresh channel that starts at the
    primary's current position. ``sync()`` waits until the replica holds everything
    the primary committed; ``assert_same()`` compares the schemas row by row."""

    def __init__(self, urls, transport, ring_bytes=1 << 20, secret="", workers=1, metrics=False, heartbeat_s=0.0,
                 apply_mode="auto", **replica_options):
        self.urls, self.transport, self.ring_bytes, self.secret = urls, transport, ring_bytes, secret
        self.workers, self.heartbeat_s, self.apply_mode = workers, heartbeat_s, apply_mode
        self.replica_options = replica_options  # more ReplicaConfig fields (delay_s, until_gtid, ...)
        self.metrics = ("127.0.0.1", 0) if metrics else None
        n = next(_channels)
        self.channel, self.server_id = f"t{n}_{int(time.time())}", 5000 + n
        self.primary = connect(urls["primary_admin"])
        self.replica = connect(urls["replica_admin"])
        if apply_mode == "binlog" and Flavor.of(self.primary).kind != Flavor.of(self.replica).kind:
            self.primary.close()
            self.replica.close()
            pytest.skip("binlog apply mode needs one flavor on both ends (start-replica refuses it across "
                        "flavors); the sql mode's cases run instead")
        self.start_gtid = primary_position(self.primary)
        self.replica_node = self.primary_node = None
        self.threads = []
        self.errors = []

    def start_replica(self, port=0, target=None, host="127.0.0.1"):
        cfg = ReplicaConfig(target=target or self.urls["replica"], listen=(host, port), transport=self.transport,
                            ring_bytes=self.ring_bytes, channel=self.channel, secret=self.secret,
                            workers=self.workers, metrics=self.metrics, apply_mode=self.apply_mode,
                            **self.replica_options)
        self.replica_node = ReplicaNode(cfg)
        self.replica_node.start()
        self._thread(self.replica_node.run, "replica")
        return self.replica_node.address

    def start_primary(self, replica_addr=None, source=None, **overrides):
        cfg = PrimaryConfig(source=source or self.urls["primary"],
                            replica=tuple(replica_addr or self.replica_node.address),
                            transport=self.transport, start_gtid=self.start_gtid, heartbeat_s=0.1,
                            server_id=self.server_id, heartbeat_row_s=self.heartbeat_s, metrics=self.metrics,
                            **{"secret": self.secret, **overrides})
        self.primary_node = PrimaryNode(cfg)
        self.primary_node.connect()
        self.primary_thread = self._thread(self.primary_node.run, "primary")

    def stop_primary(self):
        """The primary side gone (as a stopped process is): stopped, its thread joined, closed."""
        self.primary_node.stop()
        self.primary_thread.join(STOP_WAIT_S)
        self.primary_node.close()

    def start(self):
        self.start_replica()
        self.start_primary()
        return self

    def _thread(self, target, name):
        def guarded():
            try:
                target()
            except Exception as exc:  # surfaced by sync() and stop(); the traceback in the captured log
                logging.getLogger("tests").exception("the %s thread failed", name)
                self.errors.append((name, exc))
        thread = threading.Thread(target=guarded, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()
        return thread

    def sql(self, *statements):
        with self.primary.cursor() as cur:
            for s in statements:
                cur.execute(s)

    def sync(self, timeout_s=60.0):
        """Until the replica holds the primary's position now. Fails once the replica's
        position stops moving for ``timeout_s`` (a long backlog on a slow machine is
        progress, not a hang)."""
        target = GtidSet.parse(primary_position(self.primary))
        deadline, held = time.monotonic() + timeout_s, None
        with self.replica.cursor() as cur:
            while time.monotonic() < deadline:
                assert not self.errors, f"bridge failed: {self.errors}"
                halt = self.replica_node.halt if self.replica_node is not None else None
                assert halt is None, f"applying stopped at seq {halt.seq} ({halt.gtid}): {halt.error}"
                cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (self.channel,))
                row = cur.fetchone()
                if row and GtidSet.parse(row[0]).contains_all(target):  # heartbeats may run past it
                    return
                if row and row[0] != held:
                    deadline, held = time.monotonic() + timeout_s, row[0]
                time.sleep(0.02)
        raise AssertionError(f"replica did not reach {target}: no progress past {held} in {timeout_s}s "
                             f"(errors: {self.errors})")

    def assert_same(self, *schemas):
        self.sync()
        result = compare_databases(self.urls["primary_admin"], self.urls["replica_admin"], list(schemas))
        assert result.digests, f"nothing compared in {schemas}"
        assert result.ok, [(d.table, d.missing, d.extra, d.sample) for d in result.diffs]
        return result

    def stop(self):
        """Stop both nodes, wait for their threads, then close them: closing under a
        running step would fail it (the CLI closes a node after its run returned)."""
        nodes = [node for node in (self.primary_node, self.replica_node) if node is not None]
        for node in nodes:
            node.stop()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        for node in nodes:
            node.close()
        self.primary.close()
        self.replica.close()


@pytest.fixture(params=[("shm", "binlog"), ("tcp", "binlog"), ("shm", "sql")], ids=lambda p: "-".join(p))
def pair(request, urls):
    """A running pair over each transport in binlog apply mode, and over shm in sql mode."""
    transport, mode = request.param
    p = BridgePair(urls, transport, apply_mode=mode).start()
    yield p
    p.stop()
    assert not p.errors, p.errors


@pytest.fixture
def semi_sync_primary(urls):
    """Semi-sync ON at the sandbox primary with a 1 s timeout (a test may set another), OFF after."""
    admin = connect(urls["primary_admin"])
    set_semi_sync(admin, timeout=1000, enabled="ON")  # ms: a lost ACK costs a test 1 s
    yield admin
    set_semi_sync(admin, enabled="OFF", timeout=1000)
    admin.close()


@pytest.fixture
def fresh_schema(urls):
    """A schema name unique to the test; dropped on the primary at the end (the drop replicates)."""
    names = []

    def make(prefix="db"):
        name = f"{prefix}_{next(_channels)}"
        names.append(name)
        return name
    yield make

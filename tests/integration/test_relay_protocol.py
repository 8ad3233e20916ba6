"""The relay's served protocol (bridge.relay) against a real replica server's IO thread:
a sandbox's native replica of the primary (MariaDB's or MySQL's own GTID replication) is
pointed at a RelayServer whose feed is the primary's own binlog dump, passed through. It
logs in with its plugin, asks its queries, registers, dumps from its GTID state, gets
heartbeats while idle, and applies what the primary writes with the server's own SQL
thread: the databases are compared. A wrong password is refused as a server refuses it.
Afterwards the native replica is pointed back at the primary.

The feed here stands in for the ring's (apply mode relay, to come): what is tested is
the served protocol, not where the events come from."""

from __future__ import annotations

import json
import queue
import struct
import threading
import time

import pymysql
import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.relay.answers import SourceFacts
from bridge.relay.server import DumpRequest, FeedError, RelayServer
from bridge.server import dbconn
from bridge.server.flavor import Flavor
from tests.conftest import sandbox_up, server_flavors
from tests.helpers import wait_for

NATIVE_USER = "rdma_native"  # the native replica's account on the primary (bridge.lab.native)


class PrimaryDump:
    """The primary's binlog dump from the position a replica asked the relay for, read
    by a thread into a queue: the events as the primary sent them."""

    def __init__(self, url, request: DumpRequest) -> None:
        self.conn = dbconn.connect(url, autocommit=True)
        server_id = 4000 + request.replica_server_id
        with self.conn.cursor() as cur:
            if request.checksum:
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            if request.mysql_gtids is None:
                cur.execute("SET @mariadb_slave_capability = 4")
                cur.execute("SET @slave_connect_state = %s", (request.mariadb_state or "",))
        if request.mysql_gtids is None:
            self.conn._execute_command(0x12, struct.pack("<IHI", 4, 0, server_id))
        else:  # COM_BINLOG_DUMP_GTID with the replica's own GTID set
            file = request.file.encode()
            self.conn._execute_command(0x1E, struct.pack("<HII", request.flags, server_id, len(file)) + file
                                       + struct.pack("<QI", request.position, len(request.mysql_gtids))
                                       + request.mysql_gtids)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="primary-dump", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.conn._read_packet().get_all_data()
                if data[:1] != b"\x00":
                    break
                self.events.put(data[1:])
        except (pymysql.MySQLError, OSError) as exc:
            self.events.put(exc)

    def next(self, timeout_s: float) -> bytes | None:
        try:
            item = self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise FeedError(f"the primary's dump ended: {item}")
        return item

    def close(self) -> None:
        try:
            self.conn._sock.close()
        except (OSError, AttributeError):
            pass


class PassThrough:
    def __init__(self, url) -> None:
        self.url = url
        self.opened: list[DumpRequest] = []

    def open(self, request: DumpRequest) -> PrimaryDump:
        self.opened.append(request)
        return PrimaryDump(self.url, request)


def _facts(conn, flavor: Flavor) -> SourceFacts:
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@binlog_checksum")
        server_id, checksum = cur.fetchone()
        names = ("gtid_mode", "server_uuid") if flavor.is_mysql else ("gtid_domain_id",)
        cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))
        variables = {n: str(v) for n, v in zip(names, cur.fetchone())}
    version = conn.get_server_info()
    if not flavor.is_mysql:  # a MariaDB server's handshake says 5.5.5- first (old clients compare it)
        version = "5.5.5-" + version.removeprefix("5.5.5-")
    return SourceFacts(version=version, server_id=server_id, checksum=checksum, variables=variables)


def replica_status(conn, flavor: Flavor) -> dict:
    """The native replica's IO and SQL threads, errors, source and heartbeats, in one shape."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        if flavor.is_mysql:
            cur.execute("SHOW REPLICA STATUS")
            row = cur.fetchone() or {}
            cur.execute("SELECT COUNT_RECEIVED_HEARTBEATS AS n FROM performance_schema.replication_connection_status "
                        "WHERE CHANNEL_NAME = ''")
            beats = (cur.fetchone() or {"n": 0})["n"]
            prefix, source = "Replica", "Source"
        else:
            cur.execute("SHOW ALL SLAVES STATUS")  # it has the heartbeats received too
            row = next((r for r in cur.fetchall() if r["Connection_name"] == ""), {})
            beats, prefix, source = row.get("Slave_received_heartbeats", 0), "Slave", "Master"
    return {"io": row.get(f"{prefix}_IO_Running"), "sql": row.get(f"{prefix}_SQL_Running"),
            "io_errno": row.get("Last_IO_Errno"), "io_error": row.get("Last_IO_Error"),
            "sql_errno": row.get("Last_SQL_Errno"), "source_id": row.get(f"{source}_Server_Id"),
            "heartbeats": int(beats or 0)}


def _point(conn, flavor: Flavor, port: int, password: str, fast: bool) -> None:
    statement, params = flavor.change_source(port, NATIVE_USER, password, None)
    with conn.cursor() as cur:
        cur.execute(flavor.stop_replica)
        cur.execute(statement, params)
        if fast:  # reconnect at once, a heartbeat every half second while idle, no TLS (the relay has none yet;
            # MySQL 9.7 and MariaDB 11.8 replicas ask for it by default)
            cur.execute("CHANGE REPLICATION SOURCE TO SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD=0.5, SOURCE_SSL=0"
                        if flavor.is_mysql else "CHANGE MASTER TO MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=0.5, MASTER_SSL=0")
        cur.execute(flavor.start_replica)


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A sandbox of its own: its native replica is pointed away from the primary and back."""
    primary, replica = server_flavors()
    if primary != replica:  # relay mode serves a replica of the primary's own flavor and version
        pytest.skip("relay mode: one flavor and version per pair")
    own = Sandbox(tmp_path_factory.mktemp("relay"))
    yield own, sandbox_up(own, native_replica=True)
    own.down()


@pytest.fixture
def relay(box):
    box, info = box
    state = json.loads(box.state_file.read_text())
    password, primary_port = state["passwords"]["apply"], state["ports"]["primary"]
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
    pconn, nconn = connect(urls["primary_admin"]), connect(urls["native_admin"])
    flavor = Flavor.of(pconn)
    feed = PassThrough(urls["primary"])
    server = RelayServer(("127.0.0.1", 0), _facts(pconn, flavor), feed, NATIVE_USER, password).start()
    try:
        yield server, feed, flavor, pconn, nconn, urls, password
    finally:
        _point(nconn, flavor, primary_port, password, fast=False)
        server.close()
        pconn.close()
        nconn.close()


def test_a_native_replica_replicates_through_the_relay_as_from_its_primary(relay):
    server, feed, flavor, pconn, nconn, urls, password = relay
    schema = "relay_pass"
    _point(nconn, flavor, server.address[1], password, fast=True)
    try:
        wait_for(lambda: replica_status(nconn, flavor)["io"] == "Yes", "the IO thread connected to the relay",
                 timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {replica_status(nconn, flavor)}") from None
    create_schema(pconn, schema)
    MixedWorkload(pconn, schema, seed=59).run(300)
    wait_for(lambda: compare_databases(urls["primary_admin"], urls["native_admin"], [schema]).ok,
             "the native replica equal to the primary", timeout_s=90)
    time.sleep(1.5)  # idle for three heartbeat periods
    status = replica_status(nconn, flavor)
    assert (status["io"], status["sql"], status["io_errno"], status["sql_errno"]) == ("Yes", "Yes", 0, 0), status
    assert status["source_id"] == server.facts.server_id, status
    assert status["heartbeats"] >= 2, ("no heartbeats reached the replica while it was idle", status)
    request = feed.opened[-1]
    assert request.checksum, request
    assert (request.mysql_gtids is not None) == flavor.is_mysql and (request.mariadb_state is None) == flavor.is_mysql
    result = compare_databases(urls["primary_admin"], urls["native_admin"], [schema])
    assert result.ok and result.digests, [(d.table, d.missing, d.extra) for d in result.diffs]


def test_a_wrong_password_is_refused_as_a_server_refuses_it(relay):
    server, feed, flavor, _, nconn, _, _ = relay
    _point(nconn, flavor, server.address[1], "not-the-password", fast=True)
    wait_for(lambda: replica_status(nconn, flavor)["io_errno"] == 1045, "the IO thread refused with error 1045",
             timeout_s=30)
    assert f"Access denied for user '{NATIVE_USER}'" in replica_status(nconn, flavor)["io_error"]
    assert feed.opened == [] and server.served == 0

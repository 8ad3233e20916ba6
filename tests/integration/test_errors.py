"""Bad settings, bad credentials, unreachable peers and hostile bytes get a clear
error that names the thing at fault, never a password, and lose nothing."""

import dataclasses
import itertools
import socket
import subprocess
import sys
import time

import pytest

from bridge.config import MysqlUrl, PrimaryConfig
from bridge.errors import (
    BinlogPurged,
    PreflightError,
    RemoteProtocolError,
    SourceConnectionLost,
    SourceError,
    TransportError,
)
from bridge.lab.sandbox import Sandbox
from bridge.model import GtidSet
from bridge.node.primary import PrimaryNode
from bridge.source.preflight import check_not_purged, check_position
from bridge.transport.sockets import ControlConnection
from bridge.wire import control
from tests.conftest import BridgePair


@pytest.fixture
def set_global(urls):
    """SET GLOBAL on the sandbox primary, restored afterwards."""
    from bridge.lab.workload import connect

    conn, saved = connect(urls["primary_admin"]), []

    def setter(name, value):
        with conn.cursor() as cur:
            cur.execute(f"SELECT @@global.{name}")
            saved.append((name, cur.fetchone()[0]))
            cur.execute(f"SET GLOBAL {name}=%s", (value,))
    yield setter
    with conn.cursor() as cur:
        for name, value in reversed(saved):
            cur.execute(f"SET GLOBAL {name}=%s", (value,))
    conn.close()


_server_ids = itertools.count(9000)


def primary_node(urls, replica_addr=("127.0.0.1", 1), **overrides):
    cfg = PrimaryConfig(source=urls["primary"], replica=replica_addr, transport="shm", server_id=next(_server_ids))
    return PrimaryNode(dataclasses.replace(cfg, **overrides))


@pytest.mark.parametrize("name,value,fix", [("binlog_format", "STATEMENT", "binlog_format=ROW"),
                                            ("binlog_row_image", "MINIMAL", "binlog_row_image=FULL"),
                                            ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata=FULL")])
def test_unsafe_binlog_settings_are_refused_with_the_fix(urls, set_global, name, value, fix):
    set_global(name, value)
    with pytest.raises(PreflightError, match=f"{name} is {value}.*{fix}"):
        primary_node(urls).connect()


def test_server_id_clash_with_the_primary(urls):
    with pytest.raises(PreflightError, match="server_id clash.*--server-id"):
        primary_node(urls, server_id=1).connect()


def test_server_id_clash_with_a_connected_replica(urls):
    pair = BridgePair(urls, "shm").start()
    try:
        for _ in range(200):  # the stream registers on its first read
            with pair.primary.cursor() as cur:
                if cur.execute("SHOW SLAVE HOSTS"):
                    break
            time.sleep(0.02)
        taken = pair.server_id
        with pytest.raises(PreflightError, match=f"server_id {taken} is already used by replica 'rdma-bridge 127"):
            primary_node(urls, replica_addr=("127.0.0.1", 1), server_id=taken).connect()
        # the same bridge restarted (same name) replaces its old registration
        primary_node(urls, replica_addr=tuple(pair.replica_node.address), server_id=taken)._preflight()
    finally:
        pair.stop()


def test_bad_credentials_name_the_server_not_the_password(urls):
    bad = dataclasses.replace(urls["primary"], password="wrong-secret-xyz")
    with pytest.raises(SourceError) as err:
        primary_node(urls, source=bad).connect()
    assert "Access denied" in str(err.value) and str(bad.port) in str(err.value)
    assert "wrong-secret-xyz" not in str(err.value)


def test_unreachable_primary_is_retryable_and_named(urls):
    gone = MysqlUrl("127.0.0.1", _closed_port(), "x", "pw")
    with pytest.raises(SourceConnectionLost, match=f"127.0.0.1:{gone.port}"):
        primary_node(urls, source=gone).connect()


def test_unreachable_replica_is_named(urls):
    port = _closed_port()
    with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
        primary_node(urls, replica_addr=("127.0.0.1", port)).connect()


def test_position_checks():
    settings = {"gtid_binlog_pos": "0-1-100"}
    url = MysqlUrl("h", 1, "u")
    with pytest.raises(SourceError, match="domain 5 is not in"):
        check_position(settings, GtidSet.parse("5-1-3"), url)
    with pytest.raises(SourceError, match="ahead of the primary"):
        check_position(settings, GtidSet.parse("0-1-101"), url)
    check_position(settings, GtidSet.parse("0-1-99"), url)
    check_not_purged(GtidSet.parse("0-1-40"), GtidSet.parse("0-1-40"), url)  # the oldest binlog starts right there
    check_not_purged(GtidSet(), GtidSet.parse("0-1-3"), url)  # nothing purged
    with pytest.raises(BinlogPurged, match=r"domain 0: seq 4 to 40; domain 1: seq 1 to 7\).*copy its data again"):
        check_not_purged(GtidSet.parse("0-1-40,1-2-7"), GtidSet.parse("0-1-3"), url)


def test_a_purged_binlog_is_named_with_the_missing_range_and_not_retried(tmp_path):
    box = Sandbox(tmp_path / "purged")
    info = box.up()
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
    pair = BridgePair(urls, "shm")
    try:
        pair.start()
        pair.sql("CREATE DATABASE purged", "CREATE TABLE purged.t (id INT PRIMARY KEY)", "INSERT INTO purged.t VALUES (1)")
        pair.sync()
        pair.stop_primary()
        with pair.primary.cursor() as cur:
            deadline = time.monotonic() + 30  # a binlog still held by a dump thread is not purged
            while cur.execute("SELECT 1 FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'"):
                assert time.monotonic() < deadline, "the closed primary side's dump thread did not end"
                time.sleep(0.05)
            cur.execute("INSERT INTO purged.t VALUES (2)")
            cur.execute("INSERT INTO purged.t VALUES (3)")
            cur.execute("SELECT @@gtid_binlog_pos")
            last = GtidSet.parse(cur.fetchone()[0]).mariadb[0]
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            current = cur.fetchone()[0]
            while cur.execute(f"PURGE BINARY LOGS TO '{current}'") is not None and \
                    cur.execute("SHOW BINARY LOGS") > 1:  # the older one goes once its checkpoint is written
                assert time.monotonic() < deadline, "the older binlog was never purged"
                time.sleep(0.1)
        with pytest.raises(BinlogPurged, match=rf"domain 0: seq {last.seq - 1} to {last.seq}\).*copy its data again"):
            pair.start_primary()
        assert not pair.errors
    finally:
        pair.stop()
        box.down()


def test_wrong_transport_version_skew_and_garbage_keep_the_replica_serving(urls, fresh_schema):
    pair = BridgePair(urls, "shm")
    addr = pair.start_replica()
    try:
        with pytest.raises(RemoteProtocolError, match="refused by peer: .*wants transport 'tcp'.*serves 'shm'"):
            primary_node(urls, replica_addr=tuple(addr), transport="tcp").connect()
        assert "protocol version 99" in _exchange(addr, control.encode_message({**control.hello("control"), "version": 99}))
        assert "not JSON" in _exchange(addr, b"\x05\x00\x00\x00garbage")
        assert "over the" in _exchange(addr, b"\xff\xff\xff\x7f" + b"x" * 64)
        pair.start_primary()
        s = fresh_schema("after_garbage")
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        pair.assert_same(s)
    finally:
        pair.stop()


def test_cli_errors_are_one_line_and_mask_passwords():
    done = subprocess.run([sys.executable, "-m", "bridge", "start-primary", "--source",
                           "mysql://u:topsecret@127.0.0.1:1", "--replica", "127.0.0.1:1", "--reconnect-attempts", "0"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "rdma-bridge: error: connect to primary mysql://u:***@127.0.0.1:1" in done.stderr
    assert "topsecret" not in done.stderr + done.stdout


def test_cli_help_teaches():
    out = subprocess.run([sys.executable, "-m", "bridge", "start-replica", "--help"], capture_output=True,
                         text=True, timeout=30).stdout
    assert "Example:" in out and "--ring-bytes" in out and "RDMA_BRIDGE_TARGET_PASSWORD" in out


def _exchange(addr, data: bytes) -> str:
    """Send raw bytes after the replica's challenge; the reason of its error reply."""
    with socket.create_connection(tuple(addr), timeout=5) as s:
        conn = ControlConnection(s)
        assert conn.recv()["type"] == "challenge"
        s.sendall(data)
        reply = conn.recv()
    return reply.get("reason", "")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

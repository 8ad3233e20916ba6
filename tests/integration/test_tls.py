"""TLS end to end: a sandbox whose servers take TCP clients only over TLS, the bridge's
own connections (control, tcp data, admin) over mutually verified TLS; what is refused
(a certificate of another CA, either way; plain TCP against TLS and the reverse; a
wrong CA for a server) is refused at once with an error saying why."""

import dataclasses
import logging
import os
import ssl
import subprocess
import sys
import time
import urllib.request

import pymysql
import pytest

from bridge.config import MysqlUrl, PrimaryConfig, ReplicaConfig, TlsFiles
from bridge.errors import EXIT_CONFIG, ApplyError, AuthenticationError, ConfigError, RemoteProtocolError, SourceError
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.node import admin
from bridge.node.primary import PrimaryNode
from bridge.node.replica import ReplicaNode
from bridge.ops.certs import make_set
from bridge.transport.tls import client_context
from tests.conftest import BridgePair
from tests.helpers import wait_for

SECRET = "tls and a secret"


@pytest.fixture(scope="module")
def tls_box(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("tls-sandbox"))
    info = box.up(tls=True)
    yield info, {k: MysqlUrl.parse(v) for k, v in info.items() if isinstance(v, str) and v.startswith("mysql://")}
    box.down()


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    """Certificates of another CA, valid for the same names."""
    made = make_set(tmp_path_factory.mktemp("other-ca"), ["localhost", "127.0.0.1"])
    return TlsFiles(str(made.cert), str(made.key), str(made.ca))


def sandbox_files(info) -> TlsFiles:
    return TlsFiles(**info["tls"])


def primary_cfg(pair, **changes) -> PrimaryConfig:
    cfg = PrimaryConfig(source=pair.urls["primary"], replica=tuple(pair.replica_node.address), transport=pair.transport,
                        start_gtid=pair.start_gtid, server_id=pair.server_id, secret=SECRET,
                        reconnect_attempts=0)
    return dataclasses.replace(cfg, **changes)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_replication_over_tls_ends_equal(tls_box, fresh_schema_tls, transport):
    info, urls = tls_box
    s = fresh_schema_tls("tls")
    pair = BridgePair(urls, transport, secret=SECRET, tls=sandbox_files(info))
    pair.start_replica()
    pair.start_primary(tls=sandbox_files(info))
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20), b BLOB)",
                 *[f"INSERT INTO {s}.t VALUES ({i}, 'row {i}', REPEAT('x', {i * 50}))" for i in range(200)],
                 f"UPDATE {s}.t SET v = 'changed' WHERE id % 3 = 0", f"DELETE FROM {s}.t WHERE id % 7 = 0")
        pair.assert_same(s)
        node = pair.primary_node
        links = [node.link.control.sock] + ([node.remote._sock] if transport == "tcp" else [])
        for sock in links:  # the control channel and the data connection, verified TLS
            assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
            assert sock.getpeercert()["subject"] == ((("commonName", "localhost"),),)
        # the servers took the bridge's connections over TLS (plain TCP is refused there)
        with connect(urls["primary_admin"]).cursor() as cur:
            cur.execute("SELECT @@require_secure_transport")
            assert cur.fetchone()[0] == 1
    finally:
        pair.stop()


@pytest.fixture
def fresh_schema_tls(tls_box):
    _, urls = tls_box
    names = []

    def make(prefix):
        names.append(f"{prefix}_{int(time.time() * 1000) % 10**8}")
        return names[-1]
    yield make
    conn = connect(urls["primary_admin"])
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()


def test_a_wrong_ca_for_the_servers_is_refused_with_the_reason(tls_box, other):
    info, urls = tls_box
    wrong = {role: MysqlUrl.parse(info[role].replace(info["tls"]["ca"], other.ca)) for role in ("primary", "replica")}
    with pytest.raises(ApplyError, match="its TLS certificate is refused .*the URL's ssl-ca must be the CA"):
        ReplicaNode(ReplicaConfig(target=wrong["replica"], listen=("127.0.0.1", 0)))
    pair = BridgePair(urls, "tcp", secret=SECRET)
    pair.start_replica()
    try:
        node = PrimaryNode(primary_cfg(pair, source=wrong["primary"]))
        started = time.monotonic()
        with pytest.raises(SourceError, match="its TLS certificate is refused"):
            node.connect()
        assert time.monotonic() - started < 5  # refused, not retried
        node.close()
    finally:
        pair.stop()


def test_a_certificate_of_another_ca_is_refused_on_both_sides(tls_box, other, caplog):
    info, urls = tls_box
    mine = sandbox_files(info)
    pair = BridgePair(urls, "tcp", secret=SECRET, tls=mine)
    pair.start_replica()
    try:
        # the primary side trusts another CA: it refuses the replica side's certificate
        node = PrimaryNode(primary_cfg(pair, tls=other))
        with pytest.raises(AuthenticationError, match="its certificate is refused: .*issued by --tls-ca"):
            node.connect()
        node.close()
        # a peer shows a certificate of another CA (ours would refuse to start with it:
        # it does not verify against its own --tls-ca): the replica side refuses it
        with pytest.raises(ConfigError, match="does not verify against --tls-ca"):
            PrimaryNode(primary_cfg(pair, tls=TlsFiles(other.cert, other.key, mine.ca)))
        caplog.set_level(logging.WARNING, logger="bridge.node")
        node = PrimaryNode(primary_cfg(pair, tls=mine))
        node.tls = client_context(TlsFiles(other.cert, other.key, mine.ca))
        with pytest.raises(AuthenticationError, match="refused .*(unknown ca|certificate)"):
            node.connect()
        node.close()
        assert any("refused" in r.message and "certificate" in r.message for r in caplog.records)
        assert pair.replica_node.session == ""  # nobody got in
    finally:
        pair.stop()


def test_plain_tcp_and_tls_meet_a_clear_refusal_both_ways(tls_box):
    info, urls = tls_box
    pair = BridgePair(urls, "tcp", secret=SECRET, tls=sandbox_files(info))
    pair.start_replica()
    try:
        node = PrimaryNode(primary_cfg(pair))  # no TLS
        with pytest.raises(RemoteProtocolError, match="refused by peer: this replica side requires TLS"):
            node.connect()
        node.close()
        with pytest.raises(RemoteProtocolError, match="requires TLS"):  # the operator's commands too
            admin.request(pair.replica_node.address, SECRET, {"type": "resume"}, timeout_s=10)
        assert admin.request(pair.replica_node.address, SECRET, {"type": "resume"},
                             tls=sandbox_files(info)) == "applying was not stopped"
    finally:
        pair.stop()
    plain = BridgePair(urls, "tcp", secret=SECRET)
    plain.start_replica()
    try:
        node = PrimaryNode(primary_cfg(plain, tls=sandbox_files(info)))
        with pytest.raises(RemoteProtocolError, match="does not speak TLS"):
            node.connect()
        node.close()
    finally:
        plain.stop()


def test_beyond_loopback_tls_or_an_explicit_insecure_transport(tls_box, caplog):
    info, urls = tls_box
    cfg = ReplicaConfig(target=urls["replica"], listen=("0.0.0.0", 0), secret=SECRET, channel="tls_beyond")
    with pytest.raises(ConfigError, match="clear text: give --tls-cert, --tls-key and --tls-ca .*--insecure-transport"):
        ReplicaNode(cfg)
    caplog.set_level(logging.WARNING, logger="bridge.node")
    for changes in ({"insecure_transport": True}, {"tls": sandbox_files(info)}):
        node = ReplicaNode(dataclasses.replace(cfg, **changes))
        node.start()
        node.close()
    warned = [r.message for r in caplog.records if "--insecure-transport" in r.message]
    assert len(warned) == 1 and "clear text" in warned[0]


def test_no_key_password_or_secret_shows_in_logs_ps_metrics_status_or_errors(tls_box, fresh_schema_tls, tmp_path):
    """Both ends as real processes over TLS with a secret file and the URLs' passwords
    in the environment; then everything a user or another user on the host can see."""
    info, urls = tls_box
    s = fresh_schema_tls("secrets")
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    files = sandbox_files(info)
    tls_args = ("--tls-cert", files.cert, "--tls-key", files.key, "--tls-ca", files.ca, "--secret-file", str(secret_file))
    port = free_port()
    channel = f"tls_secrets_{port}"
    primary_conn = connect(urls["primary_admin"])
    with primary_conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        start = cur.fetchone()[0]
    replica = replica_process(info["replica"], port, "tcp", channel, str(tmp_path), extra=tls_args).start()
    primary = None
    try:
        wait_port(port, alive=replica.check_alive)
        primary = primary_process(info["primary"], port, "tcp", start, str(tmp_path), extra=tls_args).start()
        with primary_conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {s}.t VALUES (1), (2), (3)")
        replica_conn = connect(urls["replica_admin"])
        wait_for(lambda: _count(replica_conn, f"{s}.t") == 3, "the rows on the replica", alive=primary.check_alive)
        seen = [_get(p.metrics_address, path) for p in (primary, replica) for path in ("/metrics", "/status")]
        seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
        wrong_ca = info["primary"].replace(files.ca, str(tmp_path / "secret"))  # not a CA: refused, with an error
        failed = subprocess.run([sys.executable, "-m", "bridge", "start-primary", "--replica", f"127.0.0.1:{port}",
                                 "--transport", "tcp", *tls_args], capture_output=True, text=True,
                                env={**os.environ, "RDMA_BRIDGE_SOURCE": wrong_ca}, timeout=60)
        assert failed.returncode == EXIT_CONFIG and "rdma-bridge: error:" in failed.stderr  # a setting: not retried
        seen.append(failed.stdout + failed.stderr)
    finally:
        for proc in (primary, replica):
            if proc is not None:
                proc.stop()
    seen += [open(p.log_path).read() for p in (primary, replica)]
    assert "TLS, peers verified" in seen[-1]  # the replica side's log says how it listens
    key_lines = [line for line in open(files.key).read().splitlines() if line and not line.startswith("-----")]
    secrets = [urls["primary"].password, urls["replica"].password, SECRET, *key_lines]
    for text in seen:
        for secret in secrets:
            assert secret not in text


def _count(conn, table) -> int:
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
        except pymysql.MySQLError:
            return -1
        return cur.fetchone()[0]


def _get(address: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
        return resp.read().decode()

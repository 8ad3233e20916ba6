"""The relay's served protocol with a real client over a real socket (PyMySQL, which speaks
both password plugins a replica uses), and the events it makes itself, checked as a
replica checks them."""

from __future__ import annotations

import json
import struct
import zlib

import pymysql
import pytest

from bridge.errors import ConfigError, RemoteProtocolError
from bridge.ops.certs import make_set
from bridge.relay import auth, events
from bridge.relay.answers import Session, SourceFacts
from bridge.relay.channel import RelayChannel
from bridge.relay.server import DumpRequest, FeedError, RelayServer, relay_tls_context
from bridge.server.flavor import Flavor
from bridge.wire import binlog
from bridge.wire.mysqlgtid import decode_gtid_set, encode_gtid_set

MARIADB = SourceFacts(version="5.5.5-11.8.3-MariaDB-log", server_id=1, checksum="CRC32",
                      variables={"gtid_domain_id": "0"})
MYSQL = SourceFacts(version="9.7.0", server_id=7, checksum="CRC32",
                    variables={"gtid_mode": "ON", "server_uuid": "3e11fa47-71ca-11e1-9e33-c80aa9429562"})


class NoEvents:
    def open(self, request: DumpRequest):
        raise FeedError("no binlog here")


@pytest.fixture(params=[MARIADB, MYSQL], ids=["mariadb", "mysql"])
def served(request):
    server = RelayServer(("127.0.0.1", 0), request.param, NoEvents(), "relay", "pw-1").start()
    yield server
    server.close()


def _connect(server: RelayServer, password: str = "pw-1") -> pymysql.Connection:
    return pymysql.connect(host=server.address[0], port=server.address[1], user="relay", password=password,
                           ssl_disabled=True, connect_timeout=5, read_timeout=5)


def _one(conn, query: str):
    with conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchone()


def test_a_client_logs_in_with_the_plugin_of_the_primarys_flavor_and_gets_the_primarys_answers(served):
    conn = _connect(served)
    try:
        assert conn.get_server_info() == served.facts.version
        assert served.plugin == (auth.NATIVE if served.facts.mariadb else auth.CACHING_SHA2)
        assert _one(conn, "SELECT @@GLOBAL.SERVER_ID") == (served.facts.server_id,)
        assert _one(conn, "SHOW VARIABLES LIKE 'SERVER_ID'") == ("server_id", str(served.facts.server_id))
        assert abs(int(_one(conn, "SELECT UNIX_TIMESTAMP()")[0]) - int(__import__("time").time())) <= 2
        with conn.cursor() as cur:  # as a replica sets them: kept for the session, read back
            cur.execute("SET @master_binlog_checksum= @@global.binlog_checksum, @slave_connect_state='0-1-5'")
        assert _one(conn, "SELECT @master_binlog_checksum") == ("CRC32",)
        assert _one(conn, "SELECT @slave_connect_state") == ("0-1-5",)
        assert _one(conn, "SELECT @never_set") == (None,)
        name = "gtid_domain_id" if served.facts.mariadb else "server_uuid"
        assert _one(conn, f"SELECT @@GLOBAL.{name}") == (served.facts.variables[name],)
        with pytest.raises(pymysql.MySQLError) as unknown:
            _one(conn, "SELECT @@GLOBAL.no_such_variable")
        assert unknown.value.args[0] == 1193
        with pytest.raises(pymysql.MySQLError) as refused:
            _one(conn, "DROP DATABASE x")
        assert refused.value.args[0] == 1235 and "DROP DATABASE x" in refused.value.args[1]
        conn.ping(reconnect=False)
    finally:
        conn.close()


def test_a_wrong_password_or_user_is_refused_with_error_1045(served):
    with pytest.raises(pymysql.MySQLError) as wrong:
        _connect(served, password="pw-2")
    assert wrong.value.args[0] == 1045 and "relay" in wrong.value.args[1]
    with pytest.raises(pymysql.MySQLError) as empty:
        _connect(served, password="")
    assert empty.value.args[0] == 1045 and "using password: NO" in empty.value.args[1]


def test_a_dump_the_feed_cannot_serve_gets_error_1236_with_the_feeds_reason(served):
    conn = _connect(served)
    try:
        conn._execute_command(0x12, struct.pack("<IHI", 4, 0, 99))
        with pytest.raises(pymysql.MySQLError) as failed:
            conn._read_packet()
        assert failed.value.args[0] == 1236 and "no binlog here" in failed.value.args[1]
    finally:
        conn.close()


def test_the_events_the_relay_makes_carry_the_crc32_a_replica_checks():
    for event in (events.heartbeat("bin.000003", 1234, 9, True), events.rotate("bin.000003", 4, 9, True)):
        size, body = struct.unpack_from("<I", event, 9)[0], event[:-4]
        assert size == len(event)
        assert struct.unpack("<I", event[-4:])[0] == zlib.crc32(body)
        # the ROTATE is artificial; a heartbeat is not flagged so (as MariaDB and MySQL send it: conformance test)
        assert struct.unpack_from("<H", event, 17)[0] == (events.LOG_EVENT_ARTIFICIAL_F if event[4] == 4 else 0)
    beat = events.heartbeat("bin.000003", 1234, 9, False)
    assert (binlog.event_type(beat), binlog.next_position(beat), beat[19:]) == (binlog.HEARTBEAT, 1234, b"bin.000003")
    assert binlog.rotate_target(events.rotate("bin.000007", 4, 9, True), 4) == ("bin.000007", 4)
    assert binlog.rotate_target(events.rotate("bin.000007", 4, 9, False), 0) == ("bin.000007", 4)


def test_scrambles_match_the_servers_definitions():
    salt = bytes(range(1, 21))
    # mysql_native_password: SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw))), as PyMySQL computes it
    assert auth.native_scramble("secret", salt) == pymysql._auth.scramble_native_password(b"secret", salt)
    assert auth.sha2_scramble("secret", salt) == pymysql._auth.scramble_caching_sha2(b"secret", salt)
    assert auth.matches(auth.NATIVE, "", salt, b"") and not auth.matches(auth.NATIVE, "x", salt, b"")
    assert all(b != 0 for b in auth.nonce())


def test_several_user_variables_in_one_set_and_quoted_values_are_kept():
    session = Session(MARIADB)
    session.answer("SET @a = 'it''s', @b=5, @c := \"x,y\", @d=NULL")
    assert (session.variable("a"), session.variable("b"), session.variable("c"), session.variable("d")) == \
        ("it's", 5, "x,y", None)


@pytest.mark.parametrize("parts", [
    [],
    [("3e11fa47-71ca-11e1-9e33-c80aa9429562", [(1, 5), (7, 7)])],
    [("3e11fa47-71ca-11e1-9e33-c80aa9429562", [(1, 9)]), ("3e11fa47-71ca-11e1-9e33-c80aa9429562:audit", [(1, 2)]),
     ("4f22ab58-71ca-11e1-9e33-c80aa9429562", [(3, 3)])],
], ids=["empty", "one uuid", "tagged"])
def test_a_replicas_gtid_set_is_read_back_as_the_dump_command_carries_it(parts):
    assert decode_gtid_set(encode_gtid_set(parts)) == parts


@pytest.mark.parametrize("data", [b"", struct.pack("<Q", 1) + bytes(10), struct.pack("<Q", 0) + b"x",
                                  encode_gtid_set([("3e11fa47-71ca-11e1-9e33-c80aa9429562", [(1, 5)])])[:-3]],
                         ids=["nothing", "short uuid", "trailing", "cut interval"])
def test_a_malformed_gtid_set_is_the_replicas_error(data):
    with pytest.raises(RemoteProtocolError):
        decode_gtid_set(data)


@pytest.mark.parametrize("version", ["9.7.0", "11.8.3-MariaDB"])
def test_the_channel_statements_a_dba_is_given_name_the_password_and_never_show_it(version):
    channel = RelayChannel(Flavor.from_version(version), "it's", "127.0.0.1", 3307, "relay", heartbeat_s=0.5)
    printed = channel.printed()
    assert "'<the relay password>'" in printed and "3307" in printed and "'relay'" in printed
    if "MariaDB" in version:
        assert printed.startswith("CHANGE MASTER 'it''s' TO") and "MASTER_USE_GTID=slave_pos" in printed
        assert printed.endswith("START SLAVE 'it''s';")
    else:
        assert "SOURCE_AUTO_POSITION=1" in printed and "FOR CHANNEL 'it''s'" in printed
        assert printed.endswith("START REPLICA FOR CHANNEL 'it''s';")
    assert "HEARTBEAT_PERIOD=0.5" in printed and "SSL=0" in printed


def test_a_client_that_asks_for_tls_gets_it_and_verifies_the_relays_certificate(tmp_path):
    files = make_set(tmp_path, ["localhost", "127.0.0.1"])
    for facts in (MARIADB, MYSQL):
        server = RelayServer(("127.0.0.1", 0), facts, NoEvents(), "relay", "pw-1",
                             tls=relay_tls_context(str(files.cert), str(files.key))).start()
        try:
            conn = pymysql.connect(host="127.0.0.1", port=server.address[1], user="relay", password="pw-1",
                                   ssl_ca=str(files.ca), ssl_verify_cert=True, ssl_verify_identity=True,
                                   connect_timeout=5, read_timeout=5)
            try:
                assert _one(conn, "SELECT @@GLOBAL.SERVER_ID") == (facts.server_id,)
                assert conn._sock.version() in ("TLSv1.2", "TLSv1.3")
            finally:
                conn.close()
            assert server.tls_logins == 1
        finally:
            server.close()


def test_a_relay_certificate_that_cannot_be_loaded_is_named(tmp_path):
    with pytest.raises(ConfigError, match="relay tls: certificate .*missing.pem"):
        relay_tls_context(str(tmp_path / "missing.pem"), str(tmp_path / "missing-key.pem"))


def test_relay_mode_is_one_flavor_per_pair_and_needs_the_channel_privileges():
    from bridge.apply import modes

    assert modes.choose("relay", "mariadb", "mariadb") == "relay" and modes.choose("relay", "mysql", "mysql") == "relay"
    with pytest.raises(ConfigError, match="use --apply-mode binlog or sql"):
        modes.choose("relay", "mysql", "mariadb")
    mariadb, mysql = Flavor.from_version("10.11.6-MariaDB"), Flavor.from_version("9.7.0")
    assert modes.missing(frozenset(), "relay", mariadb) == ["REPLICATION SLAVE ADMIN", "SLAVE MONITOR"]
    assert modes.missing(frozenset({"REPLICATION_SLAVE_ADMIN", "REPLICATION CLIENT"}), "relay", mysql) == []
    assert "channel" in modes.why("REPLICATION_SLAVE_ADMIN")


def test_the_primarys_facts_travel_in_the_hello_and_come_back_the_same():
    settings = {"version": "10.11.6-MariaDB-0+deb12u1-log", "server_id": "7", "binlog_checksum": "CRC32",
                "gtid_domain_id": "0", "gtid_mode": "", "server_uuid": ""}
    facts = SourceFacts.of_primary(settings)
    assert facts.version == "5.5.5-10.11.6-MariaDB-0+deb12u1-log" and facts.mariadb  # as its handshake says it
    assert facts.variables == {"gtid_domain_id": "0"} and facts.global_value("server_id") == 7
    assert SourceFacts.from_json(json.loads(json.dumps(facts.to_json()))) == facts
    mysql = SourceFacts.of_primary({"version": "9.7.0", "server_id": "1", "binlog_checksum": "NONE",
                                    "gtid_mode": "ON", "server_uuid": "3b06a154-f255-11f1-88a1-02fc00000001"})
    assert mysql.version == "9.7.0" and not mysql.mariadb and mysql.global_value("binlog_checksum") == "NONE"


def _one_by_one(events: list[bytes], seq_id: int, semi_sync: bool, ack_last: bool) -> tuple[bytes, int]:
    """A dump's packets as a source writes them, one event at a time."""
    from bridge.relay import protocol
    out = bytearray()
    for i, event in enumerate(events):
        head = (b"\x00\xef\x01" if ack_last and i == len(events) - 1 else b"\x00\xef\x00") if semi_sync else b"\x00"
        seq_id = protocol.pack_into(out, head + event, seq_id)
    return bytes(out), seq_id


@pytest.mark.parametrize("semi_sync,ack_last", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("big", [0, 0xFFFFFF - 3 - 23, 0xFFFFFF - 23, 0xFFFFFF + 5])
def test_a_transactions_events_packed_in_one_call_are_the_packets_one_by_one(semi_sync, ack_last, big):
    """The relay packs a transaction's events in one call: the same bytes as packing each
    event (the OK byte, the semi-sync header with its flag on the last, packet numbers
    wrapping at 256, an event of 16 MiB or more over several packets, one that ends on a
    packet's exact size followed by an empty one), and the last event's position."""
    from bridge.relay import protocol
    from tests.binlog_packets import binlog_event, binlog_transaction
    events_ = binlog_transaction(5, rows=3) + ([binlog_event(30, bytes(big), 777)] if big else [])
    events_.append(binlog_event(16, bytes(8), 999))
    for seq_id in (0, 250):
        out = bytearray(b"before")
        next_id, position = protocol.pack_events(out, b"".join(events_), seq_id, semi_sync, ack_last)
        assert (bytes(out[6:]), next_id) == _one_by_one(events_, seq_id, semi_sync, ack_last)
        assert out[:6] == b"before" and position == 999
    with pytest.raises(RemoteProtocolError, match="bad event size"):
        protocol.pack_events(bytearray(), b"".join(events_)[:-1], 0, False, False)

"""What only a MySQL primary has: generated invisible primary keys, accounts that
authenticate with caching_sha2_password with and without TLS, tagged GTIDs (kept on a
MySQL replica, a restart resumes from a position that holds them), compressed
transactions, partial JSON updates and GTID mode (refused by the preflight with the
fix). Each test is skipped on a MariaDB primary (`make test-matrix` runs them on MySQL)."""

import ssl

import pytest

from bridge.config import MysqlUrl
from bridge.errors import PreflightError
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.model import GtidSet
from bridge.server import dbconn
from bridge.server.flavor import Flavor
from bridge.source import preflight
from tests.conftest import BridgePair, primary_position, sandbox_up
from tests.helpers import channel_row, concurrent_writes, semi_sync_on, semi_sync_status, wait_for
from tests.integration.test_semisync import started


@pytest.fixture(autouse=True)
def only_mysql(mysql_primary):
    if not mysql_primary:
        pytest.skip("MySQL only (the primary is MariaDB)")


def test_generated_invisible_primary_keys_replicate_with_their_values(urls, fresh_schema):
    """sql_generate_invisible_primary_key gives a keyless table an invisible my_row_id
    that the binlog carries: the replica holds the same ids (the comparison reads
    invisible columns too)."""
    s = fresh_schema("gipk")
    pair = BridgePair(urls, "shm").start()
    try:
        pair.sql(f"CREATE DATABASE {s}", "SET SESSION sql_generate_invisible_primary_key=ON",
                 f"CREATE TABLE {s}.k (v VARCHAR(10), n INT)", "SET SESSION sql_generate_invisible_primary_key=OFF",
                 f"INSERT INTO {s}.k VALUES ('a', 1), ('a', 1), ('b', 2)", f"UPDATE {s}.k SET n = 5 WHERE v = 'b'",
                 f"DELETE FROM {s}.k WHERE v = 'a' LIMIT 1")
        pair.assert_same(s)
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT my_row_id, v, n FROM {s}.k ORDER BY my_row_id")
            assert cur.fetchall() == ((2, "a", 1), (3, "b", 5))
    finally:
        pair.stop()


@pytest.mark.parametrize("mode, encrypted", [("DISABLED", False), ("PREFERRED", True), ("REQUIRED", True)])
def test_a_caching_sha2_account_signs_in_with_and_without_tls(urls, mode, encrypted):
    """Without TLS the password goes RSA-encrypted with the server's key (PyMySQL asks for
    it; the cryptography package does the work); with TLS, in the clear inside it. A new
    account each time: the server's cache of good passwords would skip the full exchange."""
    admin = connect(urls["primary_admin"])
    user = f"sha2_{mode.lower()}"
    try:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
            cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY 'pw-{mode}'")
            cur.execute("FLUSH PRIVILEGES")  # empties the cache of passwords already checked
        url = MysqlUrl.parse(f"mysql://{user}:pw-{mode}@{urls['primary'].host}:{urls['primary'].port}"
                             f"?ssl-mode={mode}")
        conn = dbconn.connect(url)
        try:
            assert isinstance(dbconn.raw_socket(conn), ssl.SSLSocket) == encrypted
            with conn.cursor() as cur:
                cur.execute("SELECT CURRENT_USER()")
                assert cur.fetchone()[0] == f"{user}@127.0.0.1"
        finally:
            conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        admin.close()


@pytest.fixture(scope="module")
def own_urls(tmp_path_factory):
    """Servers of their own: a tagged GTID stays in the primary's gtid_executed for good."""
    box = Sandbox(tmp_path_factory.mktemp("tagged"))
    try:
        yield {k: MysqlUrl.parse(v) for k, v in sandbox_up(box).items() if v.startswith("mysql://")}
    finally:
        box.down()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_tagged_gtids_replicate_and_a_restart_resumes_from_a_position_holding_them(own_urls, transport):
    """MySQL 8.4+'s tagged GTIDs (uuid:tag:n) are read (MySQL's serialization format), kept
    by a MySQL replica as its primary's, recorded in the channel's position, and asked for
    by the next dump (the GTID set's tagged form): a restarted primary side goes on."""
    s, urls = f"tagged_{transport}", own_urls
    pair = BridgePair(urls, transport).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)",
                 "SET SESSION gtid_next='AUTOMATIC:bridge_test'", f"INSERT INTO {s}.t VALUES (2)",
                 f"INSERT INTO {s}.t VALUES (3)", "SET SESSION gtid_next='AUTOMATIC'", f"INSERT INTO {s}.t VALUES (4)")
        pair.sync()
        pair.stop_primary()  # the next dump starts from a position that holds tagged GTIDs
        pair.sql("SET SESSION gtid_next='AUTOMATIC:bridge_test'", f"UPDATE {s}.t SET id = 20 WHERE id = 2",
                 "SET SESSION gtid_next='AUTOMATIC:other_tag'", f"INSERT INTO {s}.t VALUES (5)",
                 "SET SESSION gtid_next='AUTOMATIC'", f"INSERT INTO {s}.t VALUES (6)")
        pair.start_primary()
        pair.assert_same(s)
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT id FROM {s}.t ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == [1, 3, 4, 5, 6, 20]
        primary_tagged = GtidSet(mysql=tuple((key, ivs) for key, ivs in
                                             GtidSet.parse(primary_position(pair.primary)).mysql if ":" in key))
        assert primary_tagged.tags == ("bridge_test", "other_tag")
        assert_holds(pair, primary_tagged)  # a MySQL replica keeps its primary's GTIDs, tags and all
    finally:
        pair.stop()
    assert not pair.errors, pair.errors


def assert_holds(pair: BridgePair, gtids: GtidSet) -> None:
    """The channel's position holds ``gtids``, and so does a MySQL replica's gtid_executed."""
    assert GtidSet.parse(channel_row(pair.replica, pair.channel)[1]).contains_all(gtids)
    if Flavor.of(pair.replica).is_mysql:
        with pair.replica.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            assert GtidSet.parse(cur.fetchone()[0]).contains_all(gtids)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_the_one_call_paths_carry_mysql_transactions_each_committed_with_its_gtid(urls, fresh_schema, transport,
                                                                                   mysql_replica):
    """MySQL into MySQL in binlog apply mode: the primary side takes MySQL's transactions
    (GTID, BEGIN, rows, XID) whole in one call, the replica side's apply lane commits each
    with its GTID and the channel's position, a group a round trip; a MyISAM table (its
    rows cannot share the position's transaction), a DDL and a writer on four connections
    among them. The replica holds the primary's rows and GTIDs, the position the primary's set."""
    if not mysql_replica:
        pytest.skip("a MySQL replica (into MariaDB the rows are applied decoded)")
    s = fresh_schema("lanes")
    pair = BridgePair(urls, transport, apply_mode="binlog", heartbeat_s=0.05).start()
    try:
        before = GtidSet.parse(primary_position(pair.primary))
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(40))",
                 f"CREATE TABLE {s}.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")

        def statements(first):
            for i in range(first, first + 150):
                yield f"INSERT INTO {s}.t (id, v) VALUES ({i}, 'row {i}')"
                if i % 25 == 0:
                    yield f"INSERT INTO {s}.m VALUES ({i}, {i})"

        concurrent_writes(urls["primary_admin"], statements,
                          lambda: pair.sql(f"ALTER TABLE {s}.t ADD COLUMN w INT DEFAULT 7"))
        pair.sql(f"UPDATE {s}.t SET w = id % 3 WHERE id % 2 = 0", f"UPDATE {s}.m SET v = v + 1")
        mine = GtidSet.parse(primary_position(pair.primary)).minus(before)  # this test's transactions
        pair.assert_same(s)
        primary, replica = pair.primary_node.counts, pair.replica_node.counts
        assert primary.taken_whole + primary.runs + primary.lane_runs > 0  # MySQL's events in one call
        # the apply lane committed some (counted as each run returns, just after its commits)
        wait_for(lambda: replica.lane_groups > 0, f"apply lane groups ({channel_row(pair.replica, pair.channel)})", 10)
        assert_holds(pair, mine)
    finally:
        pair.stop()
    assert not pair.errors, pair.errors


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_compressed_transactions_replicate(urls, fresh_schema, transport):
    """binlog_transaction_compression=ON: each transaction's events arrive in one zstd
    TRANSACTION_PAYLOAD event, which the stream expands (a large one chunked as usual)."""
    s = fresh_schema("zstd")
    pair = BridgePair(urls, transport).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(100), j JSON)",
                 "SET SESSION binlog_transaction_compression=ON",
                 f"INSERT INTO {s}.t VALUES (1, 'one', '{{\"a\": [1, 2]}}')",
                 "BEGIN", *(f"INSERT INTO {s}.t VALUES ({i}, REPEAT('x', 90), NULL)" for i in range(2, 3002)),
                 f"UPDATE {s}.t SET v = 'changed' WHERE id < 100", "COMMIT",
                 f"DELETE FROM {s}.t WHERE id % 3 = 0",
                 "SET SESSION binlog_transaction_compression=OFF", f"INSERT INTO {s}.t VALUES (5000, 'plain', NULL)")
        pair.assert_same(s)
        with pair.primary.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            last = cur.fetchall()[-1][0]
            cur.execute(f"SHOW BINLOG EVENTS IN '{last}'")
            kinds = {row[2] for row in cur.fetchall()}
        assert "Transaction_payload" in kinds  # the primary did compress them
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), SUM(v = 'changed'), MAX(id) FROM {s}.t")
            assert cur.fetchone() == (2002, 66, 5000)
    finally:
        pair.stop()
    assert not pair.errors, pair.errors


@pytest.mark.parametrize("mode", ["received", "applied"])
def test_compressed_transactions_are_acknowledged(urls, fresh_schema, semi_sync_primary, mode):
    """The semi-sync ACK of a compressed transaction names where its payload event ends."""
    s = fresh_schema("zack")
    pair = started(urls, mode, "tcp")
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        semi_sync_on(semi_sync_primary, pair, s)
        before = semi_sync_status(semi_sync_primary)
        pair.sql("SET SESSION binlog_transaction_compression=ON",
                 *(f"INSERT INTO {s}.t VALUES ({i}, 'compressed')" for i in range(30)),
                 "SET SESSION binlog_transaction_compression=OFF")
        after = semi_sync_status(semi_sync_primary)
        assert after["status"] == "ON" and after["no_tx"] == before["no_tx"]
        assert int(after["yes_tx"]) - int(before["yes_tx"]) >= 30
        pair.assert_same(s)
    finally:
        pair.stop()
    assert not pair.errors, pair.errors


def test_partial_json_updates_are_refused_with_the_fix(urls):
    admin = connect(urls["primary_admin"])
    try:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_value_options='PARTIAL_JSON'")
        conn = preflight.connect(urls["primary"], "primary")
        try:
            settings = preflight.read_settings(conn)
        finally:
            conn.close()
        with pytest.raises(PreflightError, match=r"binlog_row_value_options is PARTIAL_JSON: SET GLOBAL "
                                                 r"binlog_row_value_options=''"):
            preflight.check_primary(settings, 4242, urls["primary"])
    finally:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL binlog_row_value_options=''")
        admin.close()


def test_gtid_mode_off_is_refused_with_the_fix(urls):
    settings = {name: "" for name in preflight.SETTINGS}
    settings.update(log_bin="ON", binlog_format="ROW", binlog_row_image="FULL", binlog_row_metadata="FULL",
                    server_id="1", version="9.7.4", gtid_mode="OFF")
    with pytest.raises(PreflightError, match="gtid_mode is OFF: need ON: .*enforce_gtid_consistency=ON"):
        preflight.check_primary(settings, 4242, urls["primary"])

"""Row changes and DDL in the middle of the stream, over both transports, each
test ending in a row-by-row comparison of both databases."""

import pytest

from bridge.server.flavor import Flavor


def test_insert_update_delete_and_primary_key_changes(pair, fresh_schema):
    s = fresh_schema("dml")
    pair.sql(f"CREATE DATABASE {s}",
             f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
             f"CREATE TABLE {s}.c (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))")
    pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, 'v{i}', {i})" for i in range(50)])
    pair.sql(f"UPDATE {s}.t SET id=id+1000 WHERE id < 10",  # key changes, several rows
             f"UPDATE {s}.t SET v=NULL WHERE id BETWEEN 20 AND 25",
             f"UPDATE {s}.t SET n=n WHERE id=30",  # matched, unchanged: never reaches the binlog
             f"DELETE FROM {s}.t WHERE id % 7 = 0",
             f"INSERT INTO {s}.c VALUES (1,'a',1),(1,'b',2),(2,'a',3)",
             f"UPDATE {s}.c SET b='z' WHERE a=1 AND b='a'")
    pair.assert_same(s)


def test_multi_statement_transactions_and_rollbacks(pair, fresh_schema):
    s = fresh_schema("txn")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.acct (id INT PRIMARY KEY, bal INT NOT NULL)",
             f"INSERT INTO {s}.acct VALUES (1, 100), (2, 100)")
    for i in range(30):
        pair.sql("BEGIN", f"UPDATE {s}.acct SET bal=bal-1 WHERE id=1", f"UPDATE {s}.acct SET bal=bal+1 WHERE id=2",
                 f"INSERT INTO {s}.acct VALUES ({100 + i}, {i})", "COMMIT")
    pair.sql("BEGIN", f"DELETE FROM {s}.acct", "ROLLBACK")
    pair.assert_same(s)


def test_keyless_duplicates_change_exactly_once(pair, fresh_schema):
    s = fresh_schema("dups")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.log (k INT, msg VARCHAR(10))",
             f"INSERT INTO {s}.log VALUES (1,'a'),(1,'a'),(1,'a'),(2,'b'),(2,'b')",
             f"UPDATE {s}.log SET msg='c' WHERE k=1 LIMIT 2",
             f"DELETE FROM {s}.log WHERE k=2 LIMIT 1",
             f"UPDATE {s}.log SET k=3 WHERE k=1")  # three rows, one statement, two distinct images
    result = pair.assert_same(s)
    assert result.digests[f"{s}.log"][1].rows == 4


def test_aria_and_myisam_tables(pair, fresh_schema, mysql_primary, mysql_replica):
    """Non-transactional tables (a commit is a COMMIT query, no Xid); MariaDB also splits an
    InnoDB+MyISAM transaction in two. MySQL has no Aria (a MySQL replica refuses the table,
    as a native one would), and with GTIDs refuses the mix (enforce_gtid_consistency): its
    MyISAM only."""
    s = fresh_schema("engines")
    aria = "MyISAM" if mysql_primary or mysql_replica else "Aria"
    mixed = [f"INSERT INTO {s}.i VALUES (1,1)", f"INSERT INTO {s}.m VALUES (2,2)"]
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.a (id INT PRIMARY KEY, v INT) ENGINE={aria}",
             f"CREATE TABLE {s}.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
             f"CREATE TABLE {s}.i (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
             f"INSERT INTO {s}.a VALUES (1,1),(2,2)", f"INSERT INTO {s}.m VALUES (1,1)",
             *(mixed if mysql_primary else ["BEGIN", *mixed, "COMMIT"]),
             f"UPDATE {s}.a SET v=v+10", f"DELETE FROM {s}.m WHERE id=1")
    pair.assert_same(s)


def test_ddl_mid_stream(pair, fresh_schema):
    s = fresh_schema("ddl")
    pair.sql(f"CREATE DATABASE {s}", f"USE {s}",
             "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
             "INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')",
             "ALTER TABLE t ADD COLUMN c DATETIME(6) NULL AFTER a",
             "INSERT INTO t VALUES (3, 3, '2020-01-01 00:00:00.5', 'z')",
             "ALTER TABLE t DROP COLUMN a",
             "UPDATE t SET b='after-drop' WHERE id=1",
             "RENAME TABLE t TO t2",
             "INSERT INTO t2 VALUES (4, NULL, 'w')",
             "CREATE TABLE gone (id INT)", "INSERT INTO gone VALUES (1)", "DROP TABLE gone",
             "CREATE INDEX ib ON t2 (b)",
             "ALTER TABLE t2 MODIFY b VARCHAR(40) NOT NULL DEFAULT ''",
             "DELETE FROM t2 WHERE id=2")
    pair.sql("USE mysql")
    pair.assert_same(s)


def test_create_database_and_unqualified_ddl_land_in_the_right_schema(pair, fresh_schema):
    a, b = fresh_schema("one"), fresh_schema("two")
    pair.sql(f"CREATE DATABASE {a}", f"CREATE DATABASE {b}", f"USE {a}",
             "CREATE TABLE same_name (id INT PRIMARY KEY)", "INSERT INTO same_name VALUES (1)",
             f"USE {b}", "CREATE TABLE same_name (id INT PRIMARY KEY, x INT)", "INSERT INTO same_name VALUES (2, 2)",
             f"CREATE TABLE {a}.qualified (id INT)", f"INSERT INTO {a}.qualified VALUES (7)", "USE mysql")
    pair.assert_same(a, b)


def test_account_statements_on_the_primary_do_not_stop_replication(pair, fresh_schema):
    s = fresh_schema("acct")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)",
             "CREATE USER IF NOT EXISTS 'app_test'@'127.0.0.1' IDENTIFIED BY 'pw-not-replicated'",
             f"GRANT SELECT ON {s}.* TO 'app_test'@'127.0.0.1'", "FLUSH PRIVILEGES",
             f"INSERT INTO {s}.t VALUES (1)", "DROP USER 'app_test'@'127.0.0.1'")
    pair.assert_same(s)
    with pair.replica.cursor() as cur:
        assert cur.execute("SELECT 1 FROM mysql.user WHERE user='app_test'") == 0
    counters = pair.replica_node.status()["counters"]  # the sandbox's apply user may not manage accounts: left out
    assert counters["account_statements_left_out"] == 3 and counters["account_statements_replayed"] == 0


def grants_of(conn, user: str) -> list[str]:
    with conn.cursor() as cur:
        if not cur.execute("SELECT 1 FROM mysql.user WHERE user=%s", (user,)):
            return []
        cur.execute(f"SHOW GRANTS FOR '{user}'@'127.0.0.1'")
        conn.commit()
        return sorted(row[0] for row in cur.fetchall())


def test_account_statements_replay_as_on_a_native_replica_where_the_apply_user_may(urls, fresh_schema, flavors):
    """An apply user with CREATE USER ... WITH GRANT OPTION (the sandbox's admin): users,
    grants, revokes and drops arrive as on a native replica (--account-statements auto);
    across flavors they are left out (a MySQL account's plugin does not exist on MariaDB)."""
    across = flavors[0].kind != flavors[1].kind
    from tests.conftest import BridgePair

    s = fresh_schema("acctrep")
    pair = BridgePair(urls, "shm")
    pair.start_replica(target=urls["replica_admin"])
    pair.start_primary()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)",
                 "CREATE USER IF NOT EXISTS 'app_rep'@'127.0.0.1' IDENTIFIED BY 'its-own-password'",
                 f"GRANT SELECT, INSERT ON {s}.* TO 'app_rep'@'127.0.0.1'",
                 f"REVOKE INSERT ON {s}.* FROM 'app_rep'@'127.0.0.1'", f"INSERT INTO {s}.t VALUES (1)")
        pair.assert_same(s)
        on_primary = grants_of(pair.primary, "app_rep")
        assert on_primary != [] and grants_of(pair.replica, "app_rep") == ([] if across else on_primary)
        pair.sql("DROP USER 'app_rep'@'127.0.0.1'", f"INSERT INTO {s}.t VALUES (2)")
        pair.assert_same(s)
        assert grants_of(pair.replica, "app_rep") == []
        counters = pair.replica_node.status()["counters"]
        assert counters["account_statements_left_out" if across else "account_statements_replayed"] == 4
    finally:
        pair.stop()


# binlog mode: the server's own row-event code finds the row missing (as a native replica would)
_MISSING_ROW = r"\(row events on {s}.t\): error 1032: Can't find record in 't'"  # the server's number, then its text


@pytest.mark.parametrize("mode,rows,update,message", [
    ("sql", "(1, 1)", "UPDATE {s}.t SET v=2 WHERE id=1", "update on {s}.t matched 0 rows, expected 1"),
    # one transaction updating 3 rows: merged into DELETE ... IN + INSERT, the count still checked
    ("sql", "(1, 1), (2, 2), (3, 3)", "UPDATE {s}.t SET v=v+10", "update on {s}.t matched 2 rows, expected 3"),
    ("sql", "(1, 1), (2, 2), (3, 3)", "DELETE FROM {s}.t", "delete on {s}.t matched 2 rows, expected 3"),
    ("binlog", "(1, 1)", "UPDATE {s}.t SET v=2 WHERE id=1", _MISSING_ROW),
    ("binlog", "(1, 1), (2, 2), (3, 3)", "UPDATE {s}.t SET v=v+10", _MISSING_ROW),
    ("binlog", "(1, 1), (2, 2), (3, 3)", "DELETE FROM {s}.t", _MISSING_ROW)])
def test_divergence_stops_the_applier_with_the_table_named(urls, fresh_schema, mode, rows, update, message):
    from tests.conftest import BridgePair

    p = BridgePair(urls, "shm", apply_mode=mode).start()
    try:
        s = fresh_schema("diverge")
        p.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)", f"INSERT INTO {s}.t VALUES {rows}")
        p.sync()
        with p.replica.cursor() as cur:
            cur.execute(f"DELETE FROM {s}.t WHERE id=1")  # someone wrote on the replica
        p.sql(update.format(s=s))
        with pytest.raises(AssertionError, match=message.format(s=s)):
            p.sync(timeout_s=10)
        with p.replica.cursor() as cur:
            cur.execute("SELECT applied_seq FROM rdma_bridge.bridge_meta WHERE channel=%s", (p.channel,))
            assert cur.fetchone()[0] == 3  # the failed transaction was rolled back, position exact
    finally:
        p.errors.clear()
        p.stop()


def collations(conn, schema):
    """Every collation the schema's DDL chose: the database's, each table's, each column's."""
    with conn.cursor() as cur:
        cur.execute("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=%s", (schema,))
        found = [("", "", cur.fetchone()[0])]
        cur.execute("SELECT TABLE_NAME, '', TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                    "UNION ALL SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA=%s AND COLLATION_NAME IS NOT NULL ORDER BY 1, 2", (schema, schema))
        conn.commit()
        return found + [tuple(row) for row in cur.fetchall()]


def test_ddl_without_a_collation_gets_the_one_it_got_on_the_primary(pair, fresh_schema):
    """A statement that names a character set and no collation gets that character set's
    default, which MariaDB 11 takes from @@character_set_collations (uca1400) and older
    servers from the character set itself: the replica must choose what the primary chose,
    whichever versions the two run (10.11 into 11.8 included)."""
    s = fresh_schema("coll")
    with pair.primary.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'character_set_collations'")
        mapped = cur.fetchone() is not None
    pair.sql(f"CREATE DATABASE {s}",
             f"CREATE TABLE {s}.t (id INT PRIMARY KEY, a VARCHAR(5) CHARACTER SET utf8mb4, b VARCHAR(5), "
             f"c TEXT CHARACTER SET latin1, d VARCHAR(5) CHARACTER SET utf8mb3) CHARACTER SET utf8mb4",
             *(["SET SESSION character_set_collations='utf8mb4=utf8mb4_bin'",
                f"CREATE TABLE {s}.m (id INT PRIMARY KEY, a VARCHAR(5) CHARACTER SET utf8mb4)",
                "SET SESSION character_set_collations=DEFAULT"] if mapped else []),
             f"ALTER TABLE {s}.t ADD COLUMN e VARCHAR(5) CHARACTER SET utf8mb4",
             f"INSERT INTO {s}.t (id, a, b, c, d, e) VALUES (1, 'x', 'y', 'z', 'w', 'v')")
    pair.assert_same(s)
    if Flavor.of(pair.primary).kind == Flavor.of(pair.replica).kind:
        assert collations(pair.replica, s) == collations(pair.primary, s)
    else:  # MariaDB 10.11 has none of MySQL's utf8mb4_0900 collations: each character set's default there
        assert [(*c[:-1], c[-1].split("_")[0]) for c in collations(pair.replica, s)] == \
            [(*c[:-1], c[-1].split("_")[0]) for c in collations(pair.primary, s)]

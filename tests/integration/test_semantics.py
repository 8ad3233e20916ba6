"""Native row-based semantics: every case runs against the bridge AND a native MariaDB
replica of the same primary; both end with the primary's rows, and the bridge's replica
holds the same stored programs, definers, triggers, views and events (as the native
replica shows them) as the native one.

Cases run with 1 worker while the bridge is live, with 4 workers catching up on a
backlog (grouped, parallel), and in sql apply mode where it can guarantee the same
(no replica triggers: that mode refuses them, tested below).
"""

import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.errors import BridgeError
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.model import GtidSet
from bridge.server.flavor import Flavor
from tests.conftest import BridgePair, primary_position, sandbox_up
from tests.helpers import wait_for
from tests.integration.test_types import MORE_TYPES, TYPES_TABLE, fast_types, mysql_types, type_rows

DEFINER = "`app_owner`@`%`"  # exists nowhere: the definer must be kept as the primary wrote it

CASES = {
    "fk_cascade_delete": [
        "CREATE TABLE {s}.parent (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE {s}.child (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES {s}.parent (id) "
        "ON DELETE CASCADE) ENGINE=InnoDB",
        "INSERT INTO {s}.parent VALUES (1), (2), (3), (4)",
        "INSERT INTO {s}.child VALUES (10, 1), (20, 2), (30, 3), (31, 3), (40, 4)",
        "DELETE FROM {s}.parent WHERE id IN (1, 2, 3)"],
    "fk_cascade_update_and_set_null": [
        "CREATE TABLE {s}.p (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        "CREATE TABLE {s}.cu (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES {s}.p (id) "
        "ON UPDATE CASCADE) ENGINE=InnoDB",
        "CREATE TABLE {s}.cn (id INT PRIMARY KEY, pid INT NULL, FOREIGN KEY (pid) REFERENCES {s}.p (id) "
        "ON DELETE SET NULL ON UPDATE SET NULL) ENGINE=InnoDB",
        "INSERT INTO {s}.p VALUES (1, 1), (2, 2), (3, 3)",
        "INSERT INTO {s}.cu VALUES (1, 1), (2, 2)", "INSERT INTO {s}.cn VALUES (1, 1), (2, 2), (3, 3)",
        "UPDATE {s}.p SET id = 100 WHERE id = 1", "UPDATE {s}.p SET v = v + 1",
        "DELETE FROM {s}.p WHERE id = 3"],
    "fk_two_levels": [
        "CREATE TABLE {s}.a (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE {s}.b (id INT PRIMARY KEY, aid INT, FOREIGN KEY (aid) REFERENCES {s}.a (id) "
        "ON DELETE CASCADE) ENGINE=InnoDB",
        "CREATE TABLE {s}.c (id INT PRIMARY KEY, bid INT, FOREIGN KEY (bid) REFERENCES {s}.b (id) "
        "ON DELETE CASCADE) ENGINE=InnoDB",
        "INSERT INTO {s}.a VALUES (1), (2)", "INSERT INTO {s}.b VALUES (1, 1), (2, 1), (3, 2)",
        "INSERT INTO {s}.c VALUES (1, 1), (2, 2), (3, 3)", "DELETE FROM {s}.a WHERE id = 1"],
    "generated_columns": [
        "CREATE TABLE {s}.g (id INT PRIMARY KEY, a INT, b VARCHAR(20), v INT AS (a * 2) VIRTUAL, "
        "st VARCHAR(30) AS (CONCAT(b, '-', a)) STORED, KEY (st))",
        "INSERT INTO {s}.g (id, a, b) VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')",
        "UPDATE {s}.g SET a = a + 10 WHERE id < 3", "DELETE FROM {s}.g WHERE id = 3"],
    "json": [
        "CREATE TABLE {s}.j (id INT PRIMARY KEY, doc JSON)",
        """INSERT INTO {s}.j VALUES (1, '{"a": 1, "b": [1, 2, {"c": "ü"}]}'), (2, '[]'), (3, NULL)""",
        "UPDATE {s}.j SET doc = JSON_SET(doc, '$.a', 2, '$.n', 'new') WHERE id = 1",
        "UPDATE {s}.j SET doc = JSON_ARRAY_APPEND(doc, '$', 1.5) WHERE id = 2"],
    "enum_error_value": [
        "CREATE TABLE {s}.e (id INT PRIMARY KEY, e ENUM('x', 'y'), s SET('p', 'q'))",
        "SET SESSION sql_mode = ''", "INSERT INTO {s}.e VALUES (1, 'nope', 'p'), (2, 'y', 'q,nope')",
        "UPDATE {s}.e SET e = 'also-nope' WHERE id = 2", "SET SESSION sql_mode = DEFAULT"],
    "types": None,  # the primary's flavor's type tables: types_case()
    "routines_views_events": [
        "CREATE TABLE {s}.log (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(40), n INT)",
        f"CREATE DEFINER={DEFINER} FUNCTION {{s}}.twice(x INT) RETURNS INT DETERMINISTIC SQL SECURITY DEFINER "
        "RETURN x * 2",
        f"CREATE DEFINER={DEFINER} PROCEDURE {{s}}.note(IN w VARCHAR(40)) SQL SECURITY DEFINER "
        "BEGIN INSERT INTO {s}.log (what, n) VALUES (w, {s}.twice(LENGTH(w))); "
        "UPDATE {s}.log SET n = n + 1 WHERE what = w; END",
        f"CREATE DEFINER={DEFINER} SQL SECURITY DEFINER VIEW {{s}}.v AS SELECT what, n FROM {{s}}.log WHERE n > 2",
        f"CREATE DEFINER={DEFINER} EVENT {{s}}.tidy ON SCHEDULE EVERY 1 DAY DO DELETE FROM {{s}}.log WHERE n < 0",
        "CALL {s}.note('called on the primary')", "CALL {s}.note('again')",
        "INSERT INTO {s}.log (what, n) VALUES ('fn', {s}.twice(21))",
        "ALTER EVENT {s}.tidy ON SCHEDULE EVERY 2 DAY ENABLE"],
}
TRIGGER_CASES = {
    "triggers": [
        "CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        "CREATE TABLE {s}.audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(60))",
        "CREATE TABLE {s}.audit_keyless (what VARCHAR(60))",
        f"CREATE DEFINER={DEFINER} TRIGGER {{s}}.bi BEFORE INSERT ON {{s}}.t FOR EACH ROW "
        "SET NEW.v = UPPER(NEW.v), NEW.n = NEW.n + 1",
        f"CREATE DEFINER={DEFINER} TRIGGER {{s}}.ai AFTER INSERT ON {{s}}.t FOR EACH ROW "
        "INSERT INTO {s}.audit (what) VALUES (CONCAT('insert ', NEW.id))",
        f"CREATE DEFINER={DEFINER} TRIGGER {{s}}.au AFTER UPDATE ON {{s}}.t FOR EACH ROW "
        "INSERT INTO {s}.audit_keyless VALUES (CONCAT('update ', OLD.id, ' ', OLD.n, '->', NEW.n))",
        f"CREATE DEFINER={DEFINER} TRIGGER {{s}}.bd BEFORE DELETE ON {{s}}.t FOR EACH ROW "
        "INSERT INTO {s}.audit_keyless VALUES (CONCAT('delete ', OLD.id))",
        "INSERT INTO {s}.t VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)",
        "UPDATE {s}.t SET n = n * 10 WHERE id < 3", "DELETE FROM {s}.t WHERE id = 3"],
}

OBJECTS = {
    "ROUTINES": ("ROUTINE_SCHEMA", "ROUTINE_NAME, ROUTINE_TYPE, DEFINER, SECURITY_TYPE, SQL_MODE, "
                                   "ROUTINE_DEFINITION"),
    "VIEWS": ("TABLE_SCHEMA", "TABLE_NAME, DEFINER, SECURITY_TYPE, VIEW_DEFINITION"),
    "TRIGGERS": ("TRIGGER_SCHEMA", "TRIGGER_NAME, DEFINER, ACTION_TIMING, EVENT_MANIPULATION, ACTION_STATEMENT, "
                                   "SQL_MODE"),
    "EVENTS": ("EVENT_SCHEMA", "EVENT_NAME, DEFINER, STATUS, EVENT_DEFINITION, INTERVAL_VALUE, SQL_MODE"),
}


def types_case(conn, replica) -> list[str]:
    """Every type table of the primary's flavor (tests/integration/test_types.py) that the
    ``replica`` connection's server has."""
    fast_table, fast_rows = fast_types(conn, replica)
    if Flavor.of(conn).is_mysql:
        vector = Flavor.of(replica).is_mysql
        more = [mysql_types(replica).replace("{s}.mysql", "{s}.more"),
                "INSERT INTO {s}.more (id, j, g" + (", v" if vector else "") + ") VALUES (1, '{\"a\": [1, 2.5]}', "
                "POINT(1, 2)" + (", STRING_TO_VECTOR('[1, 2, 3]'))" if vector else ")")]
    elif Flavor.of(replica).is_mysql:
        more = []  # MariaDB's own types (UUID, INET6, INET4): a MySQL replica has none of them
    else:
        more = [MORE_TYPES, "INSERT INTO {s}.more (id, u, i6, g) VALUES (1, UUID(), '::1', POINT(1, 2))"]
    return [TYPES_TABLE, *[f"INSERT INTO {{s}}.types VALUES {r}" for r in type_rows(conn, replica)],
            "UPDATE {s}.types SET f = 1.1, tm2 = '-12:00:00.5', bn = x'0a000000' WHERE id = 1", *more,
            "SET SESSION sql_mode = ''", fast_table, *[f"INSERT INTO {{s}}.fast VALUES {r}" for r in fast_rows],
            "SET SESSION sql_mode = DEFAULT"]


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """Primary, the bridge's replica and a native replica of the primary (of the
    primary's flavor)."""
    box = Sandbox(tmp_path_factory.mktemp("semantics"))
    info = sandbox_up(box, native_replica=True)
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
    primary = connect(urls["primary_admin"])
    with primary.cursor() as cur:  # the definer runs the routines on the primary; accounts are the primary's own
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'app_owner'@'%'")
        cur.execute("GRANT ALL ON *.* TO 'app_owner'@'%'")
    primary.close()
    yield urls
    box.down()


def objects(url: MysqlUrl, schema: str) -> dict:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            out = {}
            for view, (column, fields) in OBJECTS.items():
                cur.execute(f"SELECT {fields} FROM information_schema.{view} WHERE {column}=%s ORDER BY 1", (schema,))
                out[view] = cur.fetchall()
        return out
    finally:
        conn.close()


def run_case(trio, statements: list[str] | None, schema: str, workers: int, catch_up: bool, mode: str) -> None:
    pair = BridgePair(trio, "shm", workers=workers, apply_mode=mode)
    statements = statements or types_case(pair.primary, pair.replica)
    try:
        if not catch_up:
            pair.start()
        pair.sql(f"CREATE DATABASE {schema}", *[s.replace("{s}", schema) for s in statements])
        if catch_up:
            pair.start()  # the whole case waits in the ring: grouped, and parallel with 4 workers
        pair.sync()
        assert not pair.errors, pair.errors
        target = GtidSet.parse(primary_position(pair.primary))
        native = connect(trio["native_admin"])
        try:
            wait_for(lambda: GtidSet.parse(_native_position(native)).contains_all(target), "the native replica")
        finally:
            native.close()
        for name, url in (("native replica", trio["native_admin"]), ("bridge's replica", trio["replica_admin"])):
            result = compare_databases(trio["primary_admin"], url, [schema])
            assert result.digests and result.ok, (name, [(d.table, d.missing, d.extra, d.sample) for d in result.diffs])
        if Flavor.of(pair.primary).kind == Flavor.of(pair.replica).kind:  # across flavors the servers word them apart
            assert objects(trio["replica_admin"], schema) == objects(trio["native_admin"], schema)
        pair.sql(f"DROP DATABASE {schema}")  # leaves no trigger behind for the sql-mode cases
        pair.sync()
    finally:
        pair.stop()


def _native_position(conn) -> str:
    with conn.cursor() as cur:
        cur.execute(Flavor.of(conn).replica_gtid_sql)
        return cur.fetchone()[0]


_runs = iter(range(1, 10_000))


@pytest.mark.parametrize("workers,catch_up", [(1, False), (4, True)], ids=["live-1-worker", "backlog-4-workers"])
@pytest.mark.parametrize("case", sorted({**CASES, **TRIGGER_CASES}))
def test_binlog_mode_holds_what_a_native_replica_holds(trio, case, workers, catch_up):
    run_case(trio, {**CASES, **TRIGGER_CASES}[case], f"sem_{case}_{next(_runs)}", workers, catch_up, "binlog")


@pytest.mark.parametrize("case", sorted(CASES))
def test_sql_mode_holds_what_a_native_replica_holds(trio, case):
    run_case(trio, CASES[case], f"semsql_{case}_{next(_runs)}", 1, False, "sql")


def test_sql_mode_stops_at_a_trigger_the_primary_creates(trio):
    schema = f"semtrg_{next(_runs)}"
    pair = BridgePair(trio, "shm", apply_mode="sql").start()
    try:
        pair.sql(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)",
                 f"CREATE TRIGGER {schema}.primary_tr AFTER INSERT ON {schema}.t FOR EACH ROW SET @x = 1")
        with pytest.raises(AssertionError, match=f"created trigger {schema}.primary_tr; apply mode sql"):
            pair.sync(timeout_s=10)
        with pair.replica.cursor() as cur:
            assert cur.execute("SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_NAME='primary_tr'") == 0
    finally:
        pair.errors.clear()
        pair.stop()
        admin = connect(trio["primary_admin"])
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {schema}")
        admin.close()


def test_sql_mode_refuses_replica_triggers_naming_them(trio):
    schema = f"semtrg_{next(_runs)}"
    admin = connect(trio["replica_admin"])
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)")
            cur.execute(f"CREATE TRIGGER {schema}.local_tr AFTER INSERT ON {schema}.t FOR EACH ROW SET @x = 1")
        with pytest.raises(BridgeError, match=f"{schema}.t.local_tr"):
            BridgePair(trio, "shm", apply_mode="sql").start_replica()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {schema}")
        admin.close()

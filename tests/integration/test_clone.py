"""`rdma-bridge clone` of a live primary (writes running all along), then streaming
from the position it recorded: both databases end equal row by row, with every column
type, invisible and generated columns, routines, views, triggers (not fired for the
copied rows) and events (disabled on the replica); what clone refuses, it refuses
before writing anything; a clone that stopped is found and restarted."""

import logging
import os
import subprocess
import sys
import threading
import time

import pymysql
import pytest
from click.testing import CliRunner

from bridge.check.checksum import Checksummer
from bridge.cli import main
from bridge.clone.run import Cloner
from bridge.errors import EXIT_CONFIG, ConfigError
from bridge.filter import Filter
from bridge.lab.workload import connect, create_schema
from bridge.server.flavor import Flavor
from tests.conftest import BridgePair
from tests.helpers import BackgroundWorkload, numbers, wait_shipped, wait_written
from tests.integration.test_types import TYPES_TABLE, type_rows

ROWS_PER_TABLE = 20_000


def _fill(pair, s):
    rows = type_rows(pair.primary, pair.replica)
    pair.sql(TYPES_TABLE.format(s=s), *[f"INSERT INTO {s}.types VALUES {row}" for row in rows],
             f"UPDATE {s}.types SET f = 0.123456789 WHERE id = 1",  # FLOAT's text (6 digits) would lose bits
             f"CREATE TABLE {s}.big (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(40), n DOUBLE, "
             "hidden INT INVISIBLE DEFAULT 7, twice DOUBLE AS (n * 2) VIRTUAL, KEY (v))",  # MySQL: not of id
             f"INSERT INTO {s}.big (id, v, n, hidden) SELECT seq, CONCAT('row ', seq), seq / 7, seq % 5 "
             f"FROM {numbers(pair.primary, s, ROWS_PER_TABLE)}",
             f"CREATE TABLE {s}.blobs (id INT PRIMARY KEY, b LONGBLOB)",  # chunks longer than GROUP_CONCAT takes
             f"INSERT INTO {s}.blobs SELECT seq, REPEAT(CHAR(seq), 200000) FROM {numbers(pair.primary, s, 100)}",
             f"CREATE TABLE {s}.keyless (v VARCHAR(20), n INT)",
             f"INSERT INTO {s}.keyless SELECT 'same', 1 FROM {numbers(pair.primary, s, 50)}",  # duplicates, no key
             f"CREATE TABLE {s}.audit (id INT PRIMARY KEY AUTO_INCREMENT, big_id INT)",
             f"CREATE TRIGGER {s}.big_audit AFTER INSERT ON {s}.big FOR EACH ROW "
             f"INSERT INTO {s}.audit (big_id) VALUES (NEW.id)",
             f"INSERT INTO {s}.big (v) VALUES ('audited')",
             f"CREATE VIEW {s}.v_big AS SELECT id, v FROM {s}.big WHERE id < 10",
             f"CREATE VIEW {s}.v_v AS SELECT COUNT(*) AS n FROM {s}.v_big",
             f"CREATE FUNCTION {s}.twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2",
             f"CREATE PROCEDURE {s}.touch() UPDATE {s}.big SET n = n + 1 WHERE id = 1",
             f"CREATE EVENT {s}.tick ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM {s}.audit WHERE id < 0")


def test_clone_under_writes_then_stream_ends_equal(urls, fresh_schema, caplog):
    caplog.set_level(logging.DEBUG, logger="bridge.clone")
    s = fresh_schema("clone")
    pair = BridgePair(urls, "tcp")
    create_schema(pair.primary, s)
    _fill(pair, s)
    try:
        with BackgroundWorkload(urls["primary_admin"], s):  # the mixed workload's own tables, written throughout
            result = Cloner(urls["primary_admin"], urls["replica_admin"], channel=pair.channel, schemas=(s,),
                            parallel=2, defer_indexes=True).run()
        assert result.rows > ROWS_PER_TABLE and result.per_table[f"{s}.big"][0] == ROWS_PER_TABLE + 1
        assert any(f"a chunk of {s}.blobs was longer" in r.message for r in caplog.records)
        pair.start_gtid = None  # the channel's start is the clone's position
        pair.start_replica()
        pair.start_primary()
        pair.sql(f"INSERT INTO {s}.big (v) VALUES ('after the clone')", f"CALL {s}.touch()")
        pair.assert_same(s)
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {s}.audit")  # the trigger fired on the primary only, never on copy
            audited = cur.fetchone()[0]
            cur.execute("SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s AND "
                        "TABLE_NAME='big' ORDER BY 1", (s,))  # built after the rows (--defer-indexes)
            assert [r[0] for r in cur.fetchall()] == ["PRIMARY", "v"]
            cur.execute(f"SELECT hidden, twice = n * 2 FROM {s}.big WHERE id = 3")
            assert cur.fetchone() == (3, 1)
            cur.execute(f"SELECT n, {s}.twice(21) FROM {s}.v_v")
            assert cur.fetchone() == (9, 42)
            cur.execute("SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA=%s", (s,))
            assert cur.fetchone()[0] == Flavor.of(pair.replica).replica_disabled_event
            cur.execute(f"SELECT f + 0e0 FROM {s}.types WHERE id = 1")
            replica_float = cur.fetchone()[0]
        with pair.primary.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {s}.audit")
            assert cur.fetchone()[0] == audited == 2
            cur.execute(f"SELECT f + 0e0 FROM {s}.types WHERE id = 1")
            assert cur.fetchone()[0] == replica_float  # the FLOAT's exact bits
    finally:
        _drop_on_replica(pair, s)
        pair.stop()


def test_clone_refuses_a_replica_that_holds_the_schema_and_restarts_a_stopped_one(urls, fresh_schema):
    s = fresh_schema("clone_refuse")
    pair = BridgePair(urls, "tcp")
    try:
        create_schema(pair.primary, s)
        pair.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1), (2)")
        with pair.replica.cursor() as cur:  # the replica holds it already: refused, nothing written
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
        with pytest.raises(ConfigError, match=f"already holds {s}.t: clone copies into schemas and tables the replica does not"):
            Cloner(urls["primary_admin"], urls["replica_admin"], channel=pair.channel, schemas=(s,)).run()
        with pair.replica.cursor() as cur:
            cur.execute(f"DROP DATABASE {s}")
            # a clone that stopped half way: its state says so, the next one refuses, --restart goes on
            cur.execute("INSERT INTO rdma_bridge.clone_state (channel, db, tbl, gtid_set) VALUES (%s, %s, 't', '')",
                        (pair.channel, s))
            cur.execute("INSERT INTO rdma_bridge.channel_filter (channel, pending) VALUES (%s, %s)",
                        (pair.channel, Filter.parse([s, "other"]).to_json()))
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {s}.t VALUES (1)")
        pair.replica.commit()
        args = ["clone", "--schema", s, "--channel", pair.channel]
        env = _clone_env(urls)
        out = CliRunner().invoke(main, args, env=env)  # a resume must copy what the stopped clone copied
        assert out.exit_code == EXIT_CONFIG and f"the stopped clone of channel '{pair.channel}' copies include {s}, other, " \
            f"not include {s}" in out.output and "--restart" in out.output, out.output
        out = CliRunner().invoke(main, [*args, "--restart"], env=env)
        assert out.exit_code == 0, out.output
        assert "cloned 5 tables, 2 rows" in out.output  # t and the (empty) tables create_schema makes
        assert urls["primary_admin"].password not in out.output
        pair.start_gtid = None
        pair.start_replica()
        pair.start_primary()
        pair.sql(f"INSERT INTO {s}.t VALUES (3)")
        pair.assert_same(s)
    finally:
        _drop_on_replica(pair, s)
        pair.stop()


def _drop_on_replica(pair, schema):
    """The schema's drop on the primary (fresh_schema, at the end) reaches no replica once
    the pair stopped: the clone's triggers must not stay there for other tests."""
    with pair.replica.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {schema}")
    pair.replica.commit()


def _writes_to(url, s, stop, done):
    """Updates and inserts into both big tables until ``stop``: the window between the
    killed clone's snapshot and the resumed one's has changes to tables of both."""
    conn = connect(url)
    n = ROWS_PER_TABLE
    while not stop.is_set():
        n += 1
        with conn.cursor() as cur:
            for t in ("big", "big2"):
                cur.execute(f"UPDATE {s}.{t} SET n = n + 1 WHERE id = %s", (n % ROWS_PER_TABLE + 1,))
                cur.execute(f"INSERT INTO {s}.{t} VALUES (%s, 'written during the clone', 0)", (n,))
        conn.commit()
        done.append(n)
        time.sleep(0.005)
    conn.close()


def _tables(conn, schema):
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s ORDER BY 1", (schema,))
        return [r[0] for r in cur.fetchall()]


def _clone_env(urls) -> dict:
    """Both URLs, passwords in, for a clone in a subprocess (the environment, not argv)."""
    return {f"RDMA_BRIDGE_{role}": str(urls[key]).replace(":***@", f":{urls[key].password}@")
            for role, key in (("SOURCE", "primary_admin"), ("TARGET", "replica_admin"))}


def _kill_after_first_copy(args, env, pair, prefix: str, timeout_s: float) -> None:
    """Run the clone in a subprocess and SIGKILL it once a table named ``prefix``... is copied."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while not any(copied for t, _, copied, _ in _clone_state(pair) if t.startswith(prefix)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    proc.communicate()


def _clone_state(pair):
    with pair.replica.cursor() as cur:
        try:
            cur.execute("SELECT tbl, gtid_set, copied, finished FROM rdma_bridge.clone_state WHERE channel=%s "
                        "ORDER BY 1", (pair.channel,))
        except (pymysql.ProgrammingError, pymysql.OperationalError) as exc:  # not created yet (the clone creates it)
            if exc.args[0] not in (1146, 1049):  # no such table; MySQL: no such database
                raise
            return ()
        rows = cur.fetchall()
    pair.replica.commit()
    return rows


def test_clone_killed_midway_is_resumed_and_streams_equal(urls, fresh_schema, caplog):
    caplog.set_level(logging.INFO, logger="bridge.node.scope")
    s = fresh_schema("clone_kill")
    pair = BridgePair(urls, "tcp")
    create_schema(pair.primary, s)
    pair.sql(*[f"CREATE TABLE {s}.{t} (id INT PRIMARY KEY, v VARCHAR(40), n INT)" for t in ("big", "big2")],
             *[f"INSERT INTO {s}.{t} SELECT seq, CONCAT('row ', seq), 0 FROM {numbers(pair.primary, s, ROWS_PER_TABLE)}"
               for t in ("big", "big2")],
             f"CREATE VIEW {s}.counted AS SELECT COUNT(*) AS n FROM {s}.big",
             f"CREATE PROCEDURE {s}.touch() UPDATE {s}.big SET n = n + 100 WHERE id = 2")
    env = {**os.environ, **_clone_env(urls)}
    args = [sys.executable, "-m", "bridge", "clone", "--schema", s, "--channel", pair.channel,
            "--max-rows-per-second", "8000"]
    stop, rounds = threading.Event(), []
    writer = threading.Thread(target=_writes_to, args=(urls["primary_admin"], s, stop, rounds))
    try:
        with BackgroundWorkload(urls["primary_admin"], s):
            writer.start()
            _kill_after_first_copy(args, env, pair, "big", 60)  # one big table copied, the other half way
            killed = _clone_state(pair)
            # one of the two big tables copied, not the other (the workload's small tables may be, or not)
            assert sum(copied for t, _, copied, _ in killed if t in ("big", "big2")) == 1, killed
            assert not any(f for *_, f in killed), killed
            wait_written(pair.primary, 50)  # more writes before the resumed clone's snapshot
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert "resuming the clone" in done.stderr and " more kept from the clone that stopped)" in done.stdout
            state = _clone_state(pair)
            assert len({g for _, g, _, _ in state}) == 2 and all(f and c for _, _, c, f in state)
            pair.start_gtid = None  # the channel starts at the earlier position
            pair.start_replica()
            pair.start_primary()
            wait_shipped(pair.primary_node, 50)  # the writes go on while the replica side catches up
            stop.set()
            writer.join()
        assert len(rounds) > 100  # the writer wrote all along
        pair.sql(f"CALL {s}.touch()")
        pair.assert_same(s)
        assert any("tables were copied by a resumed clone at later positions" in r.message for r in caplog.records)
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT n FROM {s}.counted")
            assert cur.fetchone()[0] > ROWS_PER_TABLE
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        _drop_on_replica(pair, s)
        pair.stop()


MATRIX_TABLES, MATRIX_ROWS = 4, 250_000
# Every column of the type matrix as a function of n: extremes and traps spread over the
# rows (NULLs, empty strings, BINARY padding, negative TIME, zero-length BLOBs, JSON).
MATRIX_VALUES = """n, n % 256 - 128, n % 256, n % 65536 - 32768, n % 65536, n % 16777216 - 8388608, n % 16777216,
  n * 2654435761 % 4294967296 - 2147483648, n * 2654435761 % 4294967296, -1000003 * n, 18446744073709551615 - n,
  (n % 199999 - 99999) / 100, n / 7, n / 3, IF(n % 11 = 0, NULL, n / 3), IF(n % 2, -1, 1) * n / 7e0,
  n % 2, n % 8, n * 2654435761, DATE_ADD('1000-01-01', INTERVAL n * 13 DAY),
  DATE_ADD('1000-01-01 00:00:00', INTERVAL n * 7919 SECOND), DATE_ADD('2000-01-01', INTERVAL n * 1000003 MICROSECOND),
  IF(n % 10 = 0, NULL, FROM_UNIXTIME(1 + n * 1000)), FROM_UNIXTIME(1 + n * 1000 + 0.123),
  SEC_TO_TIME(n % 6000000 - 3000000), SEC_TO_TIME(n % 600000 - 300000 + 0.25), SEC_TO_TIME(n % 86400 + 0.000001),
  1901 + n % 255, LEFT(SHA2(n, 256), n % 6), CONCAT('é😀', n), IF(n % 3 = 0, '', REPEAT('t', n % 50)),
  IF(n % 100 = 0, NULL, CONCAT('中文 ', n)), CONCAT('Ø', n % 1000), UNHEX(LPAD(HEX(n % 65536), 4, '0')),
  UNHEX(LPAD(HEX(n), 8, '0')), IF(n % 5 = 0, NULL, UNHEX(LEFT(SHA2(n, 256), 32))), IF(n % 1000 = 0, REPEAT(UNHEX(LEFT(SHA2(n, 256), 32)), 100), ''),
  JSON_OBJECT('n', n, 'f', n / 3e0, 's', CONCAT('v', n)), ELT(1 + n % 3, 'x', 'y', 'zz'), MAKE_SET(n % 8, 'a', 'b', 'c')"""
# (n / 3e0: a double; a DECIMAL inside a MySQL JSON value has no text form, so a copy made
# by SELECT, the clone's as mysqldump's, reads it back as a double: docs/operations.md)


def _matrix_writes(url, big, stop, done):
    """Inserts, updates and deletes in every matrix table until ``stop``; ``done``: how
    many rounds (the test checks they happened). A new row's id runs on past the loaded
    ones; its other columns repeat a loaded row's values (the matrix's dates leave the
    DATE range a few thousand rows past MATRIX_ROWS)."""
    conn = connect(url)
    values = MATRIX_VALUES.replace('%', '%%').split(",", 1)[1]  # every column but the id
    n = MATRIX_ROWS
    while not stop.is_set():
        n += 1
        with conn.cursor() as cur:
            for k in range(MATRIX_TABLES):
                cur.execute(f"INSERT INTO {big}.m{k} SELECT %s, {values} FROM (SELECT %s AS n) AS src",
                            (n, 1 + n % MATRIX_ROWS))
                cur.execute(f"UPDATE {big}.m{k} SET db = db + 1, vc = CONCAT(vc, '+') WHERE id = %s", (n * 7919 %
                                                                                                       MATRIX_ROWS,))
                cur.execute(f"DELETE FROM {big}.m{k} WHERE id = %s", (n * 104729 % MATRIX_ROWS,))
        done.append(n)
        time.sleep(0.01)
    conn.close()


@pytest.mark.timeout(600)  # about 100 s here; a hang guard with room for a loaded machine
def test_clone_of_a_million_rows_of_the_type_matrix_killed_resumed_filtered_renamed(urls, fresh_schema):
    """~1M rows over four tables of every column type, cloned (two connections, one table
    left out, the schema renamed) while the mixed workload and writes into every matrix
    table run; the clone killed with SIGKILL once a table is copied, resumed, then
    streamed. The workload's schema is compared row by row, the matrix tables by chunk
    checksums on both servers (COUNT and CRC sums over every column, both quiet:
    ``checksum --offline``, which follows the channel's filter and rename). Each phase's
    time is printed, so a slow run says which phase was slow."""
    started = time.monotonic()

    def phase(what: str) -> None:
        print(f"{time.monotonic() - started:6.1f} s  {what}", flush=True)

    s, big = fresh_schema("clone_mix"), fresh_schema("clone_1m")
    into = f"{big}_r"
    pair = BridgePair(urls, "tcp")
    create_schema(pair.primary, s)
    pair.sql(f"CREATE DATABASE {big}")
    for k in range(MATRIX_TABLES):
        pair.sql(TYPES_TABLE.format(s=big).replace(".types (", f".m{k} (", 1),
                 f"INSERT INTO {big}.m{k} SELECT {MATRIX_VALUES} FROM (SELECT CAST(seq AS SIGNED) AS n FROM "
                 f"{numbers(pair.primary, big, MATRIX_ROWS)}) AS src")
    phase("matrix tables loaded")
    env = {**os.environ, **_clone_env(urls)}
    args = [sys.executable, "-m", "bridge", "clone", "--schema", s, "--include", big, "--exclude", f"{big}.m3",
            "--rename-schema", f"{big}={into}", "--channel", pair.channel, "--parallel", "2"]
    stop, rounds = threading.Event(), []
    writer = threading.Thread(target=_matrix_writes, args=(urls["primary_admin"], big, stop, rounds))
    try:
        with BackgroundWorkload(urls["primary_admin"], s):
            writer.start()
            _kill_after_first_copy(args, env, pair, "m", 240)  # a matrix table copied, others half way or not begun
            phase("a matrix table copied, the clone killed")
            # two connections copy two tables at once: the other may finish before the kill lands
            assert 1 <= sum(copied for t, _, copied, _ in _clone_state(pair) if t.startswith("m")) < 3
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            assert "resuming the clone" in done.stderr and "more kept from the clone that stopped" in done.stdout
            phase("the clone resumed and done")
            pair.start_gtid = None
            pair.start_replica()
            pair.start_primary()
            wait_shipped(pair.primary_node, 50)  # the writes go on while the replica side catches up
            stop.set()
            writer.join()
            phase(f"streaming, the writer stopped after {len(rounds)} rounds")
        assert len(rounds) > 50  # the writer wrote into every matrix table all along
        assert _tables(pair.replica, into) == ["m0", "m1", "m2"] and not _tables(pair.replica, big)
        pair.assert_same(s)
        phase("the replica caught up, the workload's schema equal")
        checker = Checksummer(urls["primary_admin"], urls["replica_admin"], pair.channel, offline=True)
        try:
            run = checker.run([big])  # the channel's filter and rename: m0..m2 against their copies in `into`
        finally:
            checker.close()
        assert run.tables == MATRIX_TABLES - 1 and run.rows >= 3 * (MATRIX_ROWS - 1000) and run.chunks > 15
        assert not run.mismatches, run.mismatches[:3]
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        _drop_on_replica(pair, s)
        _drop_on_replica(pair, into)
        pair.stop()

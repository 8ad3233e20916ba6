"""Statements replayed in their primary session, and row events as BINLOG statements (pure)."""

import base64

import pytest

from bridge.apply import binlog_sql, replay
from bridge.wire import binlog, tablemap
from tests.unit.test_binlog_events import FDE, QUERY, TABLE_MAP, UPDATE, USER_VAR_INT, USER_VAR_STR, WRITE

COLLATIONS = {45: ("utf8mb4_general_ci", "utf8mb4"), 8: ("latin1_swedish_ci", "latin1")}


def test_a_statement_replays_in_its_own_session_with_its_user_variables():
    plan = replay.statements(USER_VAR_STR + USER_VAR_INT + QUERY, 4, True, COLLATIONS.get)
    assert plan.session == (
        b"SET @@session.foreign_key_checks=1, @@session.sql_auto_is_null=0, @@session.unique_checks=1",
        b"SET @@session.sql_mode=1411383296",
        b"SET @@session.character_set_client=45, @@session.collation_connection=45, @@session.collation_server=45",
        b"SET @@session.explicit_defaults_for_timestamp=1",
        b"SET TIMESTAMP=1796108310.000000",
        b"SET @`v`:=_utf8mb4 X'737472' COLLATE `utf8mb4_general_ci`",
        b"SET @`i`:=-7")
    assert plan.sql == b"INSERT INTO cap.t (id, name, n) VALUES (2 + RAND(3)*0, @v, @i)" and plan.schema == ""


def test_across_flavors_unknown_collations_become_utf8mb4_and_sql_mode_keeps_common_bits():
    plan = replay.statements(QUERY, 4, False, lambda _id: None)
    assert b"SET NAMES utf8mb4" in plan.session
    assert b"SET @@session.sql_mode=%d" % (1411383296 & replay.PORTABLE_SQL_MODE) in plan.session


def test_raw_statement_must_end_with_its_query():
    with pytest.raises(binlog.RemoteProtocolError, match="do not end with a QUERY"):
        replay.statements(USER_VAR_STR, 4, True, COLLATIONS.get)


@pytest.mark.parametrize("sql,schema,name", [
    ("CREATE DEFINER=`a`@`%` EVENT db.e ON SCHEDULE EVERY 1 DAY DO SELECT 1", "", "`db`.`e`"),
    ("CREATE EVENT IF NOT EXISTS e ON SCHEDULE AT NOW() DO SELECT 1", "s", "`s`.`e`"),
    ("ALTER EVENT `d b`.`e``x` RENAME TO d2.f", "", "`d2`.`f`"),
    ("/* c */ ALTER DEFINER = 'u'@'h' EVENT e ENABLE", "s", "`s`.`e`"),
    ("ALTER EVENT e DISABLE ON SLAVE", "s", None),
    ("CREATE TABLE event (id INT)", "s", None),
    ("DROP EVENT e", "s", None)])
def test_events_to_disable_like_a_native_replica(sql, schema, name):
    assert replay.event_to_disable(sql, schema) == name


def test_definer_and_trigger_recognition():
    assert replay.names_definer("CREATE DEFINER=`a`@`%` EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1")
    assert not replay.names_definer("ALTER EVENT e ON SCHEDULE EVERY 2 DAY")
    assert replay.created_trigger("CREATE DEFINER=`u`@`%` TRIGGER s.tr AFTER INSERT ON t FOR EACH ROW SET @x=1") \
        == "s.tr"
    assert replay.created_trigger("CREATE TABLE trigger_log (id INT)") is None


def _without_statement_end(event: bytes) -> bytes:
    at = binlog.HEADER_BYTES + binlog.TABLE_ID_BYTES
    return event[:at] + b"\0\0" + event[at + 2:]


def test_binlog_statements_cut_inside_a_statement_repeat_its_table_map():
    write = _without_statement_end(WRITE)
    big = TABLE_MAP + write + write + UPDATE  # one statement's row events, STMT_END_F on the last
    limit = binlog_sql.statement_bytes(len(TABLE_MAP) + 2 * len(write))
    parts = binlog_sql.batches([big], limit)
    assert parts == [TABLE_MAP + write + write, TABLE_MAP + UPDATE]
    assert all(binlog_sql.statement_bytes(len(p)) <= limit for p in parts)
    assert binlog_sql.batches([TABLE_MAP + WRITE, TABLE_MAP + UPDATE], 10 ** 6) == [TABLE_MAP + WRITE + TABLE_MAP + UPDATE]


def test_binlog_statement_and_fragments_carry_the_events_exactly():
    assert base64.b64decode(binlog_sql.binlog_statement(WRITE)[8:-1]) == WRITE
    set0, set1, use = binlog_sql.fragment_statements(TABLE_MAP + WRITE)
    assert base64.b64decode(set0.split(b"'")[1] + set1.split(b"'")[1]) == TABLE_MAP + WRITE
    assert use == b"BINLOG @binlog_fragment_0, @binlog_fragment_1"


def test_the_probe_events_read_back_as_one_row_into_the_probe_table():
    fmt = binlog.parse_format_description(FDE)
    [(table, kind, before, after)] = list(tablemap.rows_of(binlog_sql.probe_events(fmt), fmt.checksum_bytes))
    assert (table.schema, table.table, kind, before) == ("rdma_bridge", "bridge_probe", "insert", None)
    assert tablemap.as_int(after[0]) == 1

"""Statements replayed in their primary session, and row events as BINLOG statements (pure)."""

import base64

import pytest

from bridge.apply import replay
from bridge.apply.binlog import build
from bridge.errors import ApplyError
from bridge.wire import binlog, tablemap
from tests.unit.test_binlog_events import FDE, QUERY, TABLE_MAP, UPDATE, USER_VAR_INT, USER_VAR_STR, WRITE

COLLATIONS = replay.ReplicaCollations({45: ("utf8mb4_general_ci", "utf8mb4"), 8: ("latin1_swedish_ci", "latin1")})


def test_a_statement_replays_in_its_own_session_with_its_user_variables():
    plan = replay.statements(USER_VAR_STR + USER_VAR_INT + QUERY, 4, True, COLLATIONS)
    assert plan.session == (
        b"SET @@session.foreign_key_checks=1, @@session.sql_auto_is_null=0, @@session.unique_checks=1",
        b"SET @@session.sql_mode=1411383296",
        b"SET @@session.character_set_client='utf8mb4', @@session.collation_connection='utf8mb4_general_ci', "
        b"@@session.collation_server='utf8mb4_general_ci'",
        b"SET @@session.explicit_defaults_for_timestamp=1",
        b"SET TIMESTAMP=1796108310.000000",
        b"SET @`v`:=_utf8mb4 X'737472' COLLATE `utf8mb4_general_ci`",
        b"SET @`i`:=-7")
    assert plan.sql == b"INSERT INTO cap.t (id, name, n) VALUES (2 + RAND(3)*0, @v, @i)" and plan.schema == ""


def test_across_flavors_unknown_collations_become_utf8mb4_and_sql_mode_keeps_common_bits():
    plan = replay.statements(QUERY, 4, False, replay.ReplicaCollations({}))
    assert b"SET NAMES utf8mb4" in plan.session
    assert b"SET @@session.sql_mode=%d" % (1411383296 & replay.PORTABLE_SQL_MODE) in plan.session
    # MariaDB's default (STRICT_TRANS_TABLES, ERROR_FOR_DIVISION_BY_ZERO, NO_AUTO_CREATE_USER,
    # NO_ENGINE_SUBSTITUTION) on a MySQL 8 replica: without NO_AUTO_CREATE_USER, which MySQL refuses
    assert 0x54200000 & replay.PORTABLE_SQL_MODE == 0x44200000


def test_raw_statement_must_end_with_its_query():
    with pytest.raises(binlog.RemoteProtocolError, match="do not end with a QUERY"):
        replay.statements(USER_VAR_STR, 4, True, COLLATIONS)


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
    limit = binlog.statement_bytes(len(TABLE_MAP) + 2 * len(write))
    parts = build.batches([big], limit)
    assert parts == [TABLE_MAP + write + write, TABLE_MAP + UPDATE]
    assert all(binlog.statement_bytes(len(p)) <= limit for p in parts)
    assert build.batches([TABLE_MAP + WRITE, TABLE_MAP + UPDATE], 10 ** 6) == [TABLE_MAP + WRITE + TABLE_MAP + UPDATE]


def test_binlog_statement_and_fragments_carry_the_events_exactly():
    assert base64.b64decode(binlog.binlog_statement(WRITE)[8:-1]) == WRITE
    set0, set1, use = build.fragment_statements(TABLE_MAP + WRITE)
    assert base64.b64decode(set0.split(b"'")[1] + set1.split(b"'")[1]) == TABLE_MAP + WRITE
    assert use == b"BINLOG @binlog_fragment_0, @binlog_fragment_1"


def test_the_probe_events_read_back_as_one_row_into_the_probe_table():
    fmt = binlog.parse_format_description(FDE)
    [(table, kind, before, after)] = list(tablemap.rows_of(build.probe_events(fmt), fmt.checksum_bytes))
    assert (table.schema, table.table, kind, before) == ("rdma_bridge", "bridge_probe", "insert", None)
    assert tablemap.as_int(after[0]) == 1


BRIDGE_META = [("channel", "varchar", 256, None, "utf8mb4"), ("applied_seq", "bigint", None, None, None),
               ("gtid_set", "text", 65535, None, "utf8mb4"), ("pending_ddl_seq", "bigint", None, None, None),
               ("updated_at", "timestamp", None, 6, None), ("epoch", "bigint", None, None, None)]


def test_the_position_table_is_taken_only_as_the_bridge_creates_it():
    assert build.position_table(BRIDGE_META) == build.PositionTable(256, 6)
    latin1 = [("channel", "varchar", 64, None, "latin1")] + BRIDGE_META[1:]
    assert build.position_table(latin1) == build.PositionTable(64, 6)
    assert build.position_table(BRIDGE_META[:1] + [("note", "int", None, None, None)] + BRIDGE_META[1:]) is None
    assert build.position_table(BRIDGE_META[:2] + [("gtid_set", "mediumtext", 1 << 24, None, "utf8mb4")]
                                     + BRIDGE_META[3:]) is None
    assert build.position_table([("channel", "varchar", 256, None, "ucs2")] + BRIDGE_META[1:]) is None
    assert build.position_table(BRIDGE_META[:4]) is None


@pytest.mark.parametrize("channel_bytes,prefix", [(256, 2), (64, 1)])
def test_the_position_event_names_the_row_by_its_channel_and_sets_the_position(channel_bytes, prefix):
    fmt = binlog.parse_format_description(FDE)
    table = build.PositionTable(channel_bytes, 6)
    tm, update = binlog.split_events(table.table_map(fmt) + table.update(b"main", 42, b"0-1-42", 1_700_000_000_123_456,
                                                                          fmt))
    parsed = tablemap.parse_table_map(tm, fmt.checksum_bytes)
    assert (parsed.schema, parsed.table) == ("rdma_bridge", "bridge_meta")
    assert parsed.types == (tablemap.VARCHAR, tablemap.LONGLONG, tablemap.BLOB, tablemap.LONGLONG, tablemap.TIMESTAMP2)
    assert parsed.sizes == (-prefix, 8, -2, 8, 7)
    assert binlog.event_type(update) == binlog.UPDATE_ROWS_V1 and binlog.rows_flags(update) == binlog.STMT_END_F
    assert binlog.table_id(update) == binlog.table_id(tm) and binlog.read_header(update).server_id == fmt.server_id
    body = update[binlog.HEADER_BYTES + 8:len(update) - fmt.checksum_bytes]
    assert body == (b"\x05\x01\x1e" + b"\x00" + (4).to_bytes(prefix, "little") + b"main"
                    + b"\x00" + (42).to_bytes(8, "little") + (6).to_bytes(2, "little") + b"0-1-42" + bytes(8)
                    + (1_700_000_000).to_bytes(4, "big") + (123_456).to_bytes(3, "big"))


@pytest.mark.parametrize("digits,fraction", [(0, b""), (1, bytes([10])), (2, bytes([12])), (3, (1230).to_bytes(2, "big")),
                                             (4, (1234).to_bytes(2, "big")), (5, (123450).to_bytes(3, "big")),
                                             (6, (123456).to_bytes(3, "big"))])
def test_updated_at_is_stored_as_the_server_stores_a_timestamp_of_its_precision(digits, fraction):
    fmt = binlog.parse_format_description(FDE)
    event = build.PositionTable(64, digits).update(b"c", 1, b"", 1_700_000_000_123_456, fmt)
    end = len(event) - fmt.checksum_bytes
    assert event[end - 4 - len(fraction):end] == (1_700_000_000).to_bytes(4, "big") + fraction


# A MariaDB 11.8 QUERY event (its own server, default session): the session's charset ids
# are 11.x uca1400 ones (2048 utf8mb3_uca1400_ai_ci, 2304 utf8mb4_uca1400_ai_ci) and the
# statement depends on @@character_set_collations, logged (code 131) before the charset.
QUERY_118 = bytes.fromhex(
    "fa1e106b02010000009500000092020000000006000000000000000000003900000000000101000020540000000006037374648305"
    "210000082300000a2d0000093600000b3c00000c04000800080009810c0000000000000000637265617465207461626c652064392e"
    "74332028612076617263686172283529206368617261637465722073657420757466386d623429eecb54a1")
COLLATIONS_118 = replay.ReplicaCollations(
    {33: ("utf8mb3_general_ci", "utf8mb3"), 35: ("ucs2_general_ci", "ucs2"), 45: ("utf8mb4_general_ci", "utf8mb4"),
     54: ("utf16_general_ci", "utf16"), 60: ("utf32_general_ci", "utf32"), 2048: ("utf8mb3_uca1400_ai_ci", "utf8mb3"),
     2304: ("utf8mb4_uca1400_ai_ci", "utf8mb4"), 2560: ("ucs2_uca1400_ai_ci", "ucs2"),
     2816: ("utf16_uca1400_ai_ci", "utf16"), 3072: ("utf32_uca1400_ai_ci", "utf32")}, has_charset_collations=True)


def test_a_mariadb_11_session_replays_by_name_with_its_character_set_collations():
    q = binlog.parse_query(QUERY_118, 4)
    assert q.charset == (2048, 2048, 2304) and q.sql.startswith(b"create table d9.t3")
    assert q.status[binlog.Q_CHARACTER_SET_COLLATIONS] == ((33, 2048), (35, 2560), (45, 2304), (54, 2816), (60, 3072))
    plan = replay.statements(QUERY_118, 4, True, COLLATIONS_118)
    assert b"SET @@session.character_set_client='utf8mb3', @@session.collation_connection='utf8mb3_uca1400_ai_ci', " \
           b"@@session.collation_server='utf8mb4_uca1400_ai_ci'" in plan.session
    assert b"SET @@session.character_set_collations='utf8mb3=utf8mb3_uca1400_ai_ci,ucs2=ucs2_uca1400_ai_ci," \
           b"utf8mb4=utf8mb4_uca1400_ai_ci,utf16=utf16_uca1400_ai_ci,utf32=utf32_uca1400_ai_ci'" in plan.session
    assert plan.restore == (replay.RESET_REPLAYED, replay.RESET_CHARSET_COLLATIONS, replay.RESET_INSERT_ID,
                            replay.RESET_EXPLICIT_DEFAULTS)


def test_a_statement_without_the_mapping_runs_with_none_where_the_replica_has_the_variable():
    """An older primary logs no character_set_collations: its statements ran with the
    character sets' own defaults, so the replica's mapping is emptied for them."""
    plan = replay.statements(QUERY, 4, True, replay.ReplicaCollations(COLLATIONS.by_id, has_charset_collations=True))
    assert b"SET @@session.character_set_collations=''" in plan.session
    assert replay.statements(QUERY, 4, True, COLLATIONS).restore == (replay.RESET_REPLAYED, replay.RESET_INSERT_ID,
                                                                     replay.RESET_EXPLICIT_DEFAULTS)


def test_insert_id_is_cleared_only_on_a_mariadb_replica():
    """MySQL takes insert_id=0 as the next AUTO_INCREMENT value (there is no DEFAULT): a
    MySQL replica is not given it (the applier's own rows got id 0, then a duplicate)."""
    mysql = replay.statements(QUERY, 4, False, COLLATIONS, mysql_replica=True)
    assert replay.RESET_INSERT_ID not in mysql.restore and b"insert_id" not in b"".join(mysql.restore)
    assert replay.RESET_INSERT_ID in replay.statements(QUERY, 4, False, COLLATIONS).restore


def test_inside_a_transaction_explicit_defaults_for_timestamp_is_neither_set_nor_reset():
    """MySQL refuses to set it in a transaction (statement-format DML runs in one)."""
    inside = replay.statements(QUERY, 4, True, COLLATIONS, in_transaction=True)
    outside = replay.statements(QUERY, 4, True, COLLATIONS)
    assert not any(s.startswith(replay.EXPLICIT_DEFAULTS) for s in inside.session)
    assert replay.RESET_EXPLICIT_DEFAULTS not in inside.restore and replay.RESET_EXPLICIT_DEFAULTS in outside.restore


def test_a_collation_the_replica_lacks_stops_applying_naming_it_as_the_primary_does():
    lacking = replay.ReplicaCollations({33: ("utf8mb3_general_ci", "utf8mb3")}, primary_names={2048: "utf8mb3_uca1400_ai_ci"})
    with pytest.raises(ApplyError, match="collation id 2048 \\(utf8mb3_uca1400_ai_ci on the primary\\) is unknown"):
        replay.statements(QUERY_118, 4, True, lacking)


def test_a_collation_the_replica_lacks_becomes_its_character_sets_default_there():
    known = {"utf8mb4_general_ci": "utf8mb4_general_ci", "utf8mb4_bin": "utf8mb4_bin",
             "charset:utf8mb4": "utf8mb4_general_ci"}
    ddl = (b"CREATE TABLE t (a VARCHAR(5) COLLATE utf8mb4_0900_as_cs, b TEXT COLLATE `utf8mb4_bin`, "
           b"c TEXT COLLATE ucs2_other_ci) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci")
    assert replay.portable_collations(ddl, known) == (
        b"CREATE TABLE t (a VARCHAR(5) COLLATE utf8mb4_general_ci, b TEXT COLLATE `utf8mb4_bin`, "
        b"c TEXT COLLATE ucs2_other_ci) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")

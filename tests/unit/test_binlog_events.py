"""The pure binlog readers on events captured from MariaDB 10.11 (CRC32 checksums) and MySQL 9.7."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.errors import RemoteProtocolError
from bridge.model import GtidSet
from bridge.wire import binlog, mysqlgtid, tablemap

FDE = bytes.fromhex(
    "16700e6b0f01000000fc000000000100000100040031302e31312e31392d4d6172696144422d302b646562313275312d6c6f67000000000000"
    "00000000000000000000000000000000000013380d000800120004040404120000e400041a08000000080808020000000a0a0a00000000000"
    "00a0a0a000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000041304000d0808080a0a0a01a9755fce")
GTID = bytes.fromhex("16700e6ba2010000002a000000dc0300000800ab11000000000000000000000c000000000000a55fd448")
DDL_GTID = bytes.fromhex("16700e6ba2010000002a000000ab0100000800a8110000000000000000000029000000000000db0d7832")
QUERY = bytes.fromhex(
    "16700e6b02010000007d0000007b07000000004a000000000000000000001a0000000000010100002054000000000603737464042d002d002d"
    "0000494e5345525420494e544f206361702e74202869642c206e616d652c206e292056414c554553202832202b2052414e442833292a302c"
    "2040762c20406929a5cba153")
TABLE_MAP = bytes.fromhex(
    "16700e6b130100000067000000c604000000002700000000000100036361700001740008030ff610fefc11080a140007030201f7010203fe01"
    "01800302082d0415026964046e616d65016401620165016a027473016e0a012d06050201780179080100a240d9b7")
WRITE = bytes.fromhex(
    "16700e6b170100000041000000070500000000270000000000010008ff800100000006d872737465647ff3fe0b020102050068656c6c6f5e"
    "0d5da51a7c9c1a967a")
UPDATE = bytes.fromhex(
    "16700e6b1801000000650000005d0600000000270000000000010008ffff800100000006d872737465647ff3fe0b020102050068656c6c6f"
    "5e0d5da51a7c000100000001787ff3fe0b020102050068656c6c6f5e0d5da51a7cfbffffffffffffff4923f6a0")
USER_VAR_STR = bytes.fromhex("16700e6b0e0100000029000000cf0600000000010000007600002d000000030000007374728d404626")
USER_VAR_INT = bytes.fromhex("16700e6b0e010000002f000000fe0600000000010000006900020800000008000000f9ffffffffffffff00f66842d2")


def test_format_description():
    fmt = binlog.parse_format_description(FDE)
    assert fmt.server_version == "10.11.19-MariaDB-0+deb12u1-log" and fmt.checksum_bytes == 4
    assert not fmt.flavor.is_mysql and len(fmt.id) == 8
    with pytest.raises(RemoteProtocolError, match="not a FORMAT_DESCRIPTION"):
        binlog.parse_format_description(GTID)


def test_gtids_and_standalone_flag():
    assert binlog.parse_gtid(GTID) == ("0-1-4523", False)
    assert binlog.parse_gtid(DDL_GTID) == ("0-1-4520", True)
    mysql = bytearray(binlog.HEADER_BYTES + 25)
    mysql[4] = binlog.MYSQL_GTID
    mysql[binlog.HEADER_BYTES + 1:binlog.HEADER_BYTES + 17] = bytes(range(16))
    mysql[binlog.HEADER_BYTES + 17:binlog.HEADER_BYTES + 25] = (42).to_bytes(8, "little")
    assert binlog.parse_gtid(bytes(mysql)) == ("00010203-0405-0607-0809-0a0b0c0d0e0f:42", False)


def test_query_event_and_its_session():
    q = binlog.parse_query(QUERY, 4)
    assert q.schema == "" and q.sql.startswith(b"INSERT INTO cap.t (id, name, n)") and q.sql.endswith(b"@v, @i)")
    assert q.sql_mode == 1411383296 and q.charset == (45, 45, 45) and q.timestamp == 1796108310
    assert q.flags2 & binlog.OPTION_EXPLICIT_DEF_TIMESTAMP and not q.flags2 & binlog.OPTION_NO_FOREIGN_KEY_CHECKS


def test_context_events():
    assert binlog.parse_context(USER_VAR_STR, 4) == ("user_var", binlog.UserVar("v", "string", b"str", 45))
    assert binlog.parse_context(USER_VAR_INT, 4) == ("user_var", binlog.UserVar("i", "int", -7, 0))


def test_table_map_with_full_metadata_and_row_images():
    table = tablemap.parse_table_map(TABLE_MAP, 4)
    assert (table.schema, table.table) == ("cap", "t") == binlog.table_map_names(TABLE_MAP)
    assert table.names == ("id", "name", "d", "b", "e", "j", "ts", "n") and table.primary_key == (0,)
    assert table.unsigned[0] and not table.unsigned[7]
    assert table.collations[1] == 8 and table.collations[5] == 45  # latin1 VARCHAR, utf8mb4 TEXT
    [(before, after)] = tablemap.row_images(WRITE, table, 4)
    assert before is None and tablemap.as_int(after[0], True) == 1 and after[7] is None
    assert tablemap.as_text(after[1], table.collations[1]) == "Ørsted" and after[5] == b"hello"
    [(before, after)] = tablemap.row_images(UPDATE, table, 4)
    assert tablemap.as_text(after[1], 8) == "x" and tablemap.as_int(after[7]) == -5
    assert binlog.rows_flags(UPDATE) & binlog.STMT_END_F
    rows = list(tablemap.rows_of(TABLE_MAP + WRITE + TABLE_MAP + UPDATE, 4))
    assert [kind for _, kind, _, _ in rows] == ["insert", "update"]


# MariaDB 11.8, binlog_row_image=FULL: t.a (id INT PRIMARY KEY, v INT, g AS (v*2) VIRTUAL,
# s AS (v+1) STORED); UPDATE t.a SET v=5 WHERE id=1 leaves both generated columns out
TABLE_MAP_11 = bytes.fromhex(
    "fd91116b13010000003d00000000000000000012000000000001000174000161000403030303000e010100040902696401760167017308010037"
    "c98c28")
UPDATE_11 = bytes.fromhex(
    "fd91116b1801000000340000000000000000001200000000000100040303fc0100000001000000fc0100000005000000dd5ce217")


def test_an_image_without_the_generated_columns_reads_them_as_absent():
    table = tablemap.parse_table_map(TABLE_MAP_11, 4)
    [(before, after)] = tablemap.row_images(UPDATE_11, table, 4)
    assert [tablemap.as_int(v) for v in before[:2]] == [1, 1] and [tablemap.as_int(v) for v in after[:2]] == [1, 5]
    assert before[2:] == after[2:] == (tablemap.ABSENT, tablemap.ABSENT)


def test_split_events_and_bad_sizes():
    assert list(binlog.split_events(TABLE_MAP + WRITE)) == [TABLE_MAP, WRITE]
    with pytest.raises(RemoteProtocolError, match="bad event size"):
        list(binlog.split_events(TABLE_MAP + WRITE[:-1]))


@pytest.mark.parametrize("raw,precision,scale,text", [
    (bytes.fromhex("7ff3fe0b"), 7, 3, "-12.500"), (bytes.fromhex("800c01f4"), 7, 3, "12.500"),
    (bytes.fromhex("80000000"), 7, 3, "0.000")])
def test_binary_decimal(raw, precision, scale, text):
    assert binlog.decimal_text(raw, precision, scale) == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 4))
@example(b"\x00" * 31 + b"\x01\x02", 0)  # a QUERY event whose status variables end inside one (found by hypothesis)
def test_garbage_gives_a_protocol_error_or_a_value(data, checksum_bytes):
    for parse in (lambda d: binlog.parse_query(d, checksum_bytes), lambda d: tablemap.parse_table_map(d, 4),
                  lambda d: list(binlog.split_events(d)), lambda d: binlog.parse_context(d, 4),
                  lambda d: tablemap.row_images(WRITE[:19] + d, tablemap.parse_table_map(TABLE_MAP, 4), 4)):
        try:
            parse(data)
        except RemoteProtocolError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(TABLE_MAP) - 1), st.integers(0, 255))
def test_a_flipped_byte_in_a_table_map_never_crashes(at, value):
    event = bytearray(TABLE_MAP)
    event[at] = value
    try:
        table = tablemap.parse_table_map(bytes(event), 4)
        list(tablemap.rows_of(bytes(event) + WRITE, 4)) if table.table_id == 39 else None
    except RemoteProtocolError:
        pass


# Written by MySQL 9.7.4 (server uuid 7db303a4-ef4f-11f1-8897-02fc00000001) for
# `SET gtid_next='AUTOMATIC:bridge_tag'` then one INSERT: the tagged GTID event's body, and
# the Previous_gtids event of the next binlog (uuid:1-3:bridge_tag:1-2)
TAGGED_GTID_BODY = bytes.fromhex(
    "027e00000002facd02069102bd039e22c50321025d0204f10300000002040406146272696467655f74616708000a040c7fccb26ebebf61"
    "061071041283120b")
PREVIOUS_GTIDS_TAGGED = bytes.fromhex(
    "01020000000000017db303a4ef4f11f1889702fc00000001000100000000000000010000000000000004000000000000007db303a4ef"
    "4f11f1889702fc00000001146272696467655f746167010000000000000001000000000000000300000000000000")
PREVIOUS_GTIDS_UNTAGGED = bytes.fromhex(
    "01000000000000007db303a4ef4f11f1889702fc00000001010000000000000001000000000000000300000000000000")


def _event(etype: int, body: bytes) -> bytes:
    size = binlog.HEADER_BYTES + len(body) + 4
    return bytes(4) + bytes([etype]) + (1).to_bytes(4, "little") + size.to_bytes(4, "little") + bytes(6) + body + \
        bytes(4)


def test_a_tagged_gtid_event_reads_as_the_server_wrote_it():
    assert binlog.parse_gtid(_event(binlog.MYSQL_GTID_TAGGED, TAGGED_GTID_BODY)) == \
        ("7db303a4-ef4f-11f1-8897-02fc00000001:bridge_tag:1", False)
    with pytest.raises(RemoteProtocolError, match="gtid event: truncated"):
        binlog.parse_gtid(_event(binlog.MYSQL_GTID_TAGGED, TAGGED_GTID_BODY[:30]))
    untagged = TAGGED_GTID_BODY[:TAGGED_GTID_BODY.index(bytes.fromhex("0614"))]  # up to the tag field
    with pytest.raises(RemoteProtocolError, match="tagged gtid event: no uuid, tag or gno"):
        binlog.parse_gtid(_event(binlog.MYSQL_GTID_TAGGED, untagged))


def test_gtid_sets_encode_as_the_server_encodes_them_with_and_without_tags():
    uuid = "7db303a4-ef4f-11f1-8897-02fc00000001"
    parts = [(key, list(ivs)) for key, ivs in GtidSet.parse(f"{uuid}:1-3:bridge_tag:1-2").mysql]
    assert mysqlgtid.encode_gtid_set(parts) == PREVIOUS_GTIDS_TAGGED
    assert mysqlgtid.encode_gtid_set([(uuid, [(1, 2)])]) == PREVIOUS_GTIDS_UNTAGGED


@pytest.mark.parametrize("value", [0, 1, 63, 64, 127, 128, 300, 2**14 - 1, 2**14, 2**21, 2**49 - 1, 2**56 - 1, 2**56,
                                   2**63, 2**64 - 1])
def test_mysql_serialization_varlen_round_trips_in_the_fewest_bytes(value):
    data = mysqlgtid.write_varlen(value)
    assert mysqlgtid.varlen(data + b"\x00", 0) == (value, len(data))
    assert len(data) == min(9, max(1, (value.bit_length() + 6) // 7))

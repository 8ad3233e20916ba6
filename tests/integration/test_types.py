"""Every column type round-trips through the bridge bit for bit (both transports), the
type tables of the primary's flavor: MariaDB's (UUID, INET6, ...) or MySQL's (JSON,
VECTOR, spatial types, utf8mb4_0900 collations, invisible columns)."""

import pytest

from bridge.server.flavor import Flavor

TYPES_TABLE = """CREATE TABLE {s}.types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d1 DECIMAL(5,2), d2 DECIMAL(65,30), d3 DECIMAL(20,10), f FLOAT, db DOUBLE,
  b1 BIT(1), b3 BIT(3), b64 BIT(64),
  dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
  tm TIME, tm2 TIME(2), tm6 TIME(6), y YEAR,
  c CHAR(5), vc VARCHAR(300), tx TEXT, mtx MEDIUMTEXT, lat VARCHAR(10) CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(10), bl BLOB, lbl LONGBLOB,
  j JSON, e ENUM('x','y','zz'), st SET('a','b','c')
) ENGINE=InnoDB"""

ROWS = [
    # extremes
    """(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
        -9223372036854775808, 18446744073709551615, -999.99, 12345678901234567890123456789012345.123456789012345678901234567890,
        0.0000000000, -3.4e38, 1.7976931348623157e308, b'1', b'101', b'1111111111111111111111111111111111111111111111111111111111111111',
        '1000-01-01', '9999-12-31 23:59:59', '2024-02-29 12:34:56.789012', '2038-01-19 03:14:07', '1970-01-01 00:00:01.001',
        '-838:59:59', '-838:59:59.99', '838:59:59.000001', 2155,
        'ab', REPEAT('é', 300), 'utf8mb4 😀 中文', REPEAT('x', 70000), 'Ørsted',
        x'00ff0000', x'0000', x'00', REPEAT(x'00ff', 40000), '{"k": [1, 2.5, null, "v"]}', 'zz', 'a,c')""",
    # NULLs everywhere but the key
    "(2" + ", NULL" * 39 + ")",
    # zeros, empties, trailing-space and trailing-zero traps
    """(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.00, 0, 0E-10, 0, -0.0, b'0', b'000', b'0',
        '2020-02-02', '2020-02-02 00:00:00', '2020-02-02 00:00:00.000001', NULL, NULL,
        '00:00:00', '-00:00:00.01', '-00:00:01.000001', 1901,
        '', '', '', '', '', x'01000000', x'', x'', x'', '{}', 'x', '')""",
]


def _any_mysql(conns) -> bool:
    return any(Flavor.of(conn).is_mysql for conn in conns)


def type_rows(*conns) -> list[str]:
    """ROWS within the ranges of every one of ``conns``' servers (the primary's and the
    replica's): MySQL's TIME stops at 838:59:59.000000 (MariaDB's at ...59.999999)."""
    if not _any_mysql(conns):
        return ROWS
    return [row.replace("'-838:59:59.99'", "'-838:59:58.99'").replace("'838:59:59.000001'", "'838:59:58.000001'")
            for row in ROWS]


def test_type_matrix_round_trips(pair, fresh_schema):
    s = fresh_schema("types")
    pair.sql(f"CREATE DATABASE {s}", TYPES_TABLE.format(s=s))
    for row in type_rows(pair.primary, pair.replica):
        pair.sql(f"INSERT INTO {s}.types VALUES {row}")
    pair.sql(f"UPDATE {s}.types SET f=1.1, db=2.2, tm2='-12:00:00.5', b64=b'1010', bn=x'0a000000' WHERE id=1",
             f"UPDATE {s}.types SET id=30 WHERE id=3",
             f"DELETE FROM {s}.types WHERE id=2")
    pair.assert_same(s)


def test_zero_dates_under_permissive_sql_mode(pair, fresh_schema):
    s = fresh_schema("zero")
    pair.sql(f"CREATE DATABASE {s}", "SET SESSION sql_mode=''",  # MySQL's default sql_mode refuses the DEFAULT
             f"CREATE TABLE {s}.z (id INT PRIMARY KEY, d DATE NOT NULL, dt DATETIME(3) NOT NULL, "
             "ts TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00', dn DATE NULL)",
             f"INSERT INTO {s}.z VALUES (1, '0000-00-00', '0000-00-00 00:00:00.000', '0000-00-00 00:00:00', NULL)",
             f"INSERT INTO {s}.z VALUES (2, '2020-00-10', '2020-05-00 10:11:12.345', NOW(), '0000-00-00')",
             f"UPDATE {s}.z SET d='2021-01-01' WHERE id=1",
             f"DELETE FROM {s}.z WHERE id=2",
             f"INSERT INTO {s}.z VALUES (3, '0000-00-00', '2021-01-01', '0000-00-00 00:00:00', '2000-00-00')",
             "SET SESSION sql_mode=DEFAULT")
    pair.assert_same(s)


def test_keyless_table_by_all_columns_with_every_type(pair, fresh_schema):
    s = fresh_schema("keyless")
    pair.sql(f"CREATE DATABASE {s}",
             f"CREATE TABLE {s}.k (a INT, d DECIMAL(10,3), t VARCHAR(10), b VARBINARY(4), tm TIME(3), st SET('p','q'), "
             "bn BINARY(4))",
             f"INSERT INTO {s}.k VALUES (1, 1.5, 'x', x'00', '-01:00:00.5', 'p', x'00ff'), "
             "(1, 1.5, 'x', x'00', '-01:00:00.5', 'p', x'00ff'), "
             "(NULL, NULL, NULL, NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             f"UPDATE {s}.k SET t='y' WHERE a=1 LIMIT 1",
             f"DELETE FROM {s}.k WHERE a IS NULL LIMIT 1")
    result = pair.assert_same(s)
    assert result.digests[f"{s}.k"][0].rows == 3


MORE_TYPES = """CREATE TABLE {s}.more (
  id BIGINT UNSIGNED PRIMARY KEY,
  tt TINYTEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, mb MEDIUMBLOB,
  du DECIMAL(10,4) UNSIGNED, fu FLOAT UNSIGNED, f73 FLOAT(7,3), dbu DOUBLE UNSIGNED,
  u UUID, i6 INET6, i4 INET4, g POINT, geo GEOMETRY,
  cb CHAR(3) BINARY, vbin VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  ucs VARCHAR(10) CHARACTER SET ucs2, u16 VARCHAR(10) CHARACTER SET utf16,
  u16le VARCHAR(10) CHARACTER SET utf16le, u32 VARCHAR(10) CHARACTER SET utf32, sj VARCHAR(10) CHARACTER SET sjis
)"""


def test_mariadb_specific_and_wide_types(pair, fresh_schema, mysql_primary, mysql_replica):
    if mysql_primary:
        pytest.skip("MariaDB's own types (UUID, INET6, INET4); MySQL's are in test_mysql_specific_and_wide_types")
    if mysql_replica:
        pytest.skip("MariaDB's own types (UUID, INET6, INET4): a MySQL replica has none of them (a native one "
                    "stops at the CREATE TABLE too)")
    s = fresh_schema("more")
    pair.sql(f"CREATE DATABASE {s}", MORE_TYPES.format(s=s),
             f"""INSERT INTO {s}.more VALUES (18446744073709551615, 'tiny', REPEAT('m', 70000), REPEAT('l', 100000),
                 x'00ff00', REPEAT(x'ab00', 40000), 123456.7890, 3.5, -1234.567, 1e300,
                 '123e4567-e89b-12d3-a456-426614174000', '2001:db8::ff00:42:8329', '192.0.2.1',
                 ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)'),
                 'ab', 'CaSe', 'ucs ü', 'utf16 😀', 'le 😀', 'u32 😀', 'ｶﾀｶﾅ漢字')""",
             f"INSERT INTO {s}.more (id) VALUES (0)",
             f"UPDATE {s}.more SET i6='::1', u='00000000-0000-0000-0000-000000000001', g=ST_GeomFromText('POINT(3 4)') "
             "WHERE id=0")
    pair.assert_same(s)


FAST_TYPES = """CREATE TABLE {s}.fast (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d1 DECIMAL(5,2), d2 DECIMAL(65,30), d3 DECIMAL(20,10), d4 DECIMAL(10,0), du DECIMAL(10,4) UNSIGNED,
  f FLOAT, db DOUBLE,
  dt DATE, dtm6 DATETIME(6), dtm DATETIME, dtm3 DATETIME(3), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
  tm TIME, tm2 TIME(2), tm5 TIME(5), tm6 TIME(6), y YEAR,
  c CHAR(5), vc VARCHAR(300), tx TEXT, tt TINYTEXT, mtx MEDIUMTEXT, lat VARCHAR(10) CHARACTER SET latin1,
  u16 VARCHAR(10) CHARACTER SET utf16, u32 CHAR(4) CHARACTER SET utf32, sj VARCHAR(10) CHARACTER SET sjis,
  bn BINARY(4), vb VARBINARY(10), bl BLOB, lbl LONGBLOB, e ENUM('x','y','zz'), u UUID, i6 INET6
) ENGINE=InnoDB"""

FAST_ROWS = [
    """(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
        -9223372036854775808, 18446744073709551615, -999.99,
        -12345678901234567890123456789012345.123456789012345678901234567890, 0.0000000001, 9999999999, 0.0001,
        -3.4e38, 1.7976931348623157e308,
        '1000-01-01', '9999-12-31 23:59:59.999999', '2024-02-29 12:34:56', '2001-01-01 00:00:00.5',
        '2038-01-19 03:14:07', '1970-01-01 00:00:01.001',
        '-838:59:59', '-838:59:59.99', '-00:00:00.00001', '838:59:59.000001', 2155,
        'ab ', REPEAT('é', 300), 'utf8mb4 😀 中文', 'tiny', REPEAT('x', 70000), 'Ørsted',
        'utf16 😀', '😀x', 'ｶﾀｶﾅ漢字', x'00ff0000', x'0000', x'00', REPEAT(x'00ff', 40000), 'zz',
        '123e4567-e89b-12d3-a456-426614174000', '2001:db8::ff00:42:8329')""",
    "(2" + ", NULL" * 44 + ")",
    """(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.00, 0, 0E-10, 0, 0, 0, -0.0,
        '0000-00-00', '0000-00-00 00:00:00', '2020-00-10 10:11:12', '2020-05-00 00:00:00.5',
        '0000-00-00 00:00:00', NULL,
        '00:00:00', '-00:00:00.01', '-00:00:01', '-00:00:01.000001', 0,
        '', '', '', '', '', '', '', '', '', x'01000000', x'', x'', x'', 'x', NULL, NULL)""",
]


_MARIADB_FAST = (", u UUID, i6 INET6", (",\n        '123e4567-e89b-12d3-a456-426614174000', '2001:db8::ff00:42:8329')",
                                        ", NULL, NULL)"))


def fast_types(*conns) -> tuple[str, list[str]]:
    """(FAST_TYPES, FAST_ROWS) every one of ``conns``' servers holds: MySQL has no UUID or
    INET6 type, and its TIME stops at 838:59:59.000000."""
    if not _any_mysql(conns):
        return FAST_TYPES, FAST_ROWS
    columns, (first_end, third_end) = _MARIADB_FAST
    rows = [FAST_ROWS[0].replace(first_end, ")").replace("'838:59:59.000001'", "'838:59:58.000001'")
            .replace("'-838:59:59.99'", "'-838:59:58.99'"),
            "(2" + ", NULL" * 42 + ")", FAST_ROWS[2].replace(third_end, ")")]
    return FAST_TYPES.replace(columns, ""), rows


MYSQL_TYPES = """CREATE TABLE {s}.mysql (
  id BIGINT UNSIGNED PRIMARY KEY,
  tt TINYTEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, mb MEDIUMBLOB,
  du DECIMAL(10,4), f73 FLOAT(7,3), j JSON, j2 JSON,
  g POINT, geo GEOMETRY, pg POLYGON, mp MULTIPOINT, gc GEOMETRYCOLLECTION, gs POINT SRID 4326,
  v VECTOR(3),
  cb CHAR(3) BINARY, vbin VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  v0900 VARCHAR(10) COLLATE utf8mb4_0900_as_cs, ja VARCHAR(10) COLLATE utf8mb4_ja_0900_as_cs,
  ucs VARCHAR(10) CHARACTER SET ucs2, u16 VARCHAR(10) CHARACTER SET utf16, sj VARCHAR(10) CHARACTER SET sjis,
  hidden INT INVISIBLE DEFAULT 7, ts TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6)
)"""
# JSON as MySQL stores it: objects, arrays, every scalar kind, escapes, opaque DECIMAL and
# temporal values (CAST), large documents (the large object form)
MYSQL_JSON = [
    """'{"a": 1, "b": [1, 2.5, -3, null, true, false, "x"], "ü": {"nested": {"deep": []}}, "": ""}'""",
    """'[18446744073709551615, -9223372036854775808, 65535, -32768, 4294967295, 0.1, 1e300, -2.5e-7, 100.0]'""",
    "JSON_ARRAY(CONVERT(CONCAT('quote ', CHAR(34), ' backslash ', CHAR(92), ' tab', CHAR(9), ' newline', CHAR(10), "
    "' control', CHAR(1), ' slash / emoji 😀') USING utf8mb4))",
    "JSON_ARRAY(CHAR(0, 1, 255), x'00ff', REPEAT(x'ab', 200))",  # binary strings: opaque, in base64
    "JSON_OBJECT('dec', CAST(12.50 AS DECIMAL(6,2)), 'date', CAST('2024-02-29' AS DATE), "
    "'dt', CAST('2024-02-29 12:34:56.5' AS DATETIME(6)), 'time', CAST('-12:00:01.25' AS TIME(2)))",
    "JSON_OBJECT('big', REPEAT('x', 70000), 'list', JSON_ARRAY(1, 2, 3))",
    "'{}'", "'[]'", "'null'", "'true'", "'3'", "'\"s\"'",
]


def mysql_types(replica) -> str:
    """MYSQL_TYPES for the ``replica`` connection's server: MariaDB (10.11) has no VECTOR
    and no SRID column attribute."""
    if Flavor.of(replica).is_mysql:
        return MYSQL_TYPES
    return MYSQL_TYPES.replace("gs POINT SRID 4326,", "").replace("v VECTOR(3),", "")


def test_mysql_specific_and_wide_types(pair, fresh_schema, mysql_primary):
    if not mysql_primary:
        pytest.skip("MySQL's own types (JSON in binary form, VECTOR, SRID points); MariaDB's are in "
                    "test_mariadb_specific_and_wide_types")
    s = fresh_schema("mysqltypes")
    documents = MYSQL_JSON
    if pair.apply_mode == "sql" and Flavor.of(pair.replica).is_mysql:
        # JSON text has no DECIMAL or temporal scalar: replayed as SQL into MySQL they become a
        # number and strings (12.50 reads back as 12.5); binlog mode keeps them (docs/operations.md)
        documents = [d for d in MYSQL_JSON if "CAST(12.50" not in d]
    rows = [f"""({i}, 'tiny', REPEAT('m', 70000), REPEAT('l', 100000), x'00ff00', REPEAT(x'ab00', 40000),
                 123456.7890, -1234.567, {doc}, {documents[-1 - i % len(documents)]},
                 ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)'),
                 ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 2 1, 2 2, 1 1))'),
                 ST_GeomFromText('MULTIPOINT((1 1), (2 2))'),
                 ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))'),
                 ST_GeomFromText('POINT(45 9)', 4326), STRING_TO_VECTOR('[1.5, -2, 3.25e10]'),
                 'ab', 'CaSe', 'Straße', 'カタカナ', 'ucs ü', 'utf16 😀', 'ｶﾀｶﾅ漢字', '2024-01-01 00:00:00.5')"""
            for i, doc in enumerate(documents)]
    columns = "(id, tt, mt, lt, tb, mb, du, f73, j, j2, g, geo, pg, mp, gc, gs, v, cb, vbin, v0900, ja, ucs, u16, " \
              "sj, ts)"
    table, vector = mysql_types(pair.replica).format(s=s), ", v=STRING_TO_VECTOR('[0, 0, 1]')"
    if not Flavor.of(pair.replica).is_mysql:
        columns, vector = columns.replace(" gs, v,", ""), ""
        rows = [r.replace(" ST_GeomFromText('POINT(45 9)', 4326), STRING_TO_VECTOR('[1.5, -2, 3.25e10]'),", "")
                for r in rows]
    pair.sql(f"CREATE DATABASE {s}", table, *[f"INSERT INTO {s}.mysql {columns} VALUES {row}" for row in rows],
             f"INSERT INTO {s}.mysql (id) VALUES (1000)",
             f"UPDATE {s}.mysql SET j=JSON_SET(j, '$.added', 'yes'), hidden=8{vector} WHERE id < 3",
             f"UPDATE {s}.mysql SET j2=NULL, g=ST_GeomFromText('POINT(3 4)') WHERE id=1000",
             f"DELETE FROM {s}.mysql WHERE id=4")
    result = pair.assert_same(s)
    assert result.digests[f"{s}.mysql"][0].rows == len(rows)


def test_our_row_decoder_gives_the_library_path_values_exactly(urls, fresh_schema):
    """Every covered type read twice from the same binlog range: our row-image decoder
    and the library's (with the reader's fixes) must give identical events."""
    from bridge.lab.workload import connect
    from bridge.source.events import RowsRead
    from bridge.source.reader import BinlogReader
    from tests.conftest import primary_position

    s = fresh_schema("fast")
    conn = connect(urls["primary_admin"])
    try:
        start = primary_position(conn)
        fast_table, fast_rows = fast_types(conn)
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode=''")
            for stmt in (f"CREATE DATABASE {s}", fast_table.format(s=s),
                         *[f"INSERT INTO {s}.fast VALUES {row}" for row in fast_rows],
                         f"UPDATE {s}.fast SET f=1.5, tm5='-10:00:00.5', y=1901, vc='changed', bn=x'0a' WHERE id=1",
                         f"UPDATE {s}.fast SET id=30, d2=-0.5 WHERE id=3", f"DELETE FROM {s}.fast WHERE id=2"):
                cur.execute(stmt)
        end = primary_position(conn)
    finally:
        conn.close()

    def rows_events(fast: bool, server_id: int) -> list:
        reader, out = BinlogReader(urls["primary"], server_id, start, fast_rows=fast), []
        try:
            while True:
                ev = reader.next_event()
                if isinstance(ev, RowsRead):
                    out.append(ev)
                    if len(out) == 6:
                        return out
        finally:
            reader.close()

    ours, library = rows_events(True, 6101), rows_events(False, 6102)
    assert end and [e.kind for e in ours] == ["insert", "insert", "insert", "update", "update", "delete"]
    for a, b in zip(ours, library):
        assert a.columns == b.columns and a.key == b.key
        for row_a, row_b in zip(a.rows, b.rows):
            for image_a, image_b in zip(row_a, row_b):
                if image_a != image_b:
                    diffs = [(col, x, y) for col, x, y in zip(a.columns, image_a, image_b) if x != y]
                    raise AssertionError(f"{a.kind}: ours vs library differ: {diffs}")
        assert a.rows == b.rows


def test_covered_types_round_trip(pair, fresh_schema):
    s = fresh_schema("fastrt")
    fast_table, fast_rows = fast_types(pair.primary, pair.replica)
    pair.sql(f"CREATE DATABASE {s}", "SET SESSION sql_mode=''", fast_table.format(s=s),
             *[f"INSERT INTO {s}.fast VALUES {row}" for row in fast_rows],
             f"UPDATE {s}.fast SET f=1.5, tm5='-10:00:00.5', y=1901, vc='changed', bn=x'0a' WHERE id=1",
             f"UPDATE {s}.fast SET id=30, d2=-0.5 WHERE id=3", f"DELETE FROM {s}.fast WHERE id=2",
             "SET SESSION sql_mode=DEFAULT")
    pair.assert_same(s)


def test_raw_row_walker_reads_every_type_the_library_reads(urls, fresh_schema):
    """Binlog apply mode reads row images only for keys, heartbeats and repair markers, but
    it must walk every column type correctly: the same row counts and key values as the
    library's decode, for all three type tables."""
    from bridge.lab.workload import connect
    from bridge.source.events import RawRowEvent, RowsRead
    from bridge.source.reader import BinlogReader
    from bridge.wire import tablemap
    from tests.conftest import primary_position

    s = fresh_schema("walk")
    conn = connect(urls["primary_admin"])
    try:
        start = primary_position(conn)
        fast_table, fast_rows = fast_types(conn)
        mysql = Flavor.of(conn).is_mysql
        more = (MYSQL_TYPES.format(s=s).replace(f"{s}.mysql", f"{s}.more"),
                f"INSERT INTO {s}.more (id, j, g, v) VALUES (1, '[1, {{\"a\": 2}}]', POINT(1, 2), "
                "STRING_TO_VECTOR('[1, 2, 3]')), (2, NULL, NULL, NULL)") if mysql else \
            (MORE_TYPES.format(s=s), f"INSERT INTO {s}.more (id, u, g) VALUES (1, UUID(), POINT(1, 2)), (2, NULL, NULL)")
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode=''")
            for stmt in (f"CREATE DATABASE {s}", TYPES_TABLE.format(s=s), more[0], fast_table.format(s=s),
                         *[f"INSERT INTO {s}.types VALUES {row}" for row in type_rows(conn)],
                         more[1],
                         *[f"INSERT INTO {s}.fast VALUES {row}" for row in fast_rows],
                         f"UPDATE {s}.types SET b64=b'1', j='[1]', st='b'", f"DELETE FROM {s}.fast",
                         f"CREATE TABLE {s}.done (id INT PRIMARY KEY)", f"INSERT INTO {s}.done VALUES (1)"):
                cur.execute(stmt)
    finally:
        conn.close()

    def events(raw: bool, server_id: int) -> list:
        """Row events up to the one on the 'done' table."""
        reader, out = BinlogReader(urls["primary"], server_id, start, fast_rows=False, raw_rows=raw), []
        try:
            while True:
                ev = reader.next_event()
                if isinstance(ev, RawRowEvent if raw else RowsRead):
                    if (ev.table == (s, "done")) if raw else (ev.table == "done"):
                        return out, reader.format.checksum_bytes
                    out.append(ev)
        finally:
            reader.close()

    library, _ = events(False, 6103)
    raw, checksum = events(True, 6104)
    walked = list(tablemap.rows_of(b"".join(e.event for e in raw), checksum))
    assert len(walked) == sum(len(e.rows) for e in library) == 3 + 2 + 3 + 3 + 3
    for (table, kind, before, after), (lib_event, (lib_before, lib_after)) in zip(
            walked, [(e, r) for e in library for r in e.rows]):
        assert (table.table, kind) == (lib_event.table, lib_event.kind)
        assert table.names == lib_event.columns
        for mine, theirs in ((before, lib_before), (after, lib_after)):
            assert (mine is None) == (theirs is None)
            if mine is not None:
                assert tablemap.as_int(mine[0], table.unsigned[0]) == theirs[0]  # the key
                assert [v is None for v in mine] == [v is None for v in theirs]


def test_mysql_binary_json_reads_as_the_text_mysql_prints(urls, fresh_schema, mysql_primary):
    """A MySQL primary's JSON column arrives in its binary form; the reader turns it into
    exactly the text MySQL prints for it (what MariaDB, whose JSON is text, then holds)."""
    if not mysql_primary:
        pytest.skip("only MySQL logs JSON in binary form (MariaDB's is text)")
    from bridge.lab.workload import connect
    from bridge.source.events import RowsRead
    from bridge.source.reader import BinlogReader
    from tests.conftest import primary_position

    s = fresh_schema("jsontext")
    conn = connect(urls["primary_admin"])
    try:
        start = primary_position(conn)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.j (id INT PRIMARY KEY, doc JSON)")
            for i, doc in enumerate(MYSQL_JSON):
                cur.execute(f"INSERT INTO {s}.j VALUES ({i}, {doc})")
            cur.execute(f"SELECT doc FROM {s}.j ORDER BY id")
            printed = [row[0] for row in cur.fetchall()]
    finally:
        conn.close()
    reader, read = BinlogReader(urls["primary"], 6105, start), []
    try:
        while len(read) < len(MYSQL_JSON):
            ev = reader.next_event()
            if isinstance(ev, RowsRead) and ev.table == "j":
                read += [after[1] for _, after in ev.rows]
    finally:
        reader.close()
    assert read == printed

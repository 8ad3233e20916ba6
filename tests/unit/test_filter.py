"""The channel filter (bridge.filter): rules, statements' targets and renames, and the
binlog events rewritten as the replica's server will read them (events captured from
MariaDB 10.11 with CRC32 checksums)."""

import struct
import zlib

import pytest

from bridge.errors import ApplyError, ConfigError
from bridge.filter import EVERYTHING, Filter, filter_changes
from bridge.filter.events import _reseal, filter_row_events, rename_table_map, rewrite_query
from bridge.filter.sqltext import rename, targets
from bridge.model import RowChange, RowEvents, Statement
from bridge.wire import binlog, tablemap
from tests.unit.test_binlog_events import QUERY, TABLE_MAP, UPDATE, WRITE

CRC = 4


def _crc_ok(event: bytes) -> bool:
    return struct.unpack("<I", event[-4:])[0] == zlib.crc32(event[:-4]) & 0xFFFFFFFF \
        and binlog.event_size(event) == len(event)


def _variant(event: bytes, table_id: int, flags: int | None = None) -> bytes:
    """The same event for another table id (and row-event flags), resealed."""
    body = bytearray(event[:-CRC])
    body[19:25] = table_id.to_bytes(6, "little")
    if flags is not None:
        body[25:27] = struct.pack("<H", flags)
    return bytes(body) + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def test_rules_match_include_exclude_and_rename():
    rules = Filter.parse(["shop", "app.t*"], ["shop.log*"], ["shop=store"])
    assert rules.keeps("shop", "orders") and not rules.keeps("shop", "log1")
    assert rules.keeps("app", "tx") and not rules.keeps("app", "x") and not rules.keeps("other", "t")
    assert rules.keeps("rdma_bridge", "heartbeat")  # the bridge's own rows always travel
    assert rules.keeps_schema("app") and not rules.keeps_schema("other")
    assert rules.target("shop") == "store" and rules.target("app") == "app"
    assert rules.source("store") == "shop" and rules.source("shop") is None and rules.source("app") == "app"
    assert Filter.from_json(rules.to_json()) == rules and not rules.everything and EVERYTHING.everything
    assert rules.describe() == "include shop, app.t*; exclude shop.log*; rename shop=store"
    assert not Filter.parse(exclude=["x"]).keeps_schema("x") and Filter.parse(exclude=["x.t"]).keeps_schema("x")


def test_narrowing_is_allowed_widening_is_not():
    rules = Filter.parse(["shop", "app"], ["shop.log"], ["shop=store"])
    assert Filter.parse(["shop"], ["shop.log", "shop.tmp"], ["shop=store"]).narrows(rules)
    assert not Filter.parse(["shop", "app", "more"], ["shop.log"], ["shop=store"]).narrows(rules)
    assert not Filter.parse(["shop", "app"], [], ["shop=store"]).narrows(rules)  # the excluded table comes back
    assert not Filter.parse(["shop", "app"], ["shop.log"]).narrows(rules)  # rename dropped
    assert Filter.parse(exclude=["big.logs"]).narrows(EVERYTHING) and not EVERYTHING.narrows(rules)


@pytest.mark.parametrize("include, exclude, renames, message", [
    (["shop."], [], [], "write schema or schema.table"),
    ([], [], ["shop"], "write FROM=TO"),
    ([], [], ["a=b*"], "write FROM=TO"),
    ([], [], ["rdma_bridge=x"], "keep their names"),
    ([], [], ["mysql=x"], "keep their names"),
    ([], [], ["a=x", "a=y"], "a is renamed twice"),
    ([], [], ["a=x", "b=x"], "x is the target of two renames"),
])
def test_bad_rules_are_refused_naming_them(include, exclude, renames, message):
    with pytest.raises(ConfigError, match=message):
        Filter.parse(include, exclude, renames)


@pytest.mark.parametrize("sql, expected", [
    (b"CREATE TABLE t (id int)", [("db", "t")]),
    (b"create table if not exists `shop`.`o``x` (id int)", [("shop", "o`x")]),
    (b"CREATE OR REPLACE TABLE s.t LIKE u", [("s", "t")]),
    (b"ALTER ONLINE TABLE a ADD c INT, RENAME TO other.b", [("db", "a"), ("other", "b")]),
    (b"ALTER TABLE a RENAME COLUMN x TO y", [("db", "a")]),
    (b"DROP TABLE IF EXISTS a, shop.b", [("db", "a"), ("shop", "b")]),
    (b"RENAME TABLE a TO b, c.d TO e.f", [("db", "a"), ("db", "b"), ("c", "d"), ("e", "f")]),
    (b"TRUNCATE TABLE t", [("db", "t")]),
    (b"CREATE UNIQUE INDEX i ON shop.t (a)", [("shop", "t")]),
    (b"DROP INDEX i ON t", [("db", "t")]),
    (b"CREATE DATABASE IF NOT EXISTS x", [("x", "")]),
    (b"DROP SCHEMA `x`", [("x", "")]),
    (b"CREATE DEFINER=`root`@`localhost` TRIGGER trg BEFORE INSERT ON orders FOR EACH ROW SET NEW.a=1",
     [("db", "orders")]),
    (b"CREATE TRIGGER s.trg AFTER DELETE ON orders FOR EACH ROW DELETE FROM x.y", [("s", "orders")]),
    (b"DROP TRIGGER IF EXISTS x.trg", [("x", "")]),
    (b"CREATE DEFINER=root@localhost PROCEDURE p() BEGIN END", [("db", "")]),
    (b"DROP FUNCTION IF EXISTS s.f", [("s", "")]),
    (b"CREATE ALGORITHM=UNDEFINED DEFINER=`r`@`%` SQL SECURITY DEFINER VIEW `v2` AS select 1", [("db", "v2")]),
    (b"/*!40000 ALTER TABLE `t` DISABLE KEYS */", [("db", "t")]),
    (b"INSERT IGNORE INTO s.t VALUES (1)", [("s", "t")]),
    (b"DELETE FROM t WHERE 1", [("db", "t")]),
    (b"GRANT ALL ON *.* TO x", None),
    (b"ANALYZE TABLE t", None),
])
def test_statement_targets(sql, expected):
    found = targets(sql, "db")
    assert (None if found is None else [(t.schema, t.table) for t in found]) == expected
    if found:  # routines, events, views and triggers: created after the rows by clone
        objects = any(w in sql.upper() for w in (b"TRIGGER", b"PROCEDURE", b"FUNCTION", b"VIEW"))
        assert all(t.objects == objects for t in found), found


def test_rename_rewrites_qualified_names_and_database_statements_only():
    r = {"shop": "store"}
    assert rename(b"CREATE TABLE shop.t (id int)", r) == b"CREATE TABLE `store`.t (id int)"
    assert rename(b"create database shop", r) == b"create database `store`"
    assert rename(b"CREATE OR REPLACE DATABASE IF NOT EXISTS `shop`", r) == \
        b"CREATE OR REPLACE DATABASE IF NOT EXISTS `store`"
    # strings, comments, unqualified names and a column of that name are left alone
    assert rename(b"select shop.t.a, 'shop.x', t.shop from `shop`.t, shop /* shop.t */", r) == \
        b"select `store`.t.a, 'shop.x', t.shop from `store`.t, shop /* shop.t */"
    assert rename(b"ALTER TABLE shop . t ADD c int", r) == b"ALTER TABLE `store` . t ADD c int"
    assert rename(b"CREATE VIEW `shop`.`v` AS select `shop`.`t`.`a` AS `a` from `shop`.`t`", {"shop": "a`b"}) == \
        b"CREATE VIEW `a``b`.`v` AS select `a``b`.`t`.`a` AS `a` from `a``b`.`t`"


def test_table_map_renamed_is_read_back_with_the_same_rows():
    renamed = rename_table_map(TABLE_MAP, "a_much_longer_schema_name", CRC)
    assert _crc_ok(renamed) and binlog.table_map_names(renamed) == ("a_much_longer_schema_name", "t")
    before = list(tablemap.rows_of(TABLE_MAP + WRITE + UPDATE, CRC))
    after = list(tablemap.rows_of(renamed + WRITE + UPDATE, CRC))
    assert [r[1:] for r in after] == [r[1:] for r in before] and len(after) == 2
    assert after[0][0].names == before[0][0].names


def test_row_events_filtered_renamed_and_statement_end_moved():
    rows = RowEvents(TABLE_MAP + WRITE + UPDATE, (("cap", "t"),), 2)
    assert filter_row_events(rows, Filter.parse(exclude=["cap.t"]), CRC) is None
    assert filter_row_events(rows, EVERYTHING, CRC) == rows
    out = filter_row_events(rows, Filter.parse(renames=["cap=copy"]), CRC)
    assert out.tables == (("copy", "t"),) and out.events == 2
    assert all(_crc_ok(e) for e in binlog.split_events(out.data))
    # one statement over two tables: t (id 39, kept) and log (id 40, dropped). The
    # statement's flagged last event is log's: t's last event takes the flag.
    log_map = _variant(_reseal(TABLE_MAP[:32] + b"\x03log" + TABLE_MAP[34:-CRC], CRC), 40)  # table 't' -> 'log'
    assert binlog.table_map_names(log_map) == ("cap", "log")
    data = TABLE_MAP + log_map + _variant(WRITE, 39, 0) + _variant(WRITE, 40, binlog.STMT_END_F)
    out = filter_row_events(RowEvents(data, (("cap", "t"), ("cap", "log")), 2), Filter.parse(exclude=["*.log"]),
                            CRC)
    kept = list(binlog.split_events(out.data))
    assert out.tables == (("cap", "t"),) and out.events == 1 and len(kept) == 2
    assert binlog.rows_flags(kept[1]) & binlog.STMT_END_F and all(_crc_ok(e) for e in kept)
    # a statement whose rows are all dropped leaves none of its TABLE_MAPs behind
    data = TABLE_MAP + log_map + _variant(WRITE, 40, binlog.STMT_END_F) + TABLE_MAP + WRITE
    out = filter_row_events(RowEvents(data, (), 2), Filter.parse(exclude=["*.log"]), CRC)
    assert out.data == TABLE_MAP + WRITE and out.tables == (("cap", "t"),)


def test_query_event_rewritten_keeps_its_session():
    renamed = rewrite_query(QUERY, CRC, "store", b"INSERT INTO `store`.t (id) VALUES (1)")
    query, original = binlog.parse_query(renamed, CRC), binlog.parse_query(QUERY, CRC)
    assert _crc_ok(renamed) and query.schema == "store" and query.sql == b"INSERT INTO `store`.t (id) VALUES (1)"
    assert (query.flags2, query.sql_mode, query.charset, query.status) == \
        (original.flags2, original.sql_mode, original.charset, original.status)


def test_changes_of_both_apply_modes_filtered():
    rules = Filter.parse(["shop"], ["shop.log"], ["shop=store"])
    row = RowChange("insert", "shop", "orders", ("id",), ("id",), None, (1,))
    changes = (row, RowChange("insert", "shop", "log", ("id",), (), None, (1,)),
               RowChange("insert", "other", "t", ("id",), (), None, (1,)),
               Statement("shop", "ALTER TABLE log ADD c INT"), Statement("shop", "ALTER TABLE orders ADD c INT"),
               Statement("", "CREATE DATABASE other"), Statement("shop", "GRANT SELECT ON shop.* TO u"))
    out = filter_changes(changes, rules, CRC, "seq 1")
    assert out == (RowChange("insert", "store", "orders", ("id",), ("id",), None, (1,)),
                   Statement("store", "ALTER TABLE orders ADD c INT"), Statement("store", "GRANT SELECT ON `store`.* TO u"))
    raw = Statement("", QUERY and "INSERT INTO cap.t (id, name, n) VALUES (2 + RAND(3)*0, @v, @i)", QUERY)
    kept = filter_changes((raw,), Filter.parse(renames=["cap=copy"]), CRC, "seq 2")[0]
    assert binlog.parse_query(kept.raw, CRC).sql == b"INSERT INTO `copy`.t (id, name, n) VALUES (2 + RAND(3)*0, @v, @i)"
    with pytest.raises(ApplyError, match="changes tables this channel replicates and tables it filters out"):
        filter_changes((Statement("shop", "RENAME TABLE orders TO other.orders"),), rules, CRC, "seq 3")


def test_tables_copied_later_are_left_out_until_the_stream_passes_them():
    rules = Filter(renames=(("shop", "store"),), copied_later=frozenset({("store", "orders"), ("store", "")}))
    assert not rules.everything and not rules.keeps("shop", "orders") and rules.keeps("shop", "items")
    changes = (RowChange("insert", "shop", "orders", ("id",), ("id",), None, (1,)),
               RowChange("insert", "shop", "items", ("id",), ("id",), None, (1,)),
               Statement("shop", "CREATE PROCEDURE p() BEGIN END"),  # the schema's objects: copied later
               Statement("shop", "CREATE TRIGGER tr BEFORE INSERT ON items FOR EACH ROW SET NEW.id = 1"),
               Statement("shop", "ALTER TABLE items ADD c INT"))
    assert filter_changes(changes, rules, CRC, "seq 1") == (
        RowChange("insert", "store", "items", ("id",), ("id",), None, (1,)), Statement("store", "ALTER TABLE items ADD c INT"))
    assert Filter.from_json(rules.to_json()) == Filter(renames=(("shop", "store"),))  # never recorded

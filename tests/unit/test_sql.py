import datetime as dt
from decimal import Decimal

from bridge.apply.sql import decimal_literal, is_replayed, row_statement, time_literal, to_param
from bridge.model import BitValue, InvalidTemporal, RowChange

COLS = ("id", "name")


def test_insert():
    sql, params = row_statement(RowChange("insert", "s", "t", COLS, ("id",), None, (1, "a")))
    assert sql == "/* rdma-bridge */ INSERT INTO `s`.`t` (`id`,`name`) VALUES (%s,%s)"
    assert params == [1, "a"]


def test_update_by_key_uses_the_before_image_key():
    sql, params = row_statement(RowChange("update", "s", "t", COLS, ("id",), (1, "a"), (2, "b")))
    assert sql == "/* rdma-bridge */ UPDATE `s`.`t` SET `id`=%s,`name`=%s WHERE `id`=%s"
    assert params == [2, "b", 1]


def test_keyless_delete_matches_all_columns_null_safe_once():
    sql, params = row_statement(RowChange("delete", "s", "t", COLS, (), (1, None), None))
    assert sql == "/* rdma-bridge */ DELETE FROM `s`.`t` WHERE `id`<=>%s AND `name`<=>%s LIMIT 1"
    assert params == [1, None]


def test_names_with_backticks_are_quoted():
    sql, _ = row_statement(RowChange("insert", "we`ird", "t", ("c`1",), (), None, (1,)))
    assert "`we``ird`.`t` (`c``1`)" in sql


def test_params_and_literals():
    assert to_param(InvalidTemporal("0000-00-00")) == "0000-00-00"
    assert to_param(BitValue(5, 3)) == 5
    assert to_param(frozenset({"b", "a"})) == "a,b"
    assert decimal_literal(Decimal("0E-10")) == "0.0000000000"
    assert time_literal(-dt.timedelta(seconds=1.25)) == "'-00:00:01.250000'"
    assert time_literal(dt.timedelta(hours=838, minutes=59, seconds=59)) == "'838:59:59.000000'"


def test_account_statements_are_not_replayed():
    assert not is_replayed("GRANT SELECT ON *.* TO x")
    assert not is_replayed("/* c */ CREATE USER 'a'@'%'")
    assert is_replayed("CREATE TABLE users (id INT)")


def test_consecutive_inserts_merge_into_multi_row_statements():
    from bridge.apply.sql import grouped_statements

    ins = [RowChange("insert", "s", "t", COLS, ("id",), None, (i, "x")) for i in range(3)]
    other = RowChange("insert", "s", "u", COLS, ("id",), None, (9, "y"))
    upd = RowChange("update", "s", "t", COLS, ("id",), (1, "x"), (1, "z"))
    out = grouped_statements([*ins, other, upd, ins[0]])
    assert [(rows, change.table) for _, _, change, rows in out] == [(3, "t"), (1, "u"), (1, "t"), (1, "t")]
    assert out[0][0].endswith("VALUES (%s,%s),(%s,%s),(%s,%s)") and out[0][1] == [0, "x", 1, "x", 2, "x"]

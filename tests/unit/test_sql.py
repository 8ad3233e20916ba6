import datetime as dt
from decimal import Decimal

from bridge.apply.sql import decimal_literal, row_statement, statement_kind, time_literal, to_param
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


def test_statements_are_told_apart_account_flush_other():
    assert statement_kind("GRANT SELECT ON *.* TO x") == "account"
    assert statement_kind("/* c */ CREATE USER 'a'@'%'") == "account"
    assert statement_kind("set password for a = password('x')") == "account"
    assert statement_kind("FLUSH PRIVILEGES") == "flush"
    assert statement_kind("CREATE TABLE users (id INT)") == "other"


def test_consecutive_inserts_merge_into_multi_row_statements():
    from bridge.apply.sql import grouped_statements

    ins = [RowChange("insert", "s", "t", COLS, ("id",), None, (i, "x")) for i in range(3)]
    other = RowChange("insert", "s", "u", COLS, ("id",), None, (9, "y"))
    upd = RowChange("update", "s", "t", COLS, ("id",), (1, "x"), (1, "z"))
    out = grouped_statements([*ins, other, upd, ins[0]])
    assert [(p.rows, p.change.table, p.expect) for p in out] == [(3, "t", None), (1, "u", None), (1, "t", 1),
                                                                 (1, "t", None)]
    assert out[0].text.endswith("VALUES (%s,%s),(%s,%s),(%s,%s)") and out[0].params == [0, "x", 1, "x", 2, "x"]


def upd(i, before, after, key=("id",), table="t"):
    return RowChange("update", "s", table, COLS, key, (i, before), (i, after))


def test_updates_keeping_their_key_become_one_delete_that_must_match_all_and_one_insert():
    from bridge.apply.sql import grouped_statements

    out = grouped_statements([upd(1, "a", "b"), upd(2, "c", "d"), upd(1, "b", "e")])
    assert [p.text.split(" WHERE")[0].split(" VALUES")[0] for p in out] == [
        "/* rdma-bridge */ DELETE FROM `s`.`t`", "/* rdma-bridge */ INSERT INTO `s`.`t` (`id`,`name`)"]
    assert out[0].text.endswith("WHERE `id` IN (%s,%s)") and out[0].params == [1, 2] and out[0].expect == 2
    assert out[1].params == [1, "e", 2, "d"]  # row 1's last image


def test_key_folding_keeps_case_variants_of_one_key_together():
    from bridge.apply.sql import grouped_statements

    out = grouped_statements([RowChange("update", "s", "t", ("k", "v"), ("k",), ("Ab", 1), ("Ab", 2)),
                              RowChange("update", "s", "t", ("k", "v"), ("k",), ("ab", 2), ("ab", 3))])
    assert out[0].expect == 1 and out[1].params == ["ab", 3]


def test_deletes_merge_but_a_repeated_key_starts_a_new_statement():
    from bridge.apply.sql import grouped_statements

    dels = [RowChange("delete", "s", "t", COLS, ("id",), (i, "x"), None) for i in (1, 2, 1)]
    out = grouped_statements(dels)
    assert [(p.expect, p.params) for p in out] == [(2, [1, 2]), (1, [1])]


def test_composite_keys_key_changes_and_keyless_rows_are_not_merged_wrongly():
    from bridge.apply.sql import grouped_statements

    comp = [RowChange("delete", "s", "t", COLS, ("id", "name"), (i, "n"), None) for i in (1, 2)]
    out = grouped_statements(comp)
    assert out[0].text.endswith("WHERE (`id`=%s AND `name`=%s) OR (`id`=%s AND `name`=%s)")
    assert out[0].params == [1, "n", 2, "n"] and out[0].expect == 2
    moved = RowChange("update", "s", "t", COLS, ("id",), (1, "a"), (5, "a"))
    keyless = RowChange("update", "s", "t", COLS, (), (1, "a"), (1, "b"))
    out = grouped_statements([upd(3, "a", "b"), moved, keyless, upd(4, "a", "b")])
    assert [(p.text.split()[3], p.expect, p.params[-1]) for p in out] == [
        ("UPDATE", 1, 3), ("UPDATE", 1, 1), ("UPDATE", 1, "a"), ("UPDATE", 1, 4)]  # in order, one by one

"""Why a row event does not fit the replica's table (bridge.apply.binlog.mismatch), from a
TABLE_MAP's columns and the replica's information_schema rows: what a BINLOG statement's
"Unknown error" leaves unsaid."""

from bridge.apply.binlog import mismatch
from bridge.wire import tablemap as tm

CHARSETS = {8: "latin1", 45: "utf8mb4", 46: "utf8mb4", 63: "binary"}


def table(types, sizes, collations, names=("id", "db", "note")):
    return tm.TableMap(1, "rdma_bridge", "repairs", tuple(types), tuple(sizes), tuple(names), (False,) * len(types),
                       tuple(collations), (0,))


def test_the_same_columns_explain_nothing():
    t = table([tm.LONGLONG, tm.VARCHAR, tm.BLOB], [8, -2, -2], [None, 45, 45])
    assert mismatch.explain(t, [("id", "bigint", None, None), ("db", "varchar", 256, "utf8mb4"),
                                ("note", "text", 65535, "utf8mb4")], CHARSETS) == []


def test_a_character_set_a_length_and_a_text_size_apart_are_each_named():
    t = table([tm.LONGLONG, tm.VARCHAR, tm.BLOB], [8, -1, -3], [None, 8, 46])
    found = mismatch.explain(t, [("id", "bigint", None, None), ("db", "varchar", 256, "utf8mb4"),
                                 ("note", "text", 65535, "utf8mb4")], CHARSETS)
    assert found == ["rdma_bridge.repairs.db is in character set latin1 on the primary, utf8mb4 on the replica",
                     "rdma_bridge.repairs.note is text on the replica, a 3-byte length TINY/MEDIUM/LONG TEXT or "
                     "BLOB on the primary"]


def test_another_type_a_missing_table_and_other_columns():
    t = table([tm.LONG, tm.VARCHAR, tm.BLOB], [4, -2, -2], [None, 45, 45])
    assert mismatch.explain(t, [("id", "bigint", None, None), ("db", "varchar", 256, "utf8mb4"),
                                ("note", "text", 65535, "utf8mb4")], CHARSETS) == \
        ["rdma_bridge.repairs.id is LONG on the primary, bigint on the replica"]
    assert mismatch.explain(t, [], CHARSETS) == ["rdma_bridge.repairs does not exist on the replica"]
    assert mismatch.explain(t, [("id", "int", None, None)], CHARSETS) == \
        ["rdma_bridge.repairs has 3 columns on the primary, 1 on the replica"]

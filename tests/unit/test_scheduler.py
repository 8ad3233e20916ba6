"""The writeset scheduler: which segments of a window conflict, and how a window is cut."""

from hypothesis import given
from hypothesis import strategies as st

from bridge.apply.scheduler import conflicts, fold, plan, writeset
from bridge.model import RowChange, RowEvents, Statement, Transaction
from tests.unit.test_binlog_events import TABLE_MAP_11, UPDATE_11

COLS = ("id", "email", "n")
KEYS = {("s", "users"): (("id",), ("email",)), ("s", "log"): ()}


def keys(schema, table):
    return KEYS.get((schema, table), ())


def upd(i, before_email, after_email, table="users"):
    return RowChange("update", "s", table, COLS, ("id",), (i, before_email, 0), (i, after_email, 1))


def ins(i, email, table="users"):
    return RowChange("insert", "s", table, COLS, ("id",), None, (i, email, 0))


def txn(n, *changes):
    return n, Transaction(f"0-1-{n}", changes)


def test_distinct_primary_keys_do_not_conflict():
    assert not writeset(txn(1, ins(1, "a"))[1], keys) & writeset(txn(2, ins(2, "b"))[1], keys)


def test_same_primary_key_conflicts_through_before_or_after_image():
    moved = RowChange("update", "s", "users", COLS, ("id",), (1, "a", 0), (7, "a", 0))
    assert writeset(txn(1, moved)[1], keys) & writeset(txn(2, ins(7, "z"))[1], keys)
    assert writeset(txn(1, moved)[1], keys) & writeset(txn(2, upd(1, "q", "r"))[1], keys)


def test_unique_key_conflicts_across_different_primary_keys():
    # row 1 gives up an email that row 2 takes: the order matters on the unique index
    assert writeset(txn(1, upd(1, "x@a", "y@a"))[1], keys) & writeset(txn(2, ins(2, "x@a"))[1], keys)


def test_unique_values_are_folded_like_a_case_and_accent_insensitive_collation():
    assert fold("Été ") == fold("ete")
    assert writeset(txn(1, ins(1, "Ann@x"))[1], keys) & writeset(txn(2, ins(2, "ann@x  "))[1], keys)
    assert fold(b"A") != fold(b"a")  # binary values compare exactly


def test_null_unique_values_never_conflict():
    assert not writeset(txn(1, ins(1, None))[1], keys) & writeset(txn(2, ins(2, None))[1], keys)


def test_a_table_without_keys_conflicts_as_a_whole():
    a = RowChange("insert", "s", "log", COLS, (), None, (1, "a", 0))
    b = RowChange("delete", "s", "log", COLS, (), (9, "b", 0), None)
    assert writeset(txn(1, a)[1], keys) & writeset(txn(2, b)[1], keys)


def test_without_a_key_lookup_the_event_primary_key_is_used():
    assert writeset(txn(1, ins(1, "a"))[1], lambda *_: ()) & writeset(txn(2, ins(1, "b"))[1], lambda *_: ())


def test_statements_add_nothing():
    assert writeset(Transaction("0-1-1", (Statement("s", "CREATE TABLE t (i int)"),)), keys) == frozenset()


def test_uniform_window_splits_into_independent_segments():
    items = [txn(i, ins(i, f"u{i}")) for i in range(1, 41)]
    segments = plan(items, 4, keys)
    assert [len(s.items) for s in segments] == [10, 10, 10, 10]
    assert [s.waits_for for s in segments] == [-1, -1, -1, -1]
    assert [seq for s in segments for seq, _ in s.items] == list(range(1, 41))  # consecutive, in order
    assert conflicts(segments) == 0


def test_hot_spot_window_chains_every_segment_to_the_one_before():
    items = [txn(i, upd(i % 2, "h", "h")) for i in range(1, 41)]
    segments = plan(items, 4, keys)
    assert [s.waits_for for s in segments] == [-1, 0, 1, 2]
    assert conflicts(segments) == 3


def test_a_segment_waits_for_the_latest_earlier_segment_it_touches():
    items = [txn(1, ins(1, "a")), txn(2, ins(2, "b")), txn(3, upd(1, "a", "c")), txn(4, ins(4, "d"))]
    assert [s.waits_for for s in plan(items, 4, keys)] == [-1, -1, 0, -1]


def test_segments_are_balanced_by_rows():
    big = txn(1, *[ins(i, f"b{i}") for i in range(100, 190)])
    items = [big] + [txn(i, ins(i, f"s{i}")) for i in range(2, 12)]
    segments = plan(items, 2, keys)
    assert [len(s.items) for s in segments] == [1, 10]
    assert segments[0].rows == 90 and segments[1].rows == 10


@given(st.lists(st.integers(1, 12), min_size=1, max_size=60), st.integers(1, 8))
def test_plan_keeps_every_transaction_once_in_order_and_orders_every_conflict(row_ids, workers):
    items = [txn(n, upd(r, "e", "e")) for n, r in enumerate(row_ids, start=1)]
    segments = plan(items, workers, keys)
    assert 1 <= len(segments) <= workers
    assert [seq for s in segments for seq, _ in s.items] == list(range(1, len(row_ids) + 1))
    for later in segments:
        for earlier in segments[:later.index]:
            if earlier.writeset & later.writeset:
                assert later.waits_for >= earlier.index  # it starts after that one committed


def test_a_unique_key_on_a_column_the_image_leaves_out_conflicts_as_the_whole_table():
    update = Transaction("0-1-1", (RowEvents(TABLE_MAP_11 + UPDATE_11, (("t", "a"),), 1),))
    by_id = writeset(update, lambda s, t: (("id",),), 4)
    by_g = writeset(update, lambda s, t: (("id",), ("g",)), 4)
    assert len(by_id) == 1 and hash(("t", "a")) not in by_id  # the primary key is in both images
    assert hash(("t", "a")) in by_g
